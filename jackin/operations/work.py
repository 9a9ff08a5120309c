"""The commands that deliver each agent's work, and those that remove it (pure: no pyinfra).

Layout and ownership: jackin/work/bundles.py. The bundle and the task come from the operator's blob store
(written by ``jackin.work.bundles.prepare``) by the digests in the plan (``file_data`` below: this reader of
the store sits here, with its only reader, so operations need nothing above them), reach the host by SFTP into the root-only
staging directory, and are installed root:<agent gid> 0440 in a directory only root writes, then
renamed into place (the container sees the old file or the new one, never half of one). A file
whose digest matches the host's record, with the owner and mode planned, is left alone: a second
``fleet.up`` with the same work rewrites nothing; a changed task is re-delivered on its own.
Nothing here reads or writes a path an agent controls.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

from jackin.facts.state import HostState, PathInfo
from jackin.hostpaths import STATE_DIR, UPLOAD_DIR, WORK_DIR
from jackin.hostpaths import work_digests as digests_file
from jackin.hostpaths import work_dir as fleet_dir
from jackin.operations.credentials import children, root_dir
from jackin.operations.files import Command, Refused, Upload, write_files
from jackin.paths import private_dir, state_dir
from jackin.plan.fleet import AgentPlan, FleetPlan, WorkPlan

FILES = ("repo.bundle", "task.md", "work.json")  # what each agent's work directory holds (task.md: when it has a task)
QUEUE = "queue"  # the digest record's line ``queue ATTEMPT``: fleet.work delivered the work (jackin/work/handover.py)
FILE_MODE = "0440"
DIR_MODE = "0750"


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


# --- the operator's work store, read back by digest ---------------------------------------------


def store() -> Path:
    """The operator's work store (``state_dir()/work``): blobs by sha256, bundles by commit, mirrors."""
    return private_dir(state_dir() / "work")


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob(name: str) -> bytes | None:
    """The bytes kept under ``name`` (a sha256), or None when missing or not what the name says."""
    if len(name) != 64 or not all(c in "0123456789abcdef" for c in name):
        return None
    try:
        data = (store() / "blobs" / name).read_bytes()
    except OSError:
        return None
    return data if digest(data) == name else None


def work_json(plan: WorkPlan) -> bytes:
    """``work.json`` as the entrypoint reads it: compact JSON (its ``field`` reads ``"key":"value"``)."""
    body = {"schema_version": 1, "repo": plan.name, "ref": plan.ref, "commit": plan.commit, "branch": plan.branch}
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


def file_data(plan: WorkPlan, name: str) -> bytes | None:
    """The bytes of one delivered file of ``plan``: work.json made from the plan, the others from the blob store."""
    if name == "work.json":
        return work_json(plan)
    return blob(plan.files.get(name, ""))


# --- the commands -----------------------------------------------------------------------------


def _agent(agent: AgentPlan, state: HostState) -> list[Command]:
    """One agent's work directory and files (changed ones re-delivered, others left alone) and digest record."""
    work = agent.work
    assert work is not None
    have = state.work_digests.get(agent.instance, {})
    if QUEUE in have:  # delivered by fleet.work for a task of the queue: the queue's until the agent leaves the plan
        return []
    if not {"repo.bundle", "work.json"} <= set(work.files) <= set(FILES) or not work.commit:
        raise Refused(f"the work of agent {agent.instance} was not prepared on the operator's machine "
                      "(run the deploy through inv fleet.up, which bundles the repository first)")  # fmt: skip
    directory = agent.work_dir
    entries = children(state.work, directory)
    file_ok = PathInfo(kind="f", mode=FILE_MODE, uid=0, gid=agent.uid)
    dir_ok = state.work.get(directory) == PathInfo(kind="d", mode=DIR_MODE, uid=0, gid=agent.uid)
    wanted = [n for n in FILES if n in work.files]  # task.md only with a task
    deliver = [n for n in wanted if not dir_ok or entries.get(n) != file_ok or have.get(n) != work.files[n]]
    stale = sorted(set(entries) - set(wanted))
    if not deliver and not stale and have == work.files:
        return []
    commands: list[Command] = [] if dir_ok else [*root_dir(directory, DIR_MODE, agent.uid)]
    commands += [q("rm", "-rf", "--one-file-system", "--", f"{directory}/{name}") for name in stale]
    if deliver:
        staging = f"{UPLOAD_DIR}/work-{agent.instance}-{digest(''.join(work.files[n] for n in deliver).encode())[:16]}"
        commands += [q("rm", "-rf", staging), q("install", "-d", "-m", "0700", UPLOAD_DIR, staging)]
        for n, name in enumerate(deliver):
            data = file_data(work, name)
            if data is None or digest(data) != work.files[name]:
                raise Refused(f"{name} of agent {agent.instance} is not in this machine's work store "
                              "(run inv fleet.up again: it bundles the repository first)")  # fmt: skip
            target, new = f"{directory}/{name}", f"{directory}/.{name}.jackin-new"
            commands.append(Upload(data, f"{staging}/{n}", target=target, mode=FILE_MODE))
            commands.append(q("install", "-m", FILE_MODE, "-o", "0", "-g", str(agent.uid), "-T", f"{staging}/{n}", new))
            commands.append(q("mv", "-f", "-T", new, target))
        commands += [q("rm", "-rf", staging), f"rmdir {shlex.quote(UPLOAD_DIR)} 2>/dev/null || true"]
    record = "".join(f"{name} {work.files[name]}\n" for name in sorted(work.files))
    path = digests_file(agent.fleet, agent.instance)
    return commands + write_files({path: record}, modes={path: "0600"})  # last: a failure re-delivers


def work_commands(plan: FleetPlan, state: HostState) -> list[Command]:
    """Commands that bring every agent's delivered work on the host to the plan: delivered where changed,
    removed where the agent has no work any more or left the plan."""
    wanted = {a.instance: a for a in plan.agents if a.work is not None}
    if not wanted:
        return [*teardown_commands(plan.fleet, state)]
    base = fleet_dir(plan.fleet)
    commands: list[Command] = []
    if state.work.get(base) != PathInfo(kind="d", mode="0700", uid=0, gid=0):
        commands += [f"[ -d {STATE_DIR} ] || install -d -m 0700 {STATE_DIR}", *root_dir(WORK_DIR, "0700", 0),
                     *root_dir(base, "0700", 0)]  # fmt: skip
    for name in sorted(children(state.work, base)):
        if name.removesuffix(".digests") not in wanted:
            commands.append(q("rm", "-rf", "--one-file-system", "--", f"{base}/{name}"))
    for agent in wanted.values():
        commands += _agent(agent, state)
    return commands


def teardown_commands(fleet: str, state: HostState) -> list[str]:
    """Remove the fleet's delivered work (fleet.down, with or without --keep-data: the repository is the operator's)."""
    if not state.work:
        return []
    return [q("rm", "-rf", "--one-file-system", "--", fleet_dir(fleet)), f"rmdir {WORK_DIR} 2>/dev/null || true"]


def lines(plan: FleetPlan, commands: list[Command]) -> list[str]:
    """What a work step does, for fleet.plan: "work of coder-1: deliver repo.bundle (N bytes), task.md"."""
    owner = {a.work_dir: a.instance for a in plan.agents}
    delivered: dict[str, list[str]] = {}
    out, other = [], 0
    for command in commands:
        if isinstance(command, Upload) and command.target.rpartition("/")[0] in owner:
            directory, _, name = command.target.rpartition("/")
            delivered.setdefault(owner[directory], []).append(f"{name} ({len(command.data)} bytes)")
        elif isinstance(command, str) and command.startswith("rm -rf --one-file-system"):
            out.append(f"remove {shlex.split(command)[-1]}")
        else:
            other += 1
    out = [f"work of {instance}: deliver {', '.join(names)}" for instance, names in delivered.items()] + out
    if other:
        out.append(f"{other} command(s) for the work directories, staging and digest record")
    return out


__all__ = ["lines", "teardown_commands", "work_commands"]
