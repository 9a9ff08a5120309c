"""The commands that deliver each agent's credentials, and those that remove them (pure: no pyinfra).

Values come from ``jackin.engine.secrets`` (the engine's stdin), go to the host by SFTP into
the root-only, tmpfs staging directory, and are installed with the agent's uid and mode 0400
into a directory only root writes (layout: jackin/spec/credentials.py), then renamed into place.
No value is ever in a command line, a command's environment or a preview: an upload shows
only its target. A value whose keyed digest matches the host's record, with the file's
owner and mode as planned, is left alone: an unchanged credential is not rewritten.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets as random
import shlex

from jackin.facts.state import HostState, PathInfo
from jackin.hostpaths import CREDENTIALS_DIR, STATE_DIR, UPLOAD_DIR
from jackin.hostpaths import credentials_digests as digests_file
from jackin.hostpaths import credentials_dir as fleet_dir
from jackin.operations.files import Command, Refused, Upload, write_files
from jackin.plan.fleet import AgentPlan, FleetPlan
from jackin.spec.credentials import DIR_MODE, FILE_MODE, Secrets

_KEY = random.token_bytes(16)  # staging names: stable within this process (pyinfra runs a generator twice)


def _new_key() -> None:  # a forked process is another run: its own key
    global _KEY
    _KEY = random.token_bytes(16)


os.register_at_fork(after_in_child=_new_key)


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


class SecretUpload(Upload):
    """A credential's bytes sent by SFTP to a staging path; shown by target only (not even its size)."""

    def __init__(self, data: bytes, staged: str, *, target: str):
        super().__init__(data, staged, target=target, mode=FILE_MODE)

    @property
    def _data(self) -> bytes:
        return self.data

    def __repr__(self) -> str:
        return f"upload a credential by SFTP to {self.dest} (for {self.target}, mode {FILE_MODE})"

    __str__ = __repr__


def root_dir(path: str, mode: str, gid: int) -> list[str]:
    """``path`` a real directory, root:``gid`` ``mode`` (its parent is root's: nothing here follows an agent's link)."""
    p = shlex.quote(path)
    return [f"{{ [ -d {p} ] && [ ! -L {p} ]; }} || mkdir -m {mode} -- {p}",
            q("chown", "-h", f"0:{gid}", "--", path), q("chmod", "0" + mode, "--", path)]  # fmt: skip


def children(paths: dict[str, PathInfo], parent: str) -> dict[str, PathInfo]:
    """Entries directly in ``parent`` among a state read's ``paths`` (credentials, work), by name."""
    prefix = parent + "/"
    return {p[len(prefix):]: info for p, info in paths.items()
            if p.startswith(prefix) and "/" not in p[len(prefix):]}  # fmt: skip


def _agent(agent: AgentPlan, state: HostState, values: Secrets) -> list[Command]:
    """One agent's directory, files (changed ones re-delivered, others left alone, stale ones removed)
    and digest record."""
    missing = [n for n in agent.credentials if n not in values.names(agent.agent)]
    if missing:
        raise Refused(f"credential {', '.join(missing)} of agent {agent.agent} was not handed to the engine "
                             "(run the deploy through inv fleet.up, which reads credentials first)")  # fmt: skip
    directory = agent.credentials_dir
    delivered = {n: delivered_value(agent, n, values) for n in agent.credentials}
    want = {n: values.digest(agent.fleet, agent.instance, agent.agent, n, delivered[n]) for n in agent.credentials}
    have = state.credential_digests.get(agent.instance, {})
    entries = children(state.credentials, directory)
    file_ok = PathInfo(kind="f", mode=FILE_MODE, uid=agent.uid, gid=agent.uid)
    dir_ok = state.credentials.get(directory) == PathInfo(kind="d", mode=DIR_MODE, uid=0, gid=agent.uid)
    deliver = [n for n in agent.credentials if not dir_ok or entries.get(n) != file_ok or have.get(n) != want[n]]
    stale = sorted(set(entries) - set(agent.credentials))
    if not deliver and not stale and have == want:
        return []
    commands: list[Command] = [] if dir_ok else [*root_dir(directory, DIR_MODE, agent.uid)]
    commands += [q("rm", "-rf", "--one-file-system", "--", f"{directory}/{name}") for name in stale]
    if deliver:
        mac = hmac.new(_KEY, "\0".join(f"{n}={want[n]}" for n in deliver).encode(), hashlib.sha256)
        staging = f"{UPLOAD_DIR}/{agent.instance}-{mac.hexdigest()[:16]}"
        commands += [q("rm", "-rf", staging), q("install", "-d", "-m", "0700", UPLOAD_DIR, staging)]
        for n, name in enumerate(deliver):
            target, new = f"{directory}/{name}", f"{directory}/.{name}.jackin-new"
            commands.append(SecretUpload(delivered[name], f"{staging}/{n}", target=target))
            commands.append(q("install", "-m", FILE_MODE, "-o", str(agent.uid), "-g", str(agent.uid), "-T",
                              f"{staging}/{n}", new))  # fmt: skip
            commands.append(q("mv", "-f", "-T", new, target))  # atomic: the container sees old or new, never half
        commands += [q("rm", "-rf", staging), f"rmdir {shlex.quote(UPLOAD_DIR)} 2>/dev/null || true"]
    record = "".join(f"{name} {want[name]}\n" for name in sorted(want))
    commands += write_files(
        {digests_file(agent.fleet, agent.instance): record}, modes={digests_file(agent.fleet, agent.instance): "0600"}
    )  # last: a failure re-delivers
    return commands


def delivered_value(agent: AgentPlan, name: str, values: Secrets) -> bytes:
    """What the agent's file holds: the value, or in gateway mode its placeholder (jackin/net/gateway.py)."""
    if agent.gateway is not None and agent.gateway.credential == name:
        return values.placeholder(agent.fleet, agent.instance, name)
    return values.value(agent.agent, name)


def credential_commands(plan: FleetPlan, state: HostState, values: Secrets) -> list[Command]:
    """Commands that bring every agent's credentials on the host to the plan: delivered where changed,
    removed where no longer named (an agent's whole directory when it has none left or left the plan)."""
    wanted = {a.instance: a for a in plan.agents if a.credentials}
    base = fleet_dir(plan.fleet)
    if not wanted:
        return [*teardown_commands(plan.fleet, state)]
    commands: list[Command] = []
    if state.credentials.get(base) != PathInfo(kind="d", mode="0700", uid=0, gid=0):
        commands += [f"[ -d {STATE_DIR} ] || install -d -m 0700 {STATE_DIR}", *root_dir(CREDENTIALS_DIR, "0700", 0),
                     *root_dir(base, "0700", 0)]  # fmt: skip
    for name, _info in sorted(children(state.credentials, base).items()):
        instance = name.removesuffix(".digests")
        if instance not in wanted:  # an agent that left the plan or has no credentials left
            commands.append(q("rm", "-rf", "--one-file-system", "--", f"{base}/{name}"))
    for agent in wanted.values():
        commands += _agent(agent, state, values)
    return commands


def teardown_commands(fleet: str, state: HostState) -> list[str]:
    """Remove the fleet's delivered credentials (fleet.down, with or without --keep-data: never kept)."""
    if not state.credentials:
        return []
    return [q("rm", "-rf", "--one-file-system", "--", fleet_dir(fleet)), f"rmdir {CREDENTIALS_DIR} 2>/dev/null || true"]


__all__ = ["SecretUpload", "credential_commands", "teardown_commands"]
