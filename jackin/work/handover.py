"""fleet.work's handover of one agent from its finished task to the next, on its host, in one round trip.

Root, over strict SSH, with the files on the command's stdin (never in its command line):

1. the task's files (``task.md``, ``work.json``, and ``repo.bundle`` when the host's record has another) are read
   from stdin into a root-only staging directory and their sizes checked: a cut connection changes nothing;
2. the agent's container is stopped (its entrypoint ends at TERM: nothing of the agent runs during the reset);
3. the files are installed root:<agent gid> 0440 in the agent's work directory, each renamed into place;
4. the workspace is reset: the old one renamed aside (its name is root's, in the home only root writes: never
   followed, removed in the background once the agent runs again) and a new empty one made, the agent's, 0700. Where the fleet's homes are on its btrfs (the checkpoint
   tier), a clean clone of the task's commit is kept per agent and commit (``<home>/.jackin-clean``, root's, never
   mounted in a container), made once by ``git`` in a locked-down run of the agent's own image (no network, no
   capability, the agent's uid), and the new workspace's repository is a copy-on-write copy of it
   (``cp --reflink=always``); elsewhere the entrypoint clones the delivered bundle afresh at the container's start;
5. the work record gets ``queue ATTEMPT`` (``fleet.up`` then leaves the queue's work alone), the container is
   started, and the old workspace removed.

Every step is safe to run again: a handover cut at any point is redone whole by the next ``fleet.work``.
"""

from __future__ import annotations

import shlex
import time

from pydantic import BaseModel, ConfigDict

from jackin.errors import RemoteCommandError
from jackin.hostpaths import UPLOAD_DIR, work_digests
from jackin.operations.work import QUEUE, q
from jackin.plan.fleet import AgentPlan
from jackin.transport import remote
from jackin.transport.target import SshTarget

CLEAN = ".jackin-clean"  # in the agent's home: clean clones by commit (the checkpoint tier only)
OLD = ".jackin-old"  # in the agent's home: ``.jackin-old-<attempt>``, a workspace being removed
STOP_WAIT = 10  # seconds docker stop gives the entrypoint before it kills it
TIMEOUT = 300


class Delivery(BaseModel):
    """What one handover delivers to one agent: its files, and the record that says whose they are."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: AgentPlan
    attempt: int
    files: dict[str, bytes]  # file name -> bytes, those to send (repo.bundle left out when the host has it)
    digests: dict[str, str]  # file name -> sha256 of each of the three: the record
    commit: str
    branch: str  # the agent's own: jackin/<instance>
    cow: bool = False  # the fleet's homes are subvolumes of its btrfs: a copy-on-write copy of a clean clone


def script(delivery: Delivery) -> str:
    """The handover's shell script (root's), reading ``delivery.files`` and then the record from stdin, in order."""
    agent = delivery.agent
    stage = f"{UPLOAD_DIR}/handover-{agent.instance}-{delivery.attempt}"
    home, work, uid = agent.home, agent.workspace, str(agent.uid)
    uploads = [*delivery.files.items(), (RECORD, record(delivery))]
    lines = ["set -eu", "umask 077", f"s={shlex.quote(stage)}", q("rm", "-rf", "--", stage),
             q("install", "-d", "-m", "0700", UPLOAD_DIR, stage)]  # fmt: skip
    for n, (name, data) in enumerate(uploads):
        lines.append(f'head -c {len(data)} > "$s/{n}"')
        lines.append(f'[ "$(wc -c < "$s/{n}")" -eq {len(data)} ] || {{ echo "{name}: the upload was cut short" >&2; '
                     "exit 1; }")  # fmt: skip
    lines.append("trap '' HUP INT PIPE")  # from here on the handover ends even when the operator's side goes away
    lines.append(f"docker stop -t {STOP_WAIT} {shlex.quote(agent.container)} >/dev/null")
    for n, (name, _) in enumerate(uploads[:-1]):  # each on a line of its own: set -e ends the script at a failure
        target, new = f"{agent.work_dir}/{name}", f"{agent.work_dir}/.{name}.jackin-new"
        lines.append(q("install", "-m", "0440", "-o", "0", "-g", uid, "-T", f"{stage}/{n}", new))
        lines.append(q("mv", "-f", "-T", new, target))
    # The old workspace is moved aside under a name of its own (root's, in the home only root writes), never followed,
    # and removed in the background once the agent runs again: a huge one, or one holding what rm cannot remove (a
    # btrfs subvolume the agent made), delays nothing and fails nothing (what is left goes with fleet.down).
    old = f"{home}/{OLD}-{delivery.attempt}"
    lines += [f"if [ -e {shlex.quote(work)} ] || [ -L {shlex.quote(work)} ]; then",
              "  " + q("rm", "-rf", "--one-file-system", "--", old),
              "  " + q("mv", "-T", "--", work, old),
              "fi",
              q("install", "-d", "-m", "0700", "-o", uid, "-g", uid, "--", work)]  # fmt: skip
    if delivery.cow:
        lines += _cow_lines(delivery)
    path = work_digests(agent.fleet, agent.instance)
    sweep = f"rm -rf --one-file-system -- {shlex.quote(home)}/{OLD}-*"
    lines += [q("install", "-m", "0600", "-o", "0", "-g", "0", "-T", f"{stage}/{len(uploads) - 1}", path + ".new"),
              q("mv", "-f", "-T", path + ".new", path),
              f"docker start {shlex.quote(agent.container)} >/dev/null",
              q("rm", "-rf", "--", stage),
              f"setsid -f sh -c {shlex.quote(sweep)} >/dev/null 2>&1 </dev/null || true"]  # fmt: skip
    return "\n".join(lines) + "\n"


RECORD = "the work record"  # the last upload: the digest record with the queue's line


def record(delivery: Delivery) -> bytes:
    """The agent's work record: each file's sha256, and ``queue ATTEMPT`` (fleet.up leaves the queue's work alone)."""
    text = "".join(f"{name} {delivery.digests[name]}\n" for name in sorted(delivery.digests))
    return (text + f"{QUEUE} {delivery.attempt}\n").encode()


def _cow_lines(delivery: Delivery) -> list[str]:
    """The clean clone of the commit (made once, as the agent, in its image) and its copy-on-write copy."""
    agent = delivery.agent
    uid = str(agent.uid)
    clean = f"{agent.home}/{CLEAN}"
    kept = f"{clean}/{delivery.commit}"
    branch = delivery.branch
    clone = ('git clone --quiet --no-checkout /run/jackin/work/repo.bundle /out/repo && '
             'git -C /out/repo checkout --quiet -b "$1" "$2" && '
             'git -C /out/repo config user.name "jackin agent $3" && '
             'git -C /out/repo config user.email "$3@agents.jackin.invalid"')  # fmt: skip
    run = q("docker", "run", "--rm", "--network", "none", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--read-only", "--user", f"{uid}:{uid}", "--memory", "512m", "--memory-swap", "512m", "--pids-limit", "256",
            "--mount", f"type=bind,src={agent.work_dir},dst=/run/jackin/work,readonly",
            "--mount", f"type=bind,src={clean}/new,dst=/out", "--entrypoint", "sh", agent.image,
            "-c", clone, "sh", branch, delivery.commit, agent.instance)  # fmt: skip
    return [
        f"if [ ! -d {shlex.quote(kept)} ]; then",
        "  " + q("rm", "-rf", "--one-file-system", "--", clean),
        "  " + q("install", "-d", "-m", "0750", "-o", "0", "-g", uid, "--", clean),
        "  " + q("install", "-d", "-m", "0700", "-o", uid, "-g", uid, "--", f"{clean}/new"),
        f"  {run} >/dev/null",
        "  " + q("mv", "-T", "--", f"{clean}/new", kept),
        "fi",
        q("cp", "-a", "--reflink=always", "--", f"{kept}/repo", f"{agent.workspace}/repo"),
    ]


def run(target: SshTarget, delivery: Delivery) -> float:
    """The handover on ``target``; the seconds it took. ConnectError: not reached (nothing changed, or the next
    fleet.work redoes it); RemoteCommandError: it failed there (what the host said)."""
    started = time.monotonic()
    done = remote.run(
        target, script(delivery), timeout=TIMEOUT, input=b"".join(delivery.files.values()) + record(delivery)
    )
    if done.exited != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no message"
        raise RemoteCommandError(f"the handover of {delivery.agent.instance} failed (exit {done.exited}): {tail}",
                                 host=target.name)  # fmt: skip
    return time.monotonic() - started


def stop(target: SshTarget, agent: AgentPlan) -> None:
    """Stop the agent's container (its task was cancelled, or its attempt has ended): it spends nothing more until
    its next handover."""
    done = remote.run(target, f"docker stop -t {STOP_WAIT} {shlex.quote(agent.container)} >/dev/null", timeout=60)
    if done.exited != 0:
        raise RemoteCommandError(f"docker stop {agent.container} failed: {done.stderr.strip()[:200]}", host=target.name)
