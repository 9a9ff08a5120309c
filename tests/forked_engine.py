"""The engine child's command in the suite (``JACKIN_ENGINE_COMMAND``; tests/zygote.py, ``Zygote.engine_command``).

``python -I -S tests/forked_engine.py SOCKET`` hands its stdin, stdout and stderr to the engine zygote
listening on SOCKET, which forks an engine with pyinfra and gevent already loaded, and then stands for
that engine as the client sees it: a signal sent to it (``Engine.close``'s terminate) is passed on,
and it exits with the engine's status. Killed outright (the client's watchdog), it takes the engine
with it: the zygote's waiter sees its connection close. Standard library only, and no ``site``: it
costs a bare interpreter's start, not pyinfra's imports.
"""

import json
import os
import signal
import socket
import sys


def main(path: str) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    message = json.dumps({"argv": [], "cwd": os.getcwd(), "env": dict(os.environ)}).encode() + b"\n"
    socket.send_fds(conn, [message], [0, 1, 2])
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # the engine's stdout reaches its end when the engine's own copy closes, not ours
    pid, pending = 0, []

    def forward(sig: int, _frame: object) -> None:
        if pid:
            os.kill(pid, sig)
        else:
            pending.append(sig)  # before the engine's pid came: passed on when it does

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    status = b""
    while True:
        data = conn.recv(4096)
        if not data:
            print("forked_engine: the engine zygote went away", file=sys.stderr)
            return 70
        status += data
        for line in status.decode().split("\n")[:-1]:
            kind, _, value = line.partition(" ")
            if kind == "pid" and not pid:
                pid = int(value)
                for sig in pending:
                    os.kill(pid, sig)
            elif kind == "exit":
                code = int(value)
                return code if code >= 0 else 128 - code  # a signal's death, as a shell reports it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
