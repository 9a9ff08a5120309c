"""Waiting for lab hosts to boot: sshd answers with the host's pinned key and systemd is up."""

from __future__ import annotations

import time

from jackin.errors import ConnectError, LabError
from jackin.lab.models import LabHost, Log
from jackin.transport import fanout
from jackin.transport.target import SshTarget

# Booted: systemd finished starting, ``running`` or ``degraded`` (a unit failed: the host still works;
# its failed units are printed after the state). ``is-system-running`` exits 1 when degraded, so its
# state is judged here: waiting on its exit status alone waited out the whole timeout on a host that
# booted with one failed unit.
BOOTED = (
    's=$(systemctl is-system-running --wait 2>/dev/null); echo "$s"; case "$s" in running) exit 0 ;; '
    "degraded) systemctl --failed --no-legend --plain 2>/dev/null | head -n 5; exit 0 ;; esac; "
    'echo "systemd is ${s:-not answering}" >&2; exit 1'
)


def wait_ready(target: SshTarget, *, timeout: float = 90, command: str = "true") -> str:
    """``jackin.transport.ssh.wait_ready`` (paramiko and Fabric are loaded by lab.up, not by every command's start)."""
    from jackin.transport import ssh  # lazy: paramiko and Fabric, for lab.up only

    return ssh.wait_ready(target, timeout=timeout, command=command)


def wait_booted(hosts: list[LabHost], timeout: float, log: Log) -> None:
    """Wait until every host has booted: sshd answers with its pinned key and systemd is up."""
    started = time.monotonic()

    def ready(target: SshTarget) -> None:
        out = wait_ready(target, timeout=timeout, command=BOOTED)
        state, *failed = out.strip().splitlines() or [""]
        if state not in ("running", "degraded"):
            raise LabError(f"systemd says {state!r}", host=target.name)
        if failed:
            log(f"{target.name}: booted degraded; failed units: {', '.join(f.split()[0] for f in failed if f.split())}")

    errors = list(fanout.each_host([h.target() for h in hosts], ready, workers=16).failed.values())
    if len(errors) == 1:
        raise errors[0]
    if errors:  # every host that failed, not only the first
        kind = ConnectError if all(isinstance(e, ConnectError) for e in errors) else LabError
        raise kind(f"{len(errors)} of {len(hosts)} lab hosts are not ready: " + "; ".join(map(str, errors)),
                   hint="inv lab.up again replaces broken hosts; inv lab.status shows each host")  # fmt: skip
    log(f"{len(hosts)} host(s) ready in {time.monotonic() - started:.1f}s")
