"""The checkpoint tier's pure side: names, the state read's section, scripts, parsers, and the
Fabric functions against a fake connection (no network)."""

from __future__ import annotations

import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from jackin import hostpaths
from jackin.errors import EXIT_FAILED, EXIT_SPEC, SpecError
from jackin.facts import cow as cow_facts
from jackin.operations import cow as cow_ops
from jackin.snapshots import cow

ID, ID2 = "20261203-050000-abcd", "20261203-060000-0f0f"


def sh_syntax_ok(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True, timeout=10)


# --- names ---------------------------------------------------------------------------


def test_paths_follow_the_shared_layout() -> None:
    assert cow.fleet_dir("demo") == "/srv/jackin/demo"
    assert cow.home_path("demo", "coder-1") == "/srv/jackin/demo/coder-1"
    assert cow.image_path("demo") == "/var/lib/jackin/cow/demo.img"
    assert cow.checkpoint_path("demo", "coder-1", ID) == f"/srv/jackin/demo/.checkpoints/coder-1/{ID}"
    assert cow.checkpoints_dir("demo") == "/srv/jackin/demo/.checkpoints"
    assert cow.swap_path("demo", "coder-1") == "/srv/jackin/demo/.checkpoints/.swap/coder-1"


@pytest.mark.parametrize(("path", "escaped"), [
    ("/srv/jackin/demo", "srv-jackin-demo"),
    ("/srv/jackin/my-fleet", "srv-jackin-my\\x2dfleet"),
    ("/srv//jackin/a.b/", "srv-jackin-a.b"),
    ("/srv/.hidden", "srv-.hidden"),
    ("/.a/b", "\\x2ea-b"),
    ("/srv/x y", "srv-x\\x20y"),
    ("/", "-"),
])  # fmt: skip
def test_systemd_escape_path_matches_systemd(path: str, escaped: str) -> None:
    assert hostpaths.systemd_escape_path(path) == escaped


@pytest.mark.skipif(shutil.which("systemd-escape") is None, reason="no systemd-escape on this machine")
def test_systemd_escape_path_agrees_with_the_real_tool() -> None:
    paths = ["/srv/jackin/demo", "/srv/jackin/my-fleet-2", "/srv/.hidden", "/.a/b", "/srv/x y", "/srv/ü:_."]
    real = subprocess.run(["systemd-escape", "-p", *paths], capture_output=True, text=True, timeout=10).stdout.split()
    assert [hostpaths.systemd_escape_path(p) for p in paths] == real


def test_unit_name_and_text() -> None:
    assert cow.unit_name("my-fleet") == "srv-jackin-my\\x2dfleet.mount"
    assert cow.unit_path("demo") == "/etc/systemd/system/srv-jackin-demo.mount"
    text = cow_ops.unit_text("demo")
    for line in ("What=/var/lib/jackin/cow/demo.img", "Where=/srv/jackin/demo", "Type=btrfs",
                 "Options=loop,nodev,nosuid", "Before=docker.service", "WantedBy=local-fs.target",
                 "RequiresMountsFor=/var/lib/jackin/cow"):  # fmt: skip
        assert line in text.splitlines()
    assert "Requires=docker" not in text and "RequiredBy" not in text  # ordered, never binding Docker
    assert cow_ops.unit_hash("demo") != cow_ops.unit_hash("demo-2")


@pytest.mark.parametrize(("call", "message"), [
    (lambda: cow.home_path("demo", "../etc"), "invalid agent instance '../etc': expected lower-case letters"),
    (lambda: cow.home_path("Demo", "coder-1"), "invalid fleet name 'Demo'"),
    (lambda: cow.checkpoint_path("demo", "coder-1", "../../x"), "invalid snapshot id '../../x': expected YYYYMMDD-HHMMSS-xxxx"),
    (lambda: cow.checkpoint_path("demo", "coder-1", "20261203-050000-ABCD"), "invalid snapshot id"),
    (lambda: cow.swap_path("demo", ".swap"), "invalid agent instance '.swap'"),
])  # fmt: skip
def test_bad_names_are_spec_errors(call, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)) as caught:
        call()
    assert caught.value.exit_code == EXIT_SPEC


# --- the state read ---------------------------------------------------------------------


def test_state_section_is_posix_sh_and_reads_only_our_paths() -> None:
    section = cow_facts.state_section("demo")
    assert sh_syntax_ok(section).returncode == 0
    assert "[ -f /var/lib/jackin/cow/demo.img ]" in section
    assert "systemctl is-enabled srv-jackin-demo.mount" in section
    assert "mountpoint -q /srv/jackin/demo" in section
    assert "-inum 256 -printf '%p\\0' | od -An -v -tx1" in section


def test_state_section_of_a_name_that_is_no_fleets_is_empty() -> None:
    assert cow_facts.state_section('x$(touch /tmp/owned)"y') == "echo '##cow'"


def test_parse_state_reads_a_full_tier() -> None:
    subvols = "/srv/jackin/demo/coder-1\0/srv/jackin/demo/coder-2\0".encode().hex()
    state = cow_facts.parse_state(["image 1073741824", "unit " + "a" * 64, "enabled", "mounted btrfs"], [subvols])
    assert state == cow_facts.CowState(image_size=1073741824, unit_hash="a" * 64, enabled=True, mounted="btrfs",
                                 subvolumes=["/srv/jackin/demo/coder-1", "/srv/jackin/demo/coder-2"])  # fmt: skip
    assert state.leftovers == ["image", "mount unit", "mount (btrfs)"]


def test_parse_state_drops_malformed_lines() -> None:
    state = cow_facts.parse_state(["image 12x", "unit nothex", "enabled yes", "mounted bt rfs", "other 1"], ["zz"])
    assert state == cow_facts.CowState() and state.leftovers == []


# --- scripts ------------------------------------------------------------------------------


def all_scripts() -> dict[str, str]:
    return {
        "supported": cow.supported_script("demo"),
        "supported-home": cow.supported_script("demo", "coder-1"),
        "checkpoint": cow.checkpoint_script("demo", "coder-1", ID),
        "list": cow.list_script("demo"),
        "list-one": cow.list_script("demo", "coder-1"),
        "delete": cow.delete_script("demo", "coder-1", ID),
        "restore": cow.restore_script("demo", "coder-1", ID),
        "restore-keep": cow.restore_script("demo", "coder-1", ID, previous_id=ID2),
    }


@pytest.mark.parametrize("name", sorted(all_scripts()))
def test_scripts_are_posix_sh_and_never_name_a_path_inside_a_workspace(name: str) -> None:
    script = all_scripts()[name]
    done = sh_syntax_ok(script)
    assert (done.returncode, done.stderr) == (0, "")
    assert "workspace" not in script  # root acts on whole subvolumes only


def test_checkpoint_script_snapshots_the_home_read_only_in_a_root_only_dir() -> None:
    script = cow.checkpoint_script("demo", "coder-1", ID)
    lines = script.splitlines()
    assert "install -d -m 0700 -o root -g root -- /srv/jackin/demo/.checkpoints /srv/jackin/demo/.checkpoints/coder-1" in lines
    assert 'btrfs subvolume snapshot -r "$H" "$C" >/dev/null' in lines
    assert f"C=/srv/jackin/demo/.checkpoints/coder-1/{ID}" in lines
    assert lines.index('subvol "$H" || fail "the home of coder-1 ($H) is not a btrfs subvolume: no checkpoint for it '
                       '(fleet.up makes one; after an interrupted restore, restore again)"') < lines.index(
        'btrfs subvolume snapshot -r "$H" "$C" >/dev/null')  # fmt: skip
    # Taken with the agent frozen (a subvolume snapshotted while written is not one instant), and thawed
    # right after, and on every way out (the EXIT trap).
    snap = lines.index('btrfs subvolume snapshot -r "$H" "$C" >/dev/null')
    freeze = lines.index('freeze || fail "cannot freeze the container of coder-1 for its checkpoint"')
    assert lines.index("trap 'thaw' EXIT") < freeze < snap < max(i for i, line in enumerate(lines) if line == "thaw")
    assert "FC=jk-demo--coder-1; froze=; W=; froze_how=" in lines


def test_restore_script_refuses_before_it_changes_anything_and_swaps_by_rename() -> None:
    lines = cow.restore_script("demo", "coder-1", ID).splitlines()
    refuse = next(i for i, line in enumerate(lines) if "docker inspect --format '{{.State.Running}}' jk-demo--coder-1" in line)
    first_change = next(i for i, line in enumerate(lines) if re.match(r"\s*(if .*then )?(mv|btrfs subvolume (snapshot|delete)|install)", line))
    assert refuse < first_change
    assert lines[refuse + 1].strip().startswith("refuse ")
    # The writable copy beside the home, then home aside and copy in; the old one only after.
    snap = lines.index('btrfs subvolume snapshot "$C" "$X/new" >/dev/null')
    aside = lines.index('if [ -e "$H" ]; then mv -T -- "$H" "$X/old"; fi')
    into = lines.index('if ! mv -T -- "$X/new" "$H"; then')
    assert snap < aside < into
    assert "trap '' HUP INT TERM PIPE" in lines[snap:aside]
    assert lines.index('elif ! btrfs subvolume delete "$X/old" >/dev/null 2>&1; then') > into


def test_restore_script_keeps_the_old_home_as_a_read_only_checkpoint_when_asked() -> None:
    script = cow.restore_script("demo", "coder-1", ID, previous_id=ID2)
    assert f"P=/srv/jackin/demo/.checkpoints/coder-1/{ID2}" in script.splitlines()
    assert 'mv -T -- "$X/old" "$P"; btrfs property set -ts "$P" ro true' in script
    assert "exists already: not overwritten" in script


# --- parsers -----------------------------------------------------------------------------


def test_parse_took() -> None:
    assert cow.parse_took("noise\ntook_ns=12345678\n") == pytest.approx(12.345678)
    assert cow.parse_took("took_ns=12x\n") == 0.0


def test_parse_list_keeps_only_instance_slash_id() -> None:
    names = [f"coder-1/{ID}", f"coder-2/{ID2}", f".swap/{ID}", "coder-1/not-an-id", f"coder-1/{ID}\n##x", f"../{ID}"]
    out = "".join(n + "\0" for n in names).encode().hex()
    found = cow.parse_list(" ".join(out[i:i + 32] for i in range(0, len(out), 32)), "demo")
    assert [(c.instance, c.snapshot_id) for c in found] == [("coder-1", ID), ("coder-2", ID2)]
    assert found[0].path == f"/srv/jackin/demo/.checkpoints/coder-1/{ID}"
    one = cow.parse_list(f"{ID2}\0{ID}\0".encode().hex(), "demo", "coder-1")
    assert [c.snapshot_id for c in one] == [ID, ID2]


def test_parse_list_refuses_output_that_is_not_hex() -> None:
    with pytest.raises(cow.CheckpointError, match="does not parse"):
        cow.parse_list("coder-1/x", "demo")


# --- the Fabric functions, against a fake connection ---------------------------------------


class FakeConn:
    def __init__(self, exited: int = 0, stdout: str = "", stderr: str = ""):
        self.result = SimpleNamespace(exited=exited, stdout=stdout, stderr=stderr)
        self.commands: list[str] = []

    def run(self, command: str, **kwargs: object) -> SimpleNamespace:
        self.commands.append(command)
        assert kwargs == {"hide": True, "warn": True, "timeout": cow.TIMEOUT}
        return self.result


def test_checkpoint_runs_its_script_with_sh_and_reports_the_host_time() -> None:
    conn = FakeConn(stdout="took_ns=4200000\n")
    taken = cow.checkpoint(conn, "demo", "coder-1", ID)  # type: ignore[arg-type]
    assert conn.commands == ["sh -c " + __import__("shlex").quote(cow.checkpoint_script("demo", "coder-1", ID))]
    assert taken.checkpoint.path.endswith(f"/coder-1/{ID}") and taken.took_ms == pytest.approx(4.2)


def test_a_refusal_is_its_own_error_and_a_failure_says_what_failed() -> None:
    with pytest.raises(cow.CheckpointRefused, match="restoring checkpoint .* refused: agent coder-1 is running") as caught:
        cow.restore_checkpoint(FakeConn(3, stderr="agent coder-1 is running"), "demo", "coder-1", ID)  # type: ignore[arg-type]
    assert caught.value.exit_code == EXIT_FAILED and "--stop" in (caught.value.hint or "")
    with pytest.raises(cow.CheckpointError, match="deleting checkpoint .* of coder-1 failed: noise boom") as failed:
        cow.delete_checkpoint(FakeConn(1, stderr="noise\nboom"), "demo", "coder-1", ID)  # type: ignore[arg-type]
    assert not isinstance(failed.value, cow.CheckpointRefused)


def test_restore_reports_the_kept_old_home_and_the_undo_checkpoint() -> None:
    conn = FakeConn(stdout="kept=/srv/jackin/demo/.checkpoints/.swap/coder-1/kept-1\ntook_ns=9000000\n")
    done = cow.restore_checkpoint(conn, "demo", "coder-1", ID, previous_id=ID2)  # type: ignore[arg-type]
    assert done.kept == "/srv/jackin/demo/.checkpoints/.swap/coder-1/kept-1" and done.took_ms == pytest.approx(9.0)
    assert done.previous is not None and done.previous.snapshot_id == ID2


def test_supported_delete_and_list_read_their_answers() -> None:
    assert cow.supported(FakeConn(stdout="yes\n"), "demo", "coder-1")  # type: ignore[arg-type]
    assert not cow.supported(FakeConn(stdout=""), "demo")  # type: ignore[arg-type]
    assert cow.delete_checkpoint(FakeConn(stdout="deleted\n"), "demo", "coder-1", ID)  # type: ignore[arg-type]
    assert not cow.delete_checkpoint(FakeConn(stdout="absent\n"), "demo", "coder-1", ID)  # type: ignore[arg-type]
    listed = cow.list_checkpoints(FakeConn(stdout=f"coder-1/{ID}\0".encode().hex()), "demo")  # type: ignore[arg-type]
    assert [c.snapshot_id for c in listed] == [ID]


def test_bad_input_is_refused_before_any_connection_is_used() -> None:
    conn = FakeConn()
    with pytest.raises(SpecError):
        cow.restore_checkpoint(conn, "demo", "coder-1", "latest")  # type: ignore[arg-type]
    with pytest.raises(SpecError):
        cow.list_checkpoints(conn, "demo", "../x")  # type: ignore[arg-type]
    assert conn.commands == []
