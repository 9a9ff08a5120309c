"""The ``FleetState`` fact: canned host output -> ``HostState``, and the command
that produces it (quoted, scoped to the fleet's uid range, valid POSIX sh)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from jackin.lifecycle import down as lifecycle
from jackin.facts.fleet import Container, FleetState, HostState, Network, PathInfo, User, parse_state, state_command
from jackin.facts.state import StateError
from jackin.plan.fleet import FleetPlan
from jackin.transport.ssh import SshTarget

NOLOGIN = "/usr/sbin/nologin"


def container_json(name: str, instance: str, *, running: bool = True, config: str = "aa672cbdb358",
                   restarts: int = 0, error: str = "") -> str:  # fmt: skip
    """One line of ``docker inspect --format '{{json .}}'`` (the keys parse_state reads, and some it doesn't)."""
    return json.dumps({
        "Id": "0123456789abcdef" * 4,
        "Name": f"/{name}",
        "RestartCount": restarts,
        "State": {"Status": "running" if running else "exited", "Running": running, "Pid": 4242 if running else 0,
                  "StartedAt": "2026-01-02T15:59:00.25Z", "Error": error},
        "Config": {"User": "60000:60000", "Labels": {"jackin.fleet": "demo", "jackin.agent": instance,
                                                      "jackin.config": config}},
        "HostConfig": {"Memory": 1073741824},
    })  # fmt: skip


def network_json(name: str, instance: str, bridge: str, subnet: str | None) -> str:
    return json.dumps({
        "Name": name, "Id": "feedface" * 8, "Driver": "bridge",
        "IPAM": {"Driver": "default", "Options": None,
                 "Config": [{"Subnet": subnet, "Gateway": "172.20.0.1"}] if subnet else None},
        "Options": {"com.docker.network.bridge.name": bridge, "com.docker.network.bridge.enable_icc": "false"},
        "Labels": {"jackin.fleet": "demo", "jackin.agent": instance},
    })  # fmt: skip


def hex_paths(*records: bytes | str) -> list[str]:
    """What the read's ``find -printf '%y %m %U %G %p\\0' | od -An -v -tx1`` prints for ``records``."""
    raw = b"".join((r.encode() if isinstance(r, str) else r) + b"\0" for r in records)
    return [" " + " ".join(f"{b:02x}" for b in raw[i:i + 16]) for i in range(0, len(raw), 16)]


FULL = [
    "##users",
    "jk-demo--coder-1:x:60000:60000:jackin/demo/coder-1:/srv/jackin/demo/coder-1:/usr/sbin/nologin",
    "jk-demo--coder-2:x:60001:60001:jackin/demo/coder-2:/srv/jackin/demo/coder-2:/usr/sbin/nologin",
    "##groups",
    "jk-demo--coder-1:60000",
    "jk-demo--coder-2:60001",
    "##paths",
    *hex_paths("d 711 0 0 /srv/jackin/demo", "d 750 0 60000 /srv/jackin/demo/coder-1",
               "d 700 60000 60000 /srv/jackin/demo/coder-1/workspace"),
    "##docker",
    "ok",
    "##containers",
    container_json("jk-demo--coder-1", "coder-1", restarts=2),
    container_json("jk-demo--coder-2", "coder-2", running=False, error="OCI runtime create failed: x"),
    "##networks",
    network_json("jk-demo--coder-1", "coder-1", "jk668ccdd6", "172.20.0.0/16"),
    network_json("jk-demo--coder-2", "coder-2", "jk0a1b2c3d", None),
    "##images",
    "jackin/agent:busybox",
    "##marker",
    "yes",
    "##nft",
    "yes",
]
EMPTY = ["##users", "##groups", "##paths", "##docker", "##containers", "##networks", "##images", "##marker", "##nft"]
NO_DOCKER = ["##users", "##groups", "##paths", "##docker", "##marker", "##nft"]


# --- parse_state -----------------------------------------------------------------


def test_parse_full_state() -> None:
    state = parse_state(FULL)
    assert state.users == {
        "jk-demo--coder-1": User(name="jk-demo--coder-1", uid=60000, gid=60000, comment="jackin/demo/coder-1",
                                home="/srv/jackin/demo/coder-1", shell=NOLOGIN),
        "jk-demo--coder-2": User(name="jk-demo--coder-2", uid=60001, gid=60001, comment="jackin/demo/coder-2",
                                home="/srv/jackin/demo/coder-2", shell=NOLOGIN),
    }  # fmt: skip
    assert state.groups == {"jk-demo--coder-1": 60000, "jk-demo--coder-2": 60001}
    assert state.paths == {
        "/srv/jackin/demo": PathInfo(mode="0711", uid=0, gid=0),
        "/srv/jackin/demo/coder-1": PathInfo(mode="0750", uid=0, gid=60000),
        "/srv/jackin/demo/coder-1/workspace": PathInfo(mode="0700", uid=60000, gid=60000),
    }
    assert state.docker is True
    assert state.containers == {
        "jk-demo--coder-1": Container(
            name="jk-demo--coder-1", status="running", running=True, restarts=2, started="2026-01-02T15:59:00.25Z",
            labels={"jackin.fleet": "demo", "jackin.agent": "coder-1", "jackin.config": "aa672cbdb358"},
        ),
        "jk-demo--coder-2": Container(
            name="jk-demo--coder-2", status="exited", running=False, started="2026-01-02T15:59:00.25Z",
            error="OCI runtime create failed: x",
            labels={"jackin.fleet": "demo", "jackin.agent": "coder-2", "jackin.config": "aa672cbdb358"},
        ),
    }  # fmt: skip
    assert state.containers["jk-demo--coder-1"].instance == "coder-1"
    assert state.networks == {
        "jk-demo--coder-1": Network(name="jk-demo--coder-1", bridge="jk668ccdd6", subnets=["172.20.0.0/16"],
                                   labels={"jackin.fleet": "demo", "jackin.agent": "coder-1"}),
        "jk-demo--coder-2": Network(name="jk-demo--coder-2", bridge="jk0a1b2c3d", subnets=[],
                                   labels={"jackin.fleet": "demo", "jackin.agent": "coder-2"}),
    }  # fmt: skip
    assert state.images == ["jackin/agent:busybox"]
    assert (state.marker, state.nft_table) == (True, True)


def test_parse_empty_sections_is_an_empty_host() -> None:
    state = parse_state(EMPTY)
    assert state == HostState()
    assert (state.docker, state.marker, state.nft_table) == (False, False, False)


def test_parse_host_without_docker() -> None:
    lines = ["##users", "##groups", "##paths", "##docker", "##marker", "yes", "##nft"]
    state = parse_state(lines)
    assert state.docker is False
    assert (state.containers, state.networks, state.images) == ({}, {}, [])
    assert state.marker is True
    assert parse_state(NO_DOCKER) == HostState()


def test_parse_ignores_noise_before_the_first_section_and_blank_lines() -> None:
    lines = ["Welcome to Debian!", "", *FULL[:2], "", "   ", *FULL[2:]]
    assert parse_state(lines) == parse_state(FULL)


def test_parse_zero_pads_modes_and_keeps_the_type() -> None:
    state = parse_state(["##paths", *hex_paths("d 2755 0 0 /srv/jackin/demo", "l 777 1 2 /srv/jackin/demo/odd name")])
    assert state.paths == {"/srv/jackin/demo": PathInfo(mode="2755", uid=0, gid=0),
                           "/srv/jackin/demo/odd name": PathInfo(kind="l", mode="0777", uid=1, gid=2)}  # fmt: skip


FORGED = "x\n##users\njk-demo--coder-9:x:60009:60009:jackin/demo/coder-9:/:/bin/sh\n##marker\nyes\n700 0 0 /etc"


def test_a_file_name_cannot_forge_the_read() -> None:
    """Newlines, '##', spaces, NUL-free non-UTF-8: in hex they are only a path, and exactly that path."""
    names = [f"/srv/jackin/demo/coder-1/{FORGED}".encode(), b"/srv/jackin/demo/coder-1/\xff\xfe ##x"]
    lines = ["##users", "##paths", *hex_paths(*(b"f 644 60000 60000 " + n for n in names)), "##marker"]
    assert all(set(line) <= set(" 0123456789abcdef") for line in lines[2:-1])
    state = parse_state(lines)
    assert (state.users, state.marker) == ({}, False)
    assert set(state.paths) == {f"/srv/jackin/demo/coder-1/{FORGED}", "/srv/jackin/demo/coder-1/\\xff\\xfe ##x"}


def test_old_style_plain_listing_with_a_forged_section_is_an_error() -> None:
    """Defence in depth: a section twice (what a forged name did to the old plain listing) stops the read."""
    lines = ["##users", "##paths", *f"f 644 60000 60000 /srv/jackin/demo/coder-1/{FORGED}".split("\n")]
    with pytest.raises(StateError, match="section 'users' twice"):
        parse_state(lines)


@pytest.mark.parametrize("records", [
    ["d 700 x 0 /srv/jackin/demo"], ["dd 700 0 0 /srv/jackin/demo"], ["d 700 0 /srv/jackin/demo"],
], ids=["uid not a number", "type not one letter", "a field short"])  # fmt: skip
def test_parse_drops_malformed_path_records(records: list[str]) -> None:
    assert parse_state(["##paths", *hex_paths(*records, "d 711 0 0 /srv/jackin/demo")]).paths == {
        "/srv/jackin/demo": PathInfo(mode="0711", uid=0, gid=0)}  # fmt: skip


def test_parse_ignores_a_paths_section_that_is_not_hex() -> None:
    assert parse_state(["##paths", "700 0 0 /srv/jackin/demo"]).paths == {}


def test_parse_container_without_labels_and_network_without_ipam() -> None:
    info = json.loads(container_json("jk-demo--x-1", "x-1"))
    info["Config"]["Labels"] = None
    info.pop("RestartCount")
    net = {"Name": "jk-demo--x-1", "IPAM": None, "Options": None, "Labels": None}
    state = parse_state(["##containers", json.dumps(info), "##networks", json.dumps(net)])
    assert state.containers["jk-demo--x-1"].labels == {}
    assert state.containers["jk-demo--x-1"].restarts == 0
    assert state.containers["jk-demo--x-1"].instance is None
    assert state.networks["jk-demo--x-1"] == Network(name="jk-demo--x-1")


@pytest.mark.parametrize("line", [
    "broken:x:1", "jk-demo--a-1:x:60000:60000:jackin/demo/a-1:/h:/bin/sh:extra", "jk-demo--a-1:x:6e4:60000:c:/h:/s",
    "jk-demo--a-1:x:６0000:60000:c:/h:/s", ":x:60000:60000:jackin/demo/a-1:/h:/s",
], ids=["short", "long", "uid not decimal", "uid with a non-ASCII digit", "no name"])  # fmt: skip
def test_parse_drops_a_malformed_user_line(line: str) -> None:
    assert parse_state(["##users", line, "##groups", "g:x", "##paths"]).users == {}
    assert parse_state(["##groups", "g:x", "h:1:2"]).groups == {}


# --- HostState helpers -----------------------------------------------------------


def test_user_by_uid() -> None:
    state = parse_state(FULL)
    assert state.user_by_uid(60001).name == "jk-demo--coder-2"  # type: ignore[union-attr]
    assert state.user_by_uid(60002) is None


def test_fleet_users_are_found_by_comment() -> None:
    state = HostState(users={
        u.name: u for u in [
            User(name="jk-demo--a-1", uid=60000, gid=60000, comment="jackin/demo/a-1", home="/h", shell=NOLOGIN),
            User(name="jk-demo-2--a-1", uid=60001, gid=60001, comment="jackin/demo-2/a-1", home="/h", shell=NOLOGIN),
            User(name="backup", uid=60002, gid=60002, comment="backup jackin/demo/", home="/h", shell="/bin/sh"),
            User(name="jk-demo--old-1", uid=50000, gid=50000, comment="jackin/demo/old-1", home="/h", shell=NOLOGIN),
            User(name="decoy", uid=60003, gid=60003, comment="jackin/demo/x", home="/", shell="/bin/sh"),
        ]
    })  # fmt: skip
    assert sorted(u.name for u in state.fleet_users("demo")) == ["jk-demo--a-1", "jk-demo--old-1"]
    assert [u.name for u in state.fleet_users("demo-2")] == ["jk-demo-2--a-1"]
    assert state.fleet_users("other") == []


def test_leftovers_of_a_full_host() -> None:
    assert parse_state(FULL).leftovers == {
        "users": ["jk-demo--coder-1", "jk-demo--coder-2"],
        "groups": [],
        "containers": ["jk-demo--coder-1", "jk-demo--coder-2"],
        "networks": ["jk-demo--coder-1", "jk-demo--coder-2"],
        "paths": ["/srv/jackin/demo", "/srv/jackin/demo/coder-1", "/srv/jackin/demo/coder-1/workspace"],
        "files": ["marker"],
        "nft": ["table"],
        "cow": [],
        "snapshots": [],
        "credentials": [],
        "ttl": [],
        "work": [], "gateway": [],
    }


def test_leftovers_of_an_empty_host() -> None:
    assert not any(parse_state(EMPTY).leftovers.values())


def test_clean_check_ignores_another_fleets_users_in_the_uid_range(monkeypatch: pytest.MonkeyPatch) -> None:
    other = "jk-demo-2--coder-1:x:60005:60005:jackin/demo-2/coder-1:/srv/jackin/demo-2/coder-1:/usr/sbin/nologin"
    output = "\n".join(["##users", other, "##groups", "jk-demo-2--coder-1:60005", *EMPTY[2:]])
    monkeypatch.setattr(lifecycle, "gather", lambda hosts, command, parse, **kw: {h.name: parse(output) for h in hosts})
    target = SshTarget(name="web-1", address="192.0.2.10", known_hosts=Path("/nonexistent"))
    plan = FleetPlan(fleet="demo", uid_min=60000, uid_max=60999, agents=[])
    [check] = lifecycle.clean_check(plan, [target])
    assert (check.clean, check.leftovers) == (True, {})


# --- state_command ---------------------------------------------------------------


def sh_syntax_ok(command: str) -> subprocess.CompletedProcess[str]:
    """``sh -n``: parse only, execute nothing."""
    return subprocess.run(["sh", "-n", "-c", command], capture_output=True, text=True, timeout=10)


def test_state_command_scopes_to_the_fleet_and_its_uid_range() -> None:
    command = state_command("demo", 60000, 60999, ["jackin/agent:busybox", "jackin/agent:v2"])
    assert "$3 >= 60000 && $3 <= 60999" in command
    assert command.count("--filter label=jackin.fleet=demo") == 2
    assert "find /srv/jackin/demo -maxdepth 1 -printf '%y %m %U %G %p\\0'" in command
    assert "find /srv/jackin/demo -mindepth 2 -maxdepth 2 -name workspace" in command
    assert "| od -An -v -tx1" in command
    assert "for i in jackin/agent:busybox jackin/agent:v2; do" in command
    assert "[ -e /var/lib/jackin/fleet-demo.json ]" in command
    assert "nft list table inet jackin-demo" in command
    assert [line.split(";")[0] for line in command.splitlines() if line.startswith("echo '##")] == [
        "echo '##fleet'", "echo '##host'", "echo '##users'", "echo '##groups'", "echo '##paths'", "echo '##docker'", "echo '##containers'",
        "echo '##networks'", "echo '##images'", "echo '##marker'", "echo '##nft'", "echo '##nfthash'", "echo '##wall'",
        "echo '##files'", "echo '##cow'", "echo '##cowquota'", "echo '##snapshots'", "echo '##creds'", "echo '##creddigests'",
            "echo '##apparmor'", "echo '##ttl'", "echo '##work'", "echo '##workdigests'", "echo '##gateway'",
    ]  # fmt: skip


def test_state_command_quotes_the_fleet_name_and_images() -> None:
    command = state_command("my fleet", 60000, 60999, ["odd image;reboot"], root="/srv/jackin")
    assert "awk -F: -v c='jackin/my fleet/' " in command
    assert "--filter 'label=jackin.fleet=my fleet'" in command
    assert "[ -d /srv/jackin/'my fleet' ]" in command
    assert "nft list table inet 'jackin-my fleet'" in command
    assert "/var/lib/jackin/fleet-'my fleet'.json" in command
    assert "for i in 'odd image;reboot'; do" in command
    assert sh_syntax_ok(command).returncode == 0


def _outside_single_quotes(command: str) -> str:
    """The text the shell would still expand: everything not inside '...'."""
    out, quoted = [], False
    for char in command:
        if char == "'":
            quoted = not quoted
        elif not quoted:
            out.append(char)
    return "".join(out)


def test_state_command_leaves_nothing_of_the_fleet_name_to_the_shell() -> None:
    """fleet.gc tears down fleets named by what it finds on a host, so the name is untrusted text."""
    command = state_command('x$(touch /tmp/owned)"y', 60000, 60999)
    assert "touch /tmp/owned" not in _outside_single_quotes(command)
    assert sh_syntax_ok(command).returncode == 0


@pytest.mark.parametrize("images", [[], ["jackin/agent:busybox"]], ids=["no-images", "one-image"])
def test_state_command_is_valid_posix_sh(images: list[str]) -> None:
    result = sh_syntax_ok(state_command("demo", 60000, 60999, images))
    assert (result.returncode, result.stderr) == (0, "")


def test_state_command_for_gc_has_an_empty_uid_range() -> None:
    command = state_command("orphan", 0, -1)
    assert "$3 >= 0 && $3 <= -1" in command
    assert sh_syntax_ok(command).returncode == 0


def test_fact_delegates_to_the_pure_functions() -> None:
    fact = FleetState()
    assert fact.command("demo", 60000, 60999, ("jackin/agent:busybox",)) == state_command(
        "demo", 60000, 60999, ["jackin/agent:busybox"]
    )
    assert fact.process(FULL) == parse_state(FULL)


def test_shlex_round_trip_of_the_quoted_label() -> None:
    """The docker filter reaches docker as one argument even with a space in the fleet name."""
    line = next(line for line in state_command("my fleet", 1, 2).splitlines() if "##containers" in line)
    inner = line.split("c=$(", 1)[1].split(")", 1)[0]
    assert shlex.split(inner) == ["docker", "ps", "-aq", "--filter", "label=jackin.fleet=my fleet"]


def test_the_paths_read_run_locally_lists_only_homes_and_workspaces_by_their_exact_names(tmp_path: Path) -> None:
    """The real find | od on a local tree: agent-made names at depth 2 are not listed, a hostile
    depth-1 name comes back byte-exact, a symlinked workspace is reported as a link."""
    fleet_dir = tmp_path / "demo"
    (fleet_dir / "coder-1" / "workspace").mkdir(parents=True)
    (fleet_dir / "coder-1" / FORGED.replace("/", "_")).write_text("")
    (fleet_dir / "coder-2").mkdir()
    (fleet_dir / "coder-2" / "workspace").symlink_to("/etc")
    odd = os.fsencode(str(fleet_dir)) + b"/x\n##users\n\xff"
    os.mkdir(odd)
    command = state_command("demo", 60000, 60999, root=str(tmp_path))
    script = next(line for line in command.splitlines() if line.startswith("echo '##paths'"))
    out = subprocess.run(["sh", "-c", script], capture_output=True, timeout=10).stdout.decode()
    state = parse_state(out.split("\n"))
    assert set(state.paths) == {str(fleet_dir), f"{fleet_dir}/coder-1", f"{fleet_dir}/coder-2",
                                f"{fleet_dir}/coder-1/workspace", f"{fleet_dir}/coder-2/workspace",
                                f"{fleet_dir}/x\n##users\n\\xff"}  # fmt: skip
    assert state.paths[f"{fleet_dir}/coder-2/workspace"].kind == "l"
    assert state.paths[f"{fleet_dir}/coder-1/workspace"].kind == "d"


@pytest.mark.parametrize(
    "section",
    [["##containers", "not json"], ["##containers", '{"Name": "/x"}'], ["##networks", "[1, 2]"],
     ["##containers", '{"Name": 5, "State": {}, "Config": {}}']],
    ids=["not-json", "missing-keys", "wrong-shape", "wrong-types"],
)  # fmt: skip
def test_a_container_or_network_line_that_does_not_parse_is_a_state_error(section: list[str]) -> None:
    """It fails that host alone (remote.gather turns JackinError into the host's error), never a traceback."""
    with pytest.raises(StateError, match="does not parse"):
        parse_state(section)
