"""``script`` and ``write_files``: the commands an operation yields, masking kept, file bodies
out of every command line, and the install steps run for real against a temporary root."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from pyinfra.api.command import FileUploadCommand, MaskString, StringCommand
from pyinfra.api.hiddenvalue import HiddenValue
from pyinfra.context import ctx_host

from jackin.operations.script import UPLOAD_DIR, Sent, Upload, file_mode, script, write_files



def test_shell_commands_become_one_set_e_script() -> None:
    [command] = script(["true", "echo two"], noop="unused")
    assert isinstance(command, StringCommand)
    assert command.get_raw_value() == "set -e\ntrue\necho two"


def test_a_masked_value_stays_masked_in_previews_and_raw_when_executed() -> None:
    secret = "s3cr3t-token"
    commands = ["install -d /etc/x", StringCommand("login", "--token", MaskString(secret)),
                StringCommand("use", HiddenValue(secret))]  # fmt: skip
    [command] = script(commands, noop="unused")
    assert secret not in command.get_masked_value() and secret not in str(command) and secret not in repr(command)
    assert command.get_masked_value() == "set -e\ninstall -d /etc/x\nlogin --token *MASKED*\nuse *MASKED*"
    assert command.get_raw_value() == f"set -e\ninstall -d /etc/x\nlogin --token {secret}\nuse {secret}"


def test_the_executed_command_is_the_raw_script_and_the_logged_one_masked() -> None:
    from pyinfra.connectors.util import make_unix_command

    [command] = script([StringCommand("echo", MaskString("hunter2"))], noop="unused")
    wrapped = make_unix_command(command)  # what the SSH connector runs
    assert "hunter2" in wrapped.get_raw_value() and "hunter2" not in wrapped.get_masked_value()
    done = subprocess.run(["sh", "-c", wrapped.get_raw_value()], capture_output=True, text=True, timeout=10)
    assert done.stdout == "hunter2\n"


def test_uploads_split_the_script_and_keep_their_place() -> None:
    upload = Upload(b"x", "/run/jackin-upload/t/0", target="/etc/x", mode="0644")
    out = script(["one", "two", upload, "three"], noop="unused")
    assert [type(c) for c in out] == [StringCommand, Sent, StringCommand]
    assert out[0].get_raw_value() == "set -e\none\ntwo" and out[1].upload is upload and out[1] == Sent(upload)
    assert isinstance(out[1], FileUploadCommand) and repr(out[1]) == repr(upload)
    assert out[2].get_raw_value() == "set -e\nthree"


class _Host:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def noop(self, description: str) -> None:
        self.notes.append(description)


def test_nothing_to_do_is_a_noop_note() -> None:
    fake = _Host()
    with ctx_host.use(fake):
        assert script([], noop="all in place") == []
    assert fake.notes == ["all in place"]


# --- write_files ------------------------------------------------------------------------------


def test_write_files_uploads_every_body_and_puts_none_in_a_command() -> None:
    body = "table inet x {\n" + "  # 'quoted' $(no) `no`\n" * 20000 + "}\n"  # ~500 KiB, far past argv's 128 KiB
    commands = write_files({"/etc/jackin/nft/demo.nft": body, "/usr/local/lib/jackin/run": "#!/bin/sh\necho\n"})
    uploads = [c for c in commands if isinstance(c, Upload)]
    assert [(u.target, u.mode, u.data) for u in uploads] == [
        ("/etc/jackin/nft/demo.nft", "0644", body.encode()), ("/usr/local/lib/jackin/run", "0755", b"#!/bin/sh\necho\n")]
    shell = [c for c in commands if isinstance(c, str)]
    assert max(len(c) for c in shell) < 200
    assert all("quoted" not in c for c in shell)


def test_write_files_exact_commands() -> None:
    commands = write_files({"/etc/docker/daemon.json": "{}\n"}, modes={"/etc/docker/daemon.json": "0600"})
    staging = commands[0].split()[-1]
    assert staging.startswith(f"{UPLOAD_DIR}/") and len(staging) == len(UPLOAD_DIR) + 17
    assert commands == [
        f"rm -rf {staging}",
        f"install -d -m 0700 {UPLOAD_DIR} {staging}",
        Upload(b"{}\n", f"{staging}/0", target="/etc/docker/daemon.json", mode="0600"),
        "test -d /etc/docker || install -d -m 0755 /etc/docker",
        f"install -m 0600 -o root -g root -T {staging}/0 /etc/docker/daemon.json.jackin-new",
        "mv -f -T /etc/docker/daemon.json.jackin-new /etc/docker/daemon.json",
        f"rm -rf {staging}",
        f"rmdir {UPLOAD_DIR} 2>/dev/null || true",
    ]


def test_the_staging_name_follows_the_content_so_both_generator_runs_agree() -> None:
    one, again = write_files({"/a/b": "x"}), write_files({"/a/b": "x"})
    assert one == again
    assert write_files({"/a/b": "y"})[0] != one[0] and write_files({"/a/c": "x"})[0] != one[0]


def test_nothing_to_write_is_no_command() -> None:
    assert write_files({}) == []


def test_an_upload_shows_its_size_and_target_never_its_content() -> None:
    upload = Upload(b"password=hunter2\n", "/run/jackin-upload/t/0", target="/etc/x.env", mode="0600")
    assert "hunter2" not in repr(upload) and "hunter2" not in str(upload)
    assert repr(upload) == "upload 17 bytes by SFTP to /run/jackin-upload/t/0 (for /etc/x.env, mode 0600)"


@pytest.mark.parametrize(("data", "mode"), [(b"#!/bin/sh\n", "0755"), (b"[Unit]\n", "0644"), (b"", "0644")])
def test_file_mode(data: bytes, mode: str) -> None:
    assert file_mode(data) == mode


def _run(commands: list, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Play the host: uploads are written where SFTP would put them, scripts run under sh."""
    done = None
    for command in script(commands, noop="unused"):
        if isinstance(command, Sent):
            Path(command.upload.dest).write_bytes(command.upload.data)
            continue
        done = subprocess.run(["sh", "-c", command.get_raw_value()], capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            return done
    assert done is not None
    return done


@pytest.mark.skipif(os.geteuid() != 0, reason="installs files as root:root")
def test_write_files_is_byte_exact_with_modes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    text = "it's \"quoted\" $(echo no) `no` \\n %s %% \\\\\n\ttabs\nno final newline"
    deep, existing = tmp_path / "deep" / "dir" / "file", tmp_path / "keep" / "run"
    existing.parent.mkdir(mode=0o750)
    existing.parent.chmod(0o750)
    existing.write_text("old")
    upload_dir = tmp_path / "upload"
    done = _run(write_files({str(deep): text, str(existing): "#!/bin/sh\n"}, upload_dir=str(upload_dir)), tmp_path)
    assert done.returncode == 0, done.stderr
    assert deep.read_text() == text and existing.read_text() == "#!/bin/sh\n"
    assert (oct(deep.stat().st_mode & 0o777), oct(existing.stat().st_mode & 0o777)) == ("0o644", "0o755")
    assert (deep.stat().st_uid, deep.stat().st_gid) == (0, 0)
    assert oct(existing.parent.stat().st_mode & 0o777) == "0o750"  # an existing directory keeps its mode
    assert oct(deep.parent.stat().st_mode & 0o777) == "0o755"
    assert sorted(p.name for p in deep.parent.iterdir()) == ["file"]  # no temporary file left
    assert not upload_dir.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="installs files as root:root")
def test_a_failed_install_stops_the_script_and_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "etc" / "conf"
    target.parent.mkdir()
    target.write_text("old")
    commands = write_files({str(target): "new"}, upload_dir=str(tmp_path / "upload"))
    commands = [c.replace(" -T ", " -T /nonexistent/") if isinstance(c, str) and c.startswith("install -m") else c
                for c in commands]  # fmt: skip
    done = _run(commands + ["echo after"], tmp_path)
    assert done.returncode != 0 and "after" not in done.stdout
    assert target.read_text() == "old"


def test_quoting_of_paths() -> None:
    commands = write_files({"/etc/a dir/f": "x"})
    assert "test -d '/etc/a dir' || install -d -m 0755 '/etc/a dir'" in commands
    assert any(c == f"mv -f -T {shlex.quote('/etc/a dir/f.jackin-new')} '/etc/a dir/f'" for c in commands if isinstance(c, str))
