"""Durable snapshots between hosts over real SSH: a host's restic repository pulled to this machine,
checked and restored here, pulled again incrementally, survived a dropped connection, pushed to a
second host and restored there after the first host's repository is gone (the fresh-host path).

One 2-host lab for the module; no fleet is needed. The lab hosts have no restic: ``ensure_restic``
uploads this machine's. Tests run in order and share the module's state.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import paramiko
import pytest

from jackin.errors import ConnectError
from jackin.lab import Lab
from jackin.snapshots import binary, transfer
from jackin.snapshots.transfer import TransferError, list_local
from jackin.transport.ssh import connect

from .conftest import _engine_or_skip, new_lab_name

pytestmark = pytest.mark.skipif(not shutil.which("restic"), reason="restic is not installed here")

TREE = r"""
import hashlib, json, os, sys
root = sys.argv[1]
out = {}
for top, dirs, files in os.walk(root):
    for name in sorted(dirs + files):
        path = os.path.join(top, name)
        st = os.lstat(path)
        rel = os.path.relpath(path, root)
        if os.path.islink(path):
            out[rel] = ["l", os.readlink(path)]
        elif os.path.isdir(path):
            out[rel] = ["d", oct(st.st_mode & 0o7777)]
        else:
            out[rel] = ["f", oct(st.st_mode & 0o7777), hashlib.sha256(open(path, "rb").read()).hexdigest()]
print(json.dumps(out, sort_keys=True))
"""

MAKE = r"""
import os, sys
root = sys.argv[1]
os.makedirs(os.path.join(root, "src/pkg"), exist_ok=True)
os.makedirs(os.path.join(root, "empty"), exist_ok=True)
for i in range(int(sys.argv[2]), int(sys.argv[3])):
    path = os.path.join(root, "src/pkg" if i % 2 else "src", f"file-{i}.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(1000 * (i % 7) + i))
    os.chmod(path, 0o640 if i % 3 else 0o755)
with open(os.path.join(root, "big.bin"), "ab") as f:
    f.write(os.urandom(3 << 20))
if not os.path.lexists(os.path.join(root, "link")):
    os.symlink("src/file-0.bin", os.path.join(root, "link"))
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    _engine_or_skip()
    lab = Lab(new_lab_name("r"))
    try:
        lab.up(2)
        hosts = lab.status().hosts
        local = tmp_path_factory.mktemp("transfer")
        password = local / "password"
        password.write_text(secrets.token_urlsafe(32))
        password.chmod(0o600)
        yield {"lab": lab, "h1": hosts[0].target(), "h2": hosts[1].target(), "fleet": f"tr{secrets.token_hex(2)}",
               "local": local, "password": password, "mirror": local / "pulled" / hosts[0].name / "repo"}
    finally:
        lab.down()


def sh(target, command: str, *, warn: bool = False, stdin: str | None = None):
    with connect(target) as conn:
        extra = {"in_stream": __import__("io").StringIO(stdin)} if stdin is not None else {}
        return conn.run(command, hide=True, warn=warn, **extra)


def remote_tree(target, root: str) -> dict:
    return json.loads(sh(target, f"python3 -c {shlex.quote(TREE)} {shlex.quote(root)}").stdout)


def local_tree(root: Path) -> dict:
    return json.loads(subprocess.run([sys.executable, "-c", TREE, str(root)], check=True, capture_output=True,
                                     text=True).stdout)


def restic(world, target, repo: str, *args: str) -> str:
    password = f"{transfer.fleet_dir(world['fleet'])}/password"
    return sh(target, " ".join(shlex.quote(a) for a in (binary.UPLOADED_RESTIC, "--repo", repo, "--password-file",
                                                      password, "--no-cache", *args))).stdout


def install_password(world, target) -> None:
    """The fleet's password on a host: root-only dir, the file by SFTP (0600), as the core tasks do."""
    sh(target, f"install -d -m 0700 -o root -g root /var/lib/jackin/snapshots {transfer.fleet_dir(world['fleet'])}")
    with connect(target) as conn:
        with conn.sftp().open(f"{transfer.fleet_dir(world['fleet'])}/password", "wb") as handle:
            handle.chmod(0o600)
            handle.write(world["password"].read_bytes())


def backup(world, start: int, stop: int) -> None:
    sh(world["h1"], f"python3 -c {shlex.quote(MAKE)} /root/work {start} {stop}")
    restic(world, world["h1"], transfer.repo_path(world["fleet"]), "--quiet", "backup", "--host", world["h1"].name,
           "/root/work")


def repo_files(world, target, repo: str) -> set[str]:
    out = sh(target, f"cd {repo} && find . -type f ! -path './locks/*' -printf '%P\\n'").stdout
    return set(out.split())


def restore_locally(world, into: Path) -> dict:
    subprocess.run([binary.local_restic(), "--repo", str(world["mirror"]), "--password-file", str(world["password"]),
                    "--no-cache", "--quiet", "restore", "latest", "--target", str(into)], check=True)
    return local_tree(into / "root" / "work")


def test_restic_reaches_a_host_without_it_once(world) -> None:
    h1 = world["h1"]
    assert sh(h1, "command -v restic", warn=True).exited != 0  # the lab image has none
    with connect(h1) as conn:
        assert binary.ensure_restic(conn, host=h1.name) == binary.UPLOADED_RESTIC
        before = sh(h1, f"stat -c '%U %G %a %Y %i' {binary.UPLOADED_RESTIC}").stdout
        assert before.split()[:3] == ["root", "root", "755"]
        assert binary.ensure_restic(conn, host=h1.name) == binary.UPLOADED_RESTIC
    assert sh(h1, f"stat -c '%U %G %a %Y %i' {binary.UPLOADED_RESTIC}").stdout == before  # same bytes: no upload
    assert "restic" in sh(h1, f"{binary.UPLOADED_RESTIC} version").stdout


def test_a_pulled_repository_checks_and_restores_the_hosts_files(world, tmp_path) -> None:
    h1, fleet = world["h1"], world["fleet"]
    install_password(world, h1)
    repo = transfer.repo_path(fleet)
    sh(h1, f"{binary.UPLOADED_RESTIC} --repo {repo} --password-file {transfer.fleet_dir(fleet)}/password "
           "--no-cache --quiet init")  # fmt: skip
    backup(world, 0, 40)
    result = transfer.pull_repo(h1, fleet, world["mirror"])
    files = repo_files(world, h1, repo)
    assert (result.copied, result.skipped, result.deleted) == (len(files), 0, [])
    assert set(list_local(world["mirror"]).files) == files
    assert result.copied_bytes == sum(p.stat().st_size for p in world["mirror"].rglob("*") if p.is_file())
    for path in [world["mirror"], *world["mirror"].rglob("*")]:
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    assert "no errors were found" in binary.verify_local(world["mirror"], world["password"])
    assert restore_locally(world, tmp_path) == remote_tree(h1, "/root/work")


def test_a_second_pull_copies_only_the_new_files(world, tmp_path) -> None:
    h1, fleet = world["h1"], world["fleet"]
    before = repo_files(world, h1, transfer.repo_path(fleet))
    backup(world, 40, 45)
    after = repo_files(world, h1, transfer.repo_path(fleet))
    assert before < after
    result = transfer.pull_repo(h1, fleet, world["mirror"])
    assert (result.copied, result.skipped) == (len(after - before), len(before))
    # Exactly the new files' bytes, not the whole tree again. (Not a fixed bound: restic cuts the 3 MiB of
    # random data appended to big.bin, and the old tail with it, at content-defined boundaries, so the new
    # packs' size varies from run to run; 5 MiB was once exceeded by 0.4 MiB.)
    new_bytes = sum((world["mirror"] / path).stat().st_size for path in after - before)
    whole = sum(p.stat().st_size for p in world["mirror"].rglob("*") if p.is_file())
    assert result.copied_bytes == new_bytes < whole
    again = transfer.pull_repo(h1, fleet, world["mirror"])
    assert (again.copied, again.skipped) == (0, len(after))
    binary.verify_local(world["mirror"], world["password"])
    assert restore_locally(world, tmp_path) == remote_tree(h1, "/root/work")


def test_a_dropped_connection_leaves_no_partial_file_and_the_next_pull_finishes(world, monkeypatch) -> None:
    h1, fleet = world["h1"], world["fleet"]
    backup(world, 45, 50)
    mirror = world["mirror"]
    before = list_local(mirror).files
    original = paramiko.SFTPFile.read
    calls = {"n": 0}

    def read_then_drop(self, size=None):
        calls["n"] += 1
        if calls["n"] == 2:  # one chunk of the first new file is written, then the connection dies
            self.sftp.sock.get_transport().close()
        return original(self, size)

    monkeypatch.setattr(paramiko.SFTPFile, "read", read_then_drop)
    monkeypatch.setattr(transfer, "CHUNK", 4096)
    with pytest.raises(ConnectError, match="connection lost"):
        transfer.pull_repo(h1, fleet, mirror)
    monkeypatch.undo()
    assert calls["n"] >= 2
    assert not [p for p in mirror.rglob("*") if transfer.TEMP_MARK in p.name]
    for path, size in list_local(mirror).files.items():  # whatever is under a final name is whole
        assert transfer.content_ok(path, __import__("hashlib").sha256((mirror / path).read_bytes()).hexdigest())
    assert set(before) <= set(list_local(mirror).files)
    leftover = mirror / "index" / f"{'0' * 64}{transfer.TEMP_MARK}1-2"  # as a killed process would leave it
    leftover.write_bytes(b"partial")
    result = transfer.pull_repo(h1, fleet, mirror)
    assert result.cleaned == 1 and not leftover.exists()
    assert set(list_local(mirror).files) == repo_files(world, h1, transfer.repo_path(fleet))
    binary.verify_local(mirror, world["password"])


def test_after_a_prune_on_the_host_the_pull_drops_its_stale_index_and_snapshots_but_keeps_data(world, tmp_path):
    h1, fleet = world["h1"], world["fleet"]
    repo = transfer.repo_path(fleet)
    first = json.loads(restic(world, h1, repo, "snapshots", "--json"))[0]["id"]
    restic(world, h1, repo, "--quiet", "forget", "--prune", "--max-unused", "0", first)
    mirror = world["mirror"]
    before = set(list_local(mirror).files)
    result = transfer.pull_repo(h1, fleet, mirror)
    now = repo_files(world, h1, repo)
    gone = before - now
    assert result.deleted and set(result.deleted) == {p for p in gone if p.split("/")[0] in ("index", "snapshots")}
    assert f"snapshots/{first}" in result.deleted
    assert result.kept == len([p for p in gone if p.startswith("data/")]) > 0  # repacked: the old packs stay here
    assert set(list_local(mirror).files) == now | {p for p in gone if p.startswith("data/")}
    binary.verify_local(mirror, world["password"])  # the packs kept are "additional files", not errors
    ours = subprocess.run([binary.local_restic(), "--repo", str(mirror), "--password-file", str(world["password"]),
                           "--no-cache", "snapshots", "--json"], check=True, capture_output=True, text=True).stdout
    assert {s["id"] for s in json.loads(ours)} == {s["id"] for s in json.loads(restic(world, h1, repo, "snapshots",
                                                                                        "--json"))}
    assert restore_locally(world, tmp_path) == remote_tree(h1, "/root/work")


def host_files_whole(target, directory: str) -> int:
    """How many repository files under ``directory`` on the host; fails when one does not hash to its name."""
    out = sh(target, f"cd {directory} && find . -type f ! -name config -print0 | xargs -0 -r sha256sum").stdout
    for line in out.splitlines():
        digest, _, path = line.partition("  ")
        assert transfer.TEMP_MARK in path or path.rsplit("/", 1)[-1] == digest, path
    return sum(transfer.TEMP_MARK not in line for line in out.splitlines())


def test_a_push_cut_short_leaves_only_whole_files_and_no_config(world, monkeypatch) -> None:
    h1, h2, fleet = world["h1"], world["h2"], world["fleet"]
    original = paramiko.SFTPFile.write
    calls = {"n": 0}

    def write_then_drop(self, data):
        calls["n"] += 1
        if calls["n"] == 40:
            self.sftp.sock.get_transport().close()
        return original(self, data)

    monkeypatch.setattr(paramiko.SFTPFile, "write", write_then_drop)
    monkeypatch.setattr(transfer, "CHUNK", 4096)
    with pytest.raises(ConnectError, match="connection lost"):
        transfer.push_repo(h2, fleet, world["mirror"], h1.name)
    monkeypatch.undo()
    imported = transfer.imported_path(fleet, h1.name)
    host_files_whole(h2, imported)  # whatever arrived under a final name is whole
    assert sh(h2, f"test -e {imported}/config", warn=True).exited != 0  # config goes last: not a repository yet
    assert sh(h2, f"find {imported} -name '*{transfer.TEMP_MARK}*' | grep -q .", warn=True).exited == 0  # left over


def test_a_pushed_repository_is_root_only_and_restores_on_the_other_host(world, tmp_path) -> None:
    h1, h2, fleet = world["h1"], world["h2"], world["fleet"]
    result = transfer.push_repo(h2, fleet, world["mirror"], h1.name)
    imported = transfer.imported_path(fleet, h1.name)
    assert result.copied + result.skipped == len(list_local(world["mirror"]).files)
    assert result.cleaned >= 1 and result.copied > 0  # the interrupted push's leftovers, then the rest
    assert host_files_whole(h2, imported) == len(list_local(world["mirror"]).files) - 1
    assert repo_files(world, h2, imported) == set(list_local(world["mirror"]).files)
    modes = sh(h2, f"find {transfer.fleet_dir(fleet)} -printf '%u %g %m %y\\n' | sort -u").stdout.split("\n")
    assert set(filter(None, modes)) == {"root root 700 d", "root root 600 f"}
    assert not sh(h2, f"find {imported} -name '*{transfer.TEMP_MARK}*'").stdout
    again = transfer.push_repo(h2, fleet, world["mirror"], h1.name)
    assert (again.copied, again.skipped) == (0, result.copied)
    with connect(h2) as conn:
        binary.ensure_restic(conn, host=h2.name)
    install_password(world, h2)
    restic(world, h2, imported, "--quiet", "restore", "latest", "--target", "/root/restored")
    assert remote_tree(h2, "/root/restored/root/work") == remote_tree(h1, "/root/work")
    assert sh(h2, "stat -c '%a' /root/restored/root/work/src/file-0.bin").stdout.strip() == "755"


def test_after_the_first_hosts_repository_is_gone_the_pushed_copy_still_restores(world) -> None:
    h1, h2, fleet = world["h1"], world["h2"], world["fleet"]
    expected = remote_tree(h1, "/root/work")
    mirror_before = list_local(world["mirror"])
    sh(h1, f"rm -rf {transfer.fleet_dir(fleet)} /root/work")
    with pytest.raises(TransferError, match="no restic repository"):
        transfer.pull_repo(h1, fleet, world["mirror"])
    assert list_local(world["mirror"]) == mirror_before  # a failed pull deletes nothing here
    imported = transfer.imported_path(fleet, h1.name)
    restic(world, h2, imported, "check")
    sh(h2, "rm -rf /root/restored")
    restic(world, h2, imported, "--quiet", "restore", "latest", "--target", "/root/restored")
    assert remote_tree(h2, "/root/restored/root/work") == expected


def test_a_mirror_of_another_repository_is_moved_aside_never_mixed(world, tmp_path) -> None:
    h2, fleet, mirror = world["h2"], world["fleet"], world["mirror"]
    restic(world, h2, transfer.repo_path(fleet), "--quiet", "init")  # h2's own repository of the fleet
    before = list_local(mirror)
    config = (mirror / "config").read_bytes()
    pulled = transfer.pull_repo(h2, fleet, mirror)  # as if h1's repository had been made anew
    aside = mirror.with_name(transfer.aside_name(mirror.name, config))
    assert pulled.moved_aside == str(aside)
    assert list_local(aside) == before  # the older copy, whole, under its new name
    binary.verify_local(aside, world["password"])
    assert pulled.copied == len(repo_files(world, h2, transfer.repo_path(fleet)))
    assert (mirror / "config").read_bytes() != config
    binary.verify_local(mirror, world["password"])
    # the same on a host: an older copy of the origin pushed there is moved aside, then the new one pushed
    imported = transfer.imported_path(fleet, world["h1"].name)
    old_files = sorted(repo_files(world, h2, imported))
    pushed = transfer.push_repo(h2, fleet, mirror, world["h1"].name)
    assert pushed.moved_aside == transfer.aside_name(imported, config)
    assert sorted(repo_files(world, h2, pushed.moved_aside)) == old_files
    assert sh(h2, f"stat -c '%a %U' {pushed.moved_aside}").stdout.split() == ["700", "root"]
    restic(world, h2, imported, "check")
