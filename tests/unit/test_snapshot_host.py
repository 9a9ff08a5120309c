"""The restore's room check on its own (jackin/snapshots/host.py ``room_script``), run here with a stand-in
restic: what snapshot.restore asks each host before it changes anything."""

from __future__ import annotations

import subprocess

from jackin.snapshots import host as remote
from jackin.snapshots import restic as restic_paths


def test_the_room_check_alone_says_room_or_refuses_with_the_numbers(tmp_path) -> None:
    """snapshot.restore runs it on every agent it restores from restic before its pre-restore snapshot."""
    home = tmp_path / "home"
    home.mkdir()
    fake = tmp_path / "restic"
    fake.write_text('#!/bin/sh\necho \'{"total_size":4096,"total_file_count":1}\'\n')
    fake.chmod(0o755)

    def run(min_free: int) -> subprocess.CompletedProcess[str]:
        script = remote.room_script(str(fake), "demo", "coder-1", "abc123", min_free=min_free)
        script = script.replace(restic_paths.home_path("demo", "coder-1"), str(home))
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=20)

    done = run(0)
    assert (done.returncode, done.stdout) == (0, "room\n"), done.stderr
    refused = run(1 << 60)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "snapshot abc123 needs 4096 bytes to restore" in refused.stderr
    assert refused.stderr.rstrip().endswith("(snapshots.min_free); nothing was changed")
