"""The restore's room check on its own (jackin/snapshots/host.py ``room_script``), run here with a stand-in
restic: what snapshot.restore asks each host before it changes anything."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from jackin.snapshots import host as remote
from jackin.snapshots import restic as restic_paths

FREE = 1_000_000  # what the stand-in df says the homes' filesystem has free


def run(tmp_path: Path, agents: list[tuple[str, str, str | None]], min_free: int, *, restic: bool = True):
    """The script with each agent's home under tmp_path, a restic answering 3000 bytes per snapshot, and a df
    answering one filesystem with ``FREE`` bytes free."""
    fake = tmp_path / "bin" / "restic"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\necho \'{"total_size":3000,"total_file_count":1}\'\n')
    fake.chmod(0o755)
    df = tmp_path / "bin" / "df"  # one filesystem with FREE bytes free, whatever this shared machine's disk does
    df.write_text(f'#!/bin/sh\ncase "$*" in *source*) echo Filesystem; echo /dev/standin ;; '
                  f'*) echo Avail; echo {FREE} ;; esac\n')  # fmt: skip
    df.chmod(0o755)
    script = remote.room_script("demo", agents, min_free=min_free)
    for instance, _, _ in agents:
        home = tmp_path / instance
        home.mkdir(exist_ok=True)
        script = script.replace(restic_paths.home_path("demo", instance), str(home))
    path = f"{fake.parent}:/usr/bin:/bin" if restic else f"{tmp_path / 'empty'}"  # no restic on it
    script = script.replace("/usr/local/lib/jackin/restic", str(tmp_path / "none"))
    return subprocess.run([shutil.which("bash") or "/bin/bash", "-c", script], capture_output=True, text=True,
                          timeout=20, env={"PATH": path})  # fmt: skip


def test_room_for_every_agent_is_room(tmp_path: Path) -> None:
    done = run(tmp_path, [("coder-1", "a1", None), ("coder-2", "b2", "/elsewhere/repo")], 0)
    assert (done.returncode, done.stdout) == (0, "room\n"), done.stderr


def test_agents_on_one_filesystem_are_added_up_and_refused_with_the_numbers(tmp_path: Path) -> None:
    free = FREE
    # Each alone leaves min_free (3000 bytes of room apart); the two together do not.
    done = run(tmp_path, [("coder-1", "a1", None), ("coder-2", "b2", None)], free - 4500)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert "coder-1, coder-2 need 6000 bytes to restore and the filesystem of their homes has" in done.stderr
    one = run(tmp_path, [("coder-1", "a1", None)], free)
    assert "coder-1 needs 3000 bytes to restore and the filesystem of its home has" in one.stderr
    assert done.stderr.rstrip().endswith("(snapshots.min_free); nothing was changed")
    alone = run(tmp_path, [("coder-1", "a1", None)], free - 4500)
    assert alone.returncode == 0, alone.stderr


def test_a_missing_home_is_refused_and_a_host_without_restic_is_not_asked(tmp_path: Path) -> None:
    script = remote.room_script("demo", [("gone-1", "a1", None)], min_free=0)
    fake = tmp_path / "restic"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    done = subprocess.run(["bash", "-c", script.replace("/srv/jackin/demo/gone-1", str(tmp_path / "nope"))],
                          capture_output=True, text=True, timeout=20, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 1 and "the home of gone-1 is missing" in done.stderr
    unchecked = run(tmp_path, [("coder-1", "a1", None)], 0, restic=False)
    assert (unchecked.returncode, unchecked.stdout) == (0, "unchecked\n")
