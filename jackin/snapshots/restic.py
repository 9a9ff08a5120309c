"""restic on a host: the paths of a fleet's repository and the commands that use it
(pure builders and parsers, no I/O).

Host layout (all root's, 0700 directories and 0600 files; agents cannot reach it)::

    /var/lib/jackin/snapshots/<fleet>/repo              the fleet's restic repository on this host
    /var/lib/jackin/snapshots/<fleet>/password          its password (uploaded by SFTP)
    /var/lib/jackin/snapshots/<fleet>/cache             restic's cache (never root's ~/.cache)
    /var/lib/jackin/snapshots/<fleet>/manifests/<i>.json  the agent's manifest, backed up with its home
    /usr/local/lib/jackin/restic                        restic uploaded from the operator, when the host has none

The password never appears in a command line or environment: restic reads it from
``--password-file``. Every agent backup carries the tags ``jackin``, ``snap=<id>``,
``instance=<instance>`` and ``--host <inventory host name>``; its paths are the
agent's home and its manifest file.

Verification: ``restic check`` (structure and index, no data) runs before a restore,
and ``restic restore --verify`` reads back every restored file against the content
hashes in the snapshot; a changed byte in a pack file fails the restore (exit 1)
before anything is swapped in. ``check --read-data`` reads the whole repository and
is offered to scripts (``check(read_data=True)``), not run on every restore.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence

from jackin import hostpaths
from jackin.errors import RemoteCommandError, SpecError
from jackin.hostpaths import ROOT, SNAPSHOTS_ROOT
from jackin.hostpaths import UPLOADED_RESTIC as UPLOADED_RESTIC  # named here too: where restic is uploaded
from jackin.snapshots.models import AgentDiff, BackupSummary

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a path component: a fleet, host or origin name


def checked_name(value: str, what: str) -> str:
    """``value`` as one path component, or a SpecError: fleet, host and origin names build paths."""
    if not NAME.match(value):
        raise SpecError(f"{what} {value!r} cannot name a snapshot directory",
                        hint="expected letters, digits, '.', '_' or '-', not starting with a dot or dash")  # fmt: skip
    return value


def fleet_dir(fleet: str) -> str:
    return hostpaths.snapshots_dir(checked_name(fleet, "fleet"))


def repo_path(fleet: str) -> str:
    return f"{fleet_dir(fleet)}/repo"


def imported_path(fleet: str, origin: str) -> str:
    """Where a repository pushed from host ``origin`` lives on another host (snapshot.push)."""
    return f"{fleet_dir(fleet)}/imported/{checked_name(origin, 'origin host')}"


def password_path(fleet: str) -> str:
    return f"{fleet_dir(fleet)}/password"


def cache_path(fleet: str) -> str:
    return f"{fleet_dir(fleet)}/cache"


def manifest_path(fleet: str, instance: str) -> str:
    return f"{fleet_dir(fleet)}/manifests/{instance}.json"


def home_path(fleet: str, instance: str) -> str:
    return f"{ROOT}/{fleet}/{instance}"


def staging_path(fleet: str, instance: str) -> str:
    """Where a restore assembles the new tree: root 0700, on the homes' filesystem."""
    return f"{ROOT}/{fleet}/.restore/{instance}"


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def repo_options(repo: str, password_file: str, cache_dir: str) -> list[str]:
    """The global options of every restic command the toolkit runs (bench/snapshots.py uses them too).
    No ``--compression``: restic's default (``auto`` from 0.14 on) is what the benchmark chose, and a
    host's own older restic (Debian 11, Ubuntu 22.04) does not know the flag."""
    return ["--repo", repo, "--password-file", password_file, "--cache-dir", cache_dir]


def base(restic: str, fleet: str, *, repo: str | None = None) -> list[str]:
    """``restic`` with the fleet's repository, password file and cache (``--quiet`` is per command:
    it would also silence the change lines of ``diff --json``). ``repo``: another repository of the
    fleet on this host (one pushed here from another host), same password."""
    return [restic, *repo_options(repo or repo_path(fleet), password_path(fleet), cache_path(fleet))]


def layout_commands(fleet: str) -> list[str]:
    """The fleet's root-only directories (modes re-set every time: nothing else writes there)."""
    return [q("install", "-d", "-m", "0700", "-o", "root", "-g", "root", SNAPSHOTS_ROOT, fleet_dir(fleet),
              f"{fleet_dir(fleet)}/manifests")]  # fmt: skip


INIT_DONE = "jackin: repository created"  # init_command's last line when it made the repository just now


def init_command(restic: str, fleet: str) -> str:
    """``restic init`` once: a repository that already has a config is left alone; one made now
    says so (``INIT_DONE``), and its key is then re-sealed cheaply (``jackin.snapshots.repokey``)."""
    init = q(*base(restic, fleet), "--quiet", "init")
    return f"[ -f {shlex.quote(repo_path(fleet) + '/config')} ] || {{ {init} && echo {shlex.quote(INIT_DONE)}; }}"


def keys_path(fleet: str) -> str:
    return f"{repo_path(fleet)}/keys"


def swap_key_command(restic: str, fleet: str, *, old: str, new: str) -> str:
    """With key ``new`` written beside ``old`` in the repository's keys: sync it, move ``old`` aside (not an
    id: restic does not read it) and let restic open the repository; then delete ``old``, or, if restic
    could not open it with ``new`` alone, put ``old`` back and remove ``new`` (exit 1)."""
    keys, aside = keys_path(fleet), f"{old}.jk-aside"
    opens = q(*base(restic, fleet), "--no-cache", "--quiet", "cat", "config")
    return (
        f"cd {shlex.quote(keys)} && sync -- {q(new)} . && mv -- {q(old, aside)} && "
        f"if {opens} >/dev/null; then rm -f -- {q(aside)} && sync -- .; "
        f"else mv -- {q(aside, old)}; rm -f -- {q(new)}; sync -- .; exit 1; fi"
    )


def tags(snapshot: str, instance: str, *, tmp: bool = False) -> list[str]:
    return ["jackin", f"snap={snapshot}", f"instance={instance}", *(["tmp"] if tmp else [])]


def backup_options(host: str, snapshot: str, instance: str, *, tmp: bool = False) -> list[str]:
    """``backup`` and its options, without the paths (what ``snapshot.create`` runs; the benchmark too)."""
    argv = ["--quiet", "backup", "--json", "--host", host]
    for tag in tags(snapshot, instance, tmp=tmp):
        argv += ["--tag", tag]
    return argv


def backup_argv(restic: str, fleet: str, host: str, snapshot: str, instance: str, *, tmp: bool = False) -> list[str]:
    """Back up the agent's home and manifest; ``--json`` ends with the summary line."""
    return [*base(restic, fleet), *backup_options(host, snapshot, instance, tmp=tmp), "--",
            home_path(fleet, instance), manifest_path(fleet, instance)]  # fmt: skip


def parse_backup(out: str) -> BackupSummary:
    """The summary line of ``restic backup --json`` (the last ``message_type: summary``)."""
    for line in reversed(out.splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get("message_type") == "summary":
            return BackupSummary(snapshot_id=data["snapshot_id"], files_new=data.get("files_new", 0),
                                 files_changed=data.get("files_changed", 0),
                                 files_unmodified=data.get("files_unmodified", 0),
                                 data_added=data.get("data_added", 0),
                                 total_bytes=data.get("total_bytes_processed", 0))  # fmt: skip
    raise RemoteCommandError("restic backup printed no summary", hint="run restic by hand on the host to see why")


def snapshots_argv(restic: str, fleet: str, *, snapshot: str | None = None) -> list[str]:
    argv = [*base(restic, fleet), "snapshots", "--json", "--tag", "jackin"]
    return argv + (["--tag", f"snap={snapshot}"] if snapshot else [])


def parse_snapshots(out: str) -> list[dict]:
    """``restic snapshots --json``: one dict per snapshot with ``id``, ``hostname``, ``tags`` and
    ``instance``/``snap`` taken from the tags."""
    try:
        data = json.loads(out or "[]")
    except ValueError:
        raise RemoteCommandError("restic snapshots printed no JSON") from None
    found = []
    for item in data or []:
        tagged = dict(t.split("=", 1) for t in item.get("tags") or [] if "=" in t)
        found.append({"id": item["id"], "host": item.get("hostname"), "time": item.get("time"),
                      "tags": item.get("tags") or [], "snap": tagged.get("snap"),
                      "instance": tagged.get("instance")})  # fmt: skip
    return found


def diff_argv(restic: str, fleet: str, first: str, second: str) -> list[str]:
    return [*base(restic, fleet), "diff", "--json", first, second]


def parse_diff(out: str, *, host: str, instance: str, against: str, home: str) -> AgentDiff:
    """``restic diff --json``: paths made relative to the agent's ``home`` (``workspace/...``);
    the home itself and the manifest file are left out."""
    diff = AgentDiff(host=host, instance=instance, against=against)
    for line in out.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        if data.get("message_type") == "change":
            path = str(data.get("path", ""))
            if not path.startswith(home + "/"):
                continue
            target = {"+": diff.added, "-": diff.removed}.get(str(data.get("modifier")), diff.changed)
            target.append(path[len(home) + 1 :])
        elif data.get("message_type") == "statistics":
            diff.bytes_added = int(data.get("added", {}).get("bytes", 0))
            diff.bytes_removed = int(data.get("removed", {}).get("bytes", 0))
    return diff


def forget_argv(restic: str, fleet: str, ids: Sequence[str], *, prune: bool = True) -> list[str]:
    """Forget these restic snapshots (by id) and, with ``prune``, free the data only they used."""
    return [*base(restic, fleet), "--quiet", "forget", *(["--prune"] if prune else []), "--", *ids]


def check_options(*, read_data: bool = False) -> list[str]:
    return ["--quiet", "check", *(["--read-data"] if read_data else [])]


def check_argv(restic: str, fleet: str, *, read_data: bool = False, repo: str | None = None) -> list[str]:
    return [*base(restic, fleet, repo=repo), *check_options(read_data=read_data)]


def restore_options(restic_id: str, target: str) -> list[str]:
    """``restore`` into ``target``, reading every file back against its content hash (``--verify``)."""
    return ["--quiet", "restore", restic_id, "--target", target, "--verify"]


def restore_argv(restic: str, fleet: str, restic_id: str, target: str, *, repo: str | None = None) -> list[str]:
    """Restore one agent snapshot under ``target`` (absolute paths kept below it), verified."""
    return [*base(restic, fleet, repo=repo), *restore_options(restic_id, target)]
