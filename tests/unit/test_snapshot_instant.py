"""One instant per agent snapshot (jackin.snapshots.instant): the backup script run here with bash,
against a stand-in ``docker`` and ``restic`` on PATH that record what they were asked (no engine, no
network): the freeze and its thaw on every way out, the script's end when its channel's stdin ends,
the cap on the freeze; and the parsers of restic's error lines. The real freezer and the btrfs
checkpoint are driven in the lab (tests/integration/test_point_in_time.py)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from jackin.snapshots import instant
from jackin.snapshots.models import AgentSnapshot
from jackin.cli.render.snapshot import held_text

SUMMARY = json.dumps({"message_type": "summary", "snapshot_id": "abc123", "total_bytes_processed": 5})

FAKE_DOCKER = """#!/bin/sh
# docker [container] inspect|pause|unpause -- C, over a state file ("running paused"); every call logged.
[ "$1" = container ] && shift
echo "$*" >> "$JK/docker.log"
case "$1" in
  inspect) [ -f "$JK/state" ] || { echo "Error: No such container: $4" >&2; exit 1; }
           [ -f "$JK/down" ] && { echo "Cannot connect to the Docker daemon" >&2; exit 1; }
           case "$3" in *Running*) cat "$JK/state" ;; *) cut -d' ' -f2 "$JK/state" ;; esac ;;
  pause) [ "$(cat "$JK/state")" = "true false" ] || exit 1; echo "true true" > "$JK/state" ;;
  unpause) [ "$(cat "$JK/state")" = "true true" ] || exit 1; echo "true false" > "$JK/state" ;;
esac
"""

FAKE_RESTIC = """#!/bin/sh
# restic backup: reads its --exclude-file first (as restic does once the repository is open), then
# records the container's state while it "reads the home", sleeps $SLEEP and exits $RC.
[ -n "${DIE_EARLY:-}" ] && exit 1
while [ $# -gt 0 ]; do [ "$1" = --exclude-file ] && cat "$2" > /dev/null; shift; done
cat "$JK/state" > "$JK/seen" 2>/dev/null || echo gone > "$JK/seen"
echo "$$" > "$JK/restic.pid"
[ -n "${ERRORS:-}" ] && printf '%s\\n' "$ERRORS"
sleep "${SLEEP:-0}"
echo '""" + SUMMARY + """'
exit "${RC:-0}"
"""


@pytest.fixture
def box(tmp_path: Path) -> Path:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (("docker", FAKE_DOCKER), ("restic", FAKE_RESTIC)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    (tmp_path / "state").write_text("true false\n")
    return tmp_path


def start(box: Path, *, max_freeze: int = 60, hold: bool = True, container: str | None = "jk-f--coder-1",
          grace: int = instant.GRACE, **env: str) -> subprocess.Popen:  # fmt: skip
    script = instant.backup_script(["restic", "backup", "--json", "--", "/srv/jackin/f/coder-1"],
                                   home="/srv/jackin/f/coder-1", container=container, max_freeze=max_freeze,
                                   hold=hold, grace=grace)  # fmt: skip
    environ = {**os.environ, "PATH": f"{box / 'bin'}:{os.environ['PATH']}", "JK": str(box), **env}
    return subprocess.Popen(["bash", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=environ, text=True, start_new_session=True)  # fmt: skip


def finish(proc: subprocess.Popen, *, close_stdin: bool = False) -> tuple[int, str, str]:
    """Its status and output; its stdin stays open until it ends (as an SSH channel's does) unless
    ``close_stdin``."""
    if close_stdin:
        proc.stdin.close()  # type: ignore[union-attr]
    proc.wait(timeout=20)
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    if not close_stdin:
        proc.stdin.close()  # type: ignore[union-attr]
    return proc.returncode, out, err


def docker_calls(box: Path) -> list[str]:
    log = box / "docker.log"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def await_file(path: Path, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.exists(), f"{path} never appeared"


def test_a_running_agent_is_frozen_while_restic_reads_and_thawed_after(box: Path) -> None:
    code, out, _ = finish(start(box))
    assert code == 0 and (box / "seen").read_text().strip() == "true true"  # restic read a frozen container
    assert docker_calls(box) == ["inspect", "pause", "unpause"]
    assert (box / "state").read_text().strip() == "true false"
    how, frozen_ms = instant.held(out)
    assert how == "frozen" and frozen_ms is not None and frozen_ms > 0
    assert SUMMARY in out.splitlines()


def test_a_failed_backup_still_thaws_and_passes_restics_status_on(box: Path) -> None:
    code, out, err = finish(start(box, RC="1"))
    assert "Killed" not in err  # the helpers end quietly: restic's last words stay the last lines
    assert code == 1 and docker_calls(box) == ["inspect", "pause", "unpause"]
    assert (box / "state").read_text().strip() == "true false" and instant.held(out)[0] == "frozen"


def test_the_end_of_its_stdin_stops_the_backup_and_thaws(box: Path) -> None:
    """The operator's Ctrl-C or a lost connection closes the SSH channel: the script's stdin ends."""
    proc = start(box, SLEEP="30")
    await_file(box / "restic.pid")
    began = time.monotonic()
    code, _, _ = finish(proc, close_stdin=True)
    assert time.monotonic() - began < 5 and code != 0
    assert (box / "state").read_text().strip() == "true false" and docker_calls(box)[-1] == "unpause"


def test_the_script_never_stops_its_own_backup_when_its_helpers_end(box: Path) -> None:
    """Its helper subshells are killed as soon as they are not needed, sometimes right after their fork,
    when bash can still run the script's own traps in them: those act in the main shell only."""
    for _ in range(25):
        (box / "state").write_text("true false\n")
        code, out, err = finish(start(box))
        assert code == 0 and instant.held(out)[0] == "frozen", err


def test_an_interrupted_script_thaws_on_its_way_out(box: Path) -> None:
    proc = start(box, SLEEP="30")
    await_file(box / "restic.pid")
    proc.send_signal(signal.SIGTERM)
    code, _, _ = finish(proc)
    assert code == 130 and (box / "state").read_text().strip() == "true false"


def test_a_backup_past_max_freeze_is_stopped_and_the_agent_thawed(box: Path) -> None:
    began = time.monotonic()
    code, out, _ = finish(start(box, max_freeze=1, SLEEP="30"))
    assert code != 0 and instant.capped(out) and time.monotonic() - began < 10
    assert (box / "state").read_text().strip() == "true false" and instant.held(out)[0] == "frozen"


def test_a_backup_that_freezes_nothing_is_not_capped_by_max_freeze(box: Path) -> None:
    """A stopped agent (or a checkpoint) is not frozen: its first backup of a big workspace may take long."""
    (box / "state").write_text("false false\n")
    code, out, _ = finish(start(box, max_freeze=1, SLEEP="1.8"))
    assert code == 0 and instant.held(out) == ("stopped", None)


def test_the_watchdog_thaws_when_the_script_is_killed_outright(box: Path) -> None:
    proc = start(box, max_freeze=1, grace=1, SLEEP="30")  # the watchdog thaws at max_freeze + grace
    await_file(box / "restic.pid")
    os.killpg(proc.pid, signal.SIGKILL)  # the script and restic, not the watchdog (a session of its own)
    proc.wait(timeout=10)
    assert (box / "state").read_text().strip() == "true true"  # nobody thawed it on the way out
    deadline = time.monotonic() + 2 + 10
    while (box / "state").read_text().strip() != "true false" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert (box / "state").read_text().strip() == "true false"


def test_a_container_paused_by_someone_else_is_read_and_left_paused(box: Path) -> None:
    (box / "state").write_text("true true\n")
    code, out, _ = finish(start(box))
    assert code == 0 and docker_calls(box) == ["inspect"] and instant.held(out) == ("paused", None)
    assert (box / "state").read_text().strip() == "true true"


def test_a_stopped_or_missing_container_is_not_frozen(box: Path) -> None:
    (box / "state").write_text("false false\n")
    code, out, _ = finish(start(box))
    assert code == 0 and docker_calls(box) == ["inspect"] and instant.held(out) == ("stopped", None)
    (box / "state").unlink()
    code, out, _ = finish(start(box))
    assert code == 0 and instant.held(out) == ("stopped", None)


def test_a_failed_freeze_stops_before_restic_reads_anything(box: Path) -> None:
    (box / "bin" / "docker").write_text(FAKE_DOCKER.replace('pause) [', 'pause) exit 1; ['))
    code, _, err = finish(start(box))
    assert code == 1 and "cannot freeze container jk-f--coder-1" in err
    assert not list(box.glob("tmp.*"))  # the FIFO's dir is gone too


@pytest.mark.parametrize("refusals", [1, 2, 3])
def test_a_freezer_that_gives_up_on_a_busy_agent_is_tried_again_up_to_three_times(box: Path, refusals: int) -> None:
    """runc's "unable to freeze" (a busy agent forking all the time) leaves the container thawed: another
    ``docker pause`` is tried, three in all; the third refusal fails the backup before restic reads."""
    refuse = (f'pause) n=$(cat "$JK/refused" 2>/dev/null || echo 0); if [ "$n" -lt {refusals} ]; then '
              'echo $((n + 1)) > "$JK/refused"; echo "OCI runtime pause failed: unable to freeze: unknown" >&2; '
              'exit 1; fi; [')  # fmt: skip
    (box / "bin" / "docker").write_text(FAKE_DOCKER.replace("pause) [", refuse, 1))
    code, out, err = finish(start(box))
    pauses = docker_calls(box).count("pause")
    if refusals < 3:
        assert code == 0 and pauses == refusals + 1 and (box / "seen").read_text().strip() == "true true"
        assert instant.held(out)[0] == "frozen" and (box / "state").read_text().strip() == "true false"
    else:
        assert code == 1 and pauses == 3 and "unable to freeze" in err
        assert "cannot freeze container jk-f--coder-1" in err
        assert not (box / "seen").exists() or (box / "seen").read_text().strip() != "true true"


def test_restic_failing_before_it_reads_its_exclude_file_ends_the_script_without_a_freeze(box: Path) -> None:
    """A wrong password, a locked repository: restic ends before the FIFO; the script must not hang."""
    code, out, _ = finish(start(box, DIE_EARLY="1"))
    assert code == 1 and "pause" not in docker_calls(box) and (box / "state").read_text().strip() == "true false"


def test_a_container_state_docker_cannot_give_fails_the_backup_instead_of_reading_an_unheld_home(box: Path) -> None:
    (box / "down").write_text("")
    code, out, err = finish(start(box))
    assert code == 1 and "cannot read the state of container jk-f--coder-1" in err and "SUMMARY" not in out
    assert instant.held(out) == (None, None)


def test_a_failed_thaw_is_said_and_leaves_the_watchdog_to_try_again(box: Path) -> None:
    (box / "bin" / "docker").write_text(FAKE_DOCKER.replace("unpause) [", "unpause) exit 1; ["))
    container = f"jk-f--coder-{secrets.token_hex(4)}"  # its own: the pkill below ends no other test's watchdog
    code, out, err = finish(start(box, max_freeze=1, grace=1, container=container))
    assert "jk-thaw-failed" in out.splitlines() and f"could not thaw container {container}" in err
    assert ps_has(f"docker unpause -- {container}")  # the watchdog is still there
    subprocess.run(["pkill", "-f", f"sleep 2; docker unpause -- {container}"], check=False)


def ps_has(text: str) -> bool:
    return text in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout


def test_a_live_look_holds_nothing(box: Path) -> None:
    code, out, _ = finish(start(box, hold=False))
    assert code == 0 and docker_calls(box) == [] and instant.held(out) == ("live", None)


def test_the_checkpoint_script_binds_the_frozen_copy_over_the_home_in_restics_own_mount_namespace() -> None:
    script = instant.backup_script(["restic", "backup", "--", "/srv/jackin/f/coder-1"], home="/srv/jackin/f/coder-1",
                                   container="jk-f--coder-1", checkpoint="/srv/jackin/f/.checkpoints/coder-1/X")  # fmt: skip
    assert "H=/srv/jackin/f/coder-1; K=/srv/jackin/f/.checkpoints/coder-1/X" in script
    assert "run unshare --mount --propagation private -- /bin/sh -c 'mount --bind -- \"$1\" \"$2\"" in script
    assert "docker pause" not in script and '"$(stat -c %i -- "$K")" = 256' in script


# --- restic's errors ------------------------------------------------------------------------------


def test_read_errors_takes_the_item_and_errno_of_each_error_line() -> None:
    out = "\n".join([
        '{"message_type":"error","error":{"Op":"lstat","Path":"/h/w/a.tmp","Err":2},"during":"archival","item":"/h/w/a.tmp"}',
        '{"message_type":"error","error":{},"during":"archival","item":"/h/w/b"}',
        "jk-instant live", "not json {", SUMMARY,
    ])  # fmt: skip
    assert instant.read_errors(out) == [("/h/w/a.tmp", 2), ("/h/w/b", None)]


def test_relative_names_a_file_below_the_home_and_quotes_control_characters() -> None:
    assert instant.relative("/srv/jackin/f/c-1/workspace/x", "/srv/jackin/f/c-1") == "workspace/x"
    assert instant.relative("/srv/jackin/f/c-1/workspace/a\nb", "/srv/jackin/f/c-1") == "'workspace/a\\nb'"


def test_held_ignores_unknown_instants_and_malformed_lines() -> None:
    assert instant.held("jk-instant sideways\njk-frozen-ns x\n") == (None, None)
    assert instant.held("jk-instant frozen\njk-frozen-ns 1500000\n") == ("frozen", 1.5)


def test_the_exists_script_lists_only_what_is_still_there_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "here").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    paths = [tmp_path / "here", tmp_path / "gone", tmp_path / "dangling", tmp_path / "new\nline"]
    (tmp_path / "new\nline").write_text("x")
    done = subprocess.run(["bash", "-c", instant.exists_script()], input=b"".join(bytes(p) + b"\0" for p in paths),
                          capture_output=True, check=True, timeout=10)  # fmt: skip
    assert done.stdout.split(b"\0")[:-1] == [bytes(paths[0]), bytes(paths[2]), bytes(paths[3])]


def test_held_text_prints_the_freeze_in_seconds() -> None:
    base = {"host": "h", "instance": "c-1", "agent": "c"}
    assert held_text(AgentSnapshot(**base, instant="frozen", frozen_ms=420.0)) == "frozen 0.42s"
    assert held_text(AgentSnapshot(**base, instant="checkpoint", frozen_ms=52.0)) == "checkpoint, frozen 0.05s"
    assert held_text(AgentSnapshot(**base, instant="checkpoint")) == "checkpoint"
    assert held_text(AgentSnapshot(**base)) == "-"


def test_an_interrupt_cuts_the_hosts_work_short_before_waiting_for_it() -> None:
    """per_host runs ``interrupted`` (snapshots close every connection there) before it waits for the
    workers, so a Ctrl-C never waits for a frozen agent's backup to finish."""
    import threading

    from jackin.snapshots import api
    from jackin.transport.target import SshTarget

    release, calls = threading.Event(), []

    def work(target: SshTarget) -> None:
        if target.name == "a":
            raise KeyboardInterrupt  # as the main thread would see a Ctrl-C while it waits
        release.wait(10)  # "b" blocks until the interrupt hook releases it

    def interrupted() -> None:
        calls.append("interrupted")
        release.set()

    targets = [SshTarget(name=n, address="127.0.0.1", port=1, known_hosts=Path("/nonexistent")) for n in "ab"]
    with pytest.raises(KeyboardInterrupt):
        api.per_host(targets, work, interrupted=interrupted)
    assert calls == ["interrupted"] and release.is_set()


def test_this_machines_restic_reads_its_exclude_file_before_any_file_of_the_backup(tmp_path: Path) -> None:
    """The freeze starts when restic opens its --exclude-file (a FIFO): that must come before restic reads
    any file below its paths, with the restic this machine has (the one uploaded to hosts that lack
    it). While restic waits on the FIFO the file changes; the snapshot must hold the change."""
    import shutil

    restic_bin = shutil.which("restic")
    if restic_bin is None:
        if os.environ.get("CI"):
            pytest.fail("restic is not installed (.ci/setup installs it)")
        pytest.skip("restic is not installed here")
    repo, src, fifo, password = tmp_path / "repo", tmp_path / "src", tmp_path / "excludes", tmp_path / "pw"
    src.mkdir()
    (src / "file").write_text("before\n")
    password.write_text("pw\n")
    base = [restic_bin, "--repo", str(repo), "--password-file", str(password), "--cache-dir", str(tmp_path / "c")]
    subprocess.run([*base, "--quiet", "init"], check=True, capture_output=True, timeout=120)
    os.mkfifo(fifo)
    backup = subprocess.Popen([*base, "--quiet", "backup", "--json", "--exclude-file", str(fifo), "--", str(src)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        with open(fifo, "w"):  # returns once restic opened it to read: it has read nothing of src yet
            (src / "file").write_text("after\n")
        out, err = backup.communicate(timeout=120)
    finally:
        if backup.poll() is None:
            backup.kill()
    assert backup.returncode == 0, err
    shown = subprocess.run([*base, "--quiet", "dump", "latest", str(src / "file")], capture_output=True, text=True,
                           timeout=120, check=True)  # fmt: skip
    assert shown.stdout == "after\n"


def test_this_machines_restic_says_which_file_it_could_not_read_on_stderr() -> None:
    """restic 0.14's --json error lines go to stderr (exit 3): the backup reads both streams for them."""
    import shutil
    import tempfile

    restic_bin = shutil.which("restic")
    if restic_bin is None or os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("restic is not installed or not root (.ci/setup installs it; CI runs as root)")
        pytest.skip("needs restic and root (to read as another user)")
    top = Path(tempfile.mkdtemp(prefix="jk-restic-"))
    try:
        top.chmod(0o755)
        src, repo = top / "src", top / "repo"
        src.mkdir()
        (src / "ok").write_text("x\n")
        (src / "secret").write_text("y\n")
        (src / "secret").chmod(0o000)  # unreadable to the user restic runs as below
        (top / "pw").write_text("pw\n")
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", restic_bin, "--repo", str(repo),
                     "--password-file", str(top / "pw"), "--cache-dir", str(top / "cache")]  # fmt: skip
        for path in (top / "pw",):
            os.chown(path, 65534, 65534)
        os.chown(top, 65534, 65534)
        subprocess.run([*as_nobody, "--quiet", "init"], check=True, capture_output=True, timeout=120)
        done = subprocess.run([*as_nobody, "--quiet", "backup", "--json", "--", str(src)], capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    finally:
        shutil.rmtree(top, ignore_errors=True)
    assert done.returncode == 3
    assert [item for item, _ in instant.read_errors(done.stderr)] == [str(src / "secret")]
