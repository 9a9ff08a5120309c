"""Credentials: reading on the operator's machine, the deny check, the plan (names only) and the
delivery commands (values only ever inside an SFTP upload, never in a command's text)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from jackin.operations.files import Refused as OperationError

from jackin.spec.credentials import (
    CredentialError,
    Secrets,
    check,
    credential_like,
    denied_mounts,
    digest_key,
    read,
)
from jackin.errors import EXIT_SPEC, SpecError
from jackin.hostpaths import credentials_digests as digests_file
from jackin.hostpaths import credentials_dir as agent_dir
from jackin.operations.credentials import SecretUpload, credential_commands, teardown_commands
from jackin.operations.fleet import teardown_commands as fleet_teardown
from jackin.plan.fleet import CREDENTIALS_TARGET, FleetPlan, build
from jackin.spec import parse_inventory
from jackin.spec.models import FleetSpec, Mount
from jackin.transport.ssh import SshTarget, connection
from jackin.facts.state import HostState, PathInfo, parse_state

VALUE_A = "sk-live-AAAA1111secret"
VALUE_B = b"ghp_BBBB2222secret\n"


def spec_text(credentials: str = "", mounts: str = "", count: int = 2) -> str:
    return f"""\
fleet:
  name: demo
  provider: lab
  agents:
    - name: coder
      count: {count}
{credentials}{mounts}    - name: plain
"""


CREDS = """      credentials:
        - {name: API_KEY, from_env: JK_TEST_API_KEY}
        - {name: GH_TOKEN, from_file: FILE}
"""


def fleet(tmp_path: Path, credentials: str = CREDS, mounts: str = "", count: int = 2):
    token = tmp_path / "token"
    token.write_bytes(VALUE_B)
    return parse_inventory(spec_text(credentials.replace("FILE", str(token)), mounts, count), "f.yaml").fleet


ENV = {"JK_TEST_API_KEY": VALUE_A}
KEY = b"k" * 32


def plan_of(spec) -> FleetPlan:
    names = [f"coder-{i}" for i in range(1, 5)] + ["plain-1"]
    return build(spec, {name: 60000 + n for n, name in enumerate(names)})


# --- reading ----------------------------------------------------------------------


def test_read_takes_env_and_file_values_exactly(tmp_path: Path) -> None:
    values = read(fleet(tmp_path), environ=ENV, key=KEY)
    assert values.agents() == ["coder"]
    assert values.names("coder") == ["API_KEY", "GH_TOKEN"]
    assert values.value("coder", "API_KEY") == VALUE_A.encode()
    assert values.value("coder", "GH_TOKEN") == VALUE_B  # bytes as in the file, trailing newline included
    assert values.names("plain") == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("unset", "credential API_KEY of agent coder: environment variable JK_TEST_API_KEY is not set"),
        ("empty-env", "credential API_KEY of agent coder: environment variable JK_TEST_API_KEY is empty"),
        ("missing", "credential GH_TOKEN of agent coder: file {dir}/token does not exist"),
        ("empty-file", "credential GH_TOKEN of agent coder: file {dir}/token is empty"),
        ("blank-file", "credential GH_TOKEN of agent coder: file {dir}/token is empty"),
        ("directory", "credential GH_TOKEN of agent coder: file {dir}/token is not a regular file"),
        ("huge", "credential GH_TOKEN of agent coder: file {dir}/token is larger than 64 KiB"),
    ],
)
def test_a_missing_source_names_credential_agent_and_source_never_a_value(tmp_path: Path, change: str,
                                                                           expected: str) -> None:  # fmt: skip
    spec = fleet(tmp_path)
    token, env = tmp_path / "token", dict(ENV)
    if change == "unset":
        env = {}
    elif change == "empty-env":
        env = {"JK_TEST_API_KEY": ""}
    elif change == "missing":
        token.unlink()
    elif change == "empty-file":
        token.write_bytes(b"")
    elif change == "blank-file":
        token.write_bytes(b" \n")
    elif change == "directory":
        token.unlink()
        token.mkdir()
    elif change == "huge":
        token.write_bytes(b"x" * (64 * 1024 + 1))
    with pytest.raises(CredentialError) as caught:
        read(spec, environ=env, key=KEY)
    error = caught.value
    assert error.exit_code == EXIT_SPEC
    assert error.message == expected.format(dir=tmp_path)
    text = f"{error} {error.hint} {error.problems}"
    assert VALUE_A not in text and VALUE_B.decode().strip() not in text


def test_an_unreadable_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = fleet(tmp_path)

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", denied)
    with pytest.raises(CredentialError, match=r"file .*/token is not readable \(permission denied\)$"):
        read(spec, environ=ENV, key=KEY)


def test_every_missing_source_is_listed_at_once(tmp_path: Path) -> None:
    spec = fleet(tmp_path)
    (tmp_path / "token").unlink()
    with pytest.raises(CredentialError) as caught:
        read(spec, environ={}, key=KEY)
    assert caught.value.message == "2 credentials cannot be read"
    assert [p.split(":")[0] for p in caught.value.problems] == [
        "credential API_KEY of agent coder", "credential GH_TOKEN of agent coder"]  # fmt: skip


def test_a_fleet_without_credentials_reads_nothing_and_makes_no_key(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path / "state"))
    values = read(fleet(tmp_path, credentials=""), environ={})
    assert values.agents() == [] and values.to_wire()
    assert not (tmp_path / "state" / "credentials").exists()


def test_digest_key_is_made_once_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JACKIN_STATE_DIR", str(tmp_path / "state"))
    from jackin.paths import state_dir

    first, second = digest_key("demo"), digest_key("demo")
    assert first == second and len(first) == 32
    path = state_dir() / "credentials" / "demo" / "key"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert digest_key("other") != first


# --- Secrets ------------------------------------------------------------------------


def test_secrets_never_show_a_value() -> None:
    values = Secrets({"coder": {"API_KEY": VALUE_A.encode()}}, KEY)
    assert repr(values) == str(values) == "Secrets({'coder': ['API_KEY']})"
    assert VALUE_A not in f"{values!r} {values}"


def test_secrets_wire_round_trip_and_digests() -> None:
    values = Secrets({"coder": {"API_KEY": VALUE_A.encode(), "GH": VALUE_B}}, KEY)
    back = Secrets.from_wire(values.to_wire())
    assert "\n" not in values.to_wire()
    assert back.value("coder", "GH") == VALUE_B and back.names("coder") == ["API_KEY", "GH"]
    digest = values.digest("demo", "coder-1", "coder", "API_KEY")
    assert digest == back.digest("demo", "coder-1", "coder", "API_KEY")
    assert digest != values.digest("demo", "coder-2", "coder", "API_KEY")  # bound to the instance
    assert digest != Secrets({"coder": {"API_KEY": VALUE_A.encode()}}, b"x" * 32).digest(
        "demo", "coder-1", "coder", "API_KEY")  # keyed: no digest without the operator's key  # fmt: skip
    import hashlib

    assert digest != hashlib.sha256(VALUE_A.encode()).hexdigest()


# --- the deny check -----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/root/.ssh", "/home/me/.ssh", "/home/me/.ssh/id_ed25519", "/home/me/.aws", "/home/me/.aws/credentials",
     "/home/me/.config/gh", "/home/me/.config/gh/hosts.yml", "/home/me/.docker", "/srv/x/.docker/config.json",
     "/home/me/.kube", "/home/me/.kube/config", "/home/me/.gnupg", "/home/me/.netrc", "/home/me/.git-credentials",
     "/etc/ssh", "/etc/ssh/ssh_host_ed25519_key", "/etc/shadow", "/var/run/docker.sock", "/run/docker.sock",
     "/root", "/", "/home", "/home/me", "/Users/me", "/etc", "/var", "/run", "/var/lib/jackin",
     "/var/lib/jackin/credentials/demo", "~", "~/.ssh", "/home/me/.config/gcloud", "/home/me/.npmrc"],
)  # fmt: skip
def test_credential_like_paths(path: str) -> None:
    assert credential_like(path) is not None


@pytest.mark.parametrize(
    "path",
    ["/srv/data", "/srv/.dockerignore", "/home/me/project/src", "/home/me/.sshd_notes", "/home/me/ssh",
     "/home/me/.config/ghost", "/home/me/.config", "/opt/aws-tools", "/srv/etc/ssh", "/srv/root", "/data/home",
     "/home/me/netrc", "/home/me/.netrc.example", "/var/lib/postgres", "/srv/kube", "/mnt/shared/docs"],
)  # fmt: skip
def test_near_misses_are_not_credential_like(path: str) -> None:
    assert credential_like(path) is None


MOUNTS = """      mounts:
        - {source: /home/me/.aws, target: /aws}
        - {source: /srv/data, target: /data}
"""


def test_a_credential_like_mount_is_refused_with_exit_2(tmp_path: Path) -> None:
    spec = fleet(tmp_path, credentials="", mounts=MOUNTS)
    assert denied_mounts(spec) == [
        "agent coder: mount of /home/me/.aws is refused: it holds .aws; "
        "set acknowledge_credentials: true on that mount if the agent must have it"]  # fmt: skip
    with pytest.raises(SpecError) as caught:
        check(spec)
    assert caught.value.exit_code == EXIT_SPEC


def test_fleet_validate_refuses_a_credential_like_mount_as_fleet_plan_does(tmp_path: Path) -> None:
    from jackin.cli import fleet as fleet_cli

    path = tmp_path / "f.yaml"
    path.write_text(spec_text(mounts=MOUNTS))
    with pytest.raises(SpecError, match="mount of /home/me/.aws is refused"):
        fleet_cli.fleet_validate(str(path))
    path.write_text(spec_text(mounts=MOUNTS.replace("target: /aws}", "target: /aws, acknowledge_credentials: true}")))
    fleet_cli.fleet_validate(str(path))  # the positive control: acknowledged, it passes


def test_an_acknowledged_mount_and_a_plain_one_pass(tmp_path: Path) -> None:
    acknowledged = MOUNTS.replace("target: /aws}", "target: /aws, acknowledge_credentials: true}")
    check(fleet(tmp_path, credentials="", mounts=acknowledged))
    check(fleet(tmp_path, credentials="", mounts="      mounts:\n        - {source: /srv/data, target: /data}\n"))


def test_a_credential_file_from_a_credential_place_is_allowed(tmp_path: Path) -> None:
    """from_file is read on the operator's machine and delivered as one named file: not a mount."""
    creds = "      credentials:\n        - {name: AWS, from_file: ~/.aws/credentials}\n"
    check(fleet(tmp_path, credentials=creds))


def test_a_credential_named_twice_is_refused(tmp_path: Path) -> None:
    """The loader refuses it; ``check`` too, for a spec built otherwise (a stored one, a rollback)."""
    creds = CREDS + "        - {name: API_KEY, from_env: OTHER}\n"
    with pytest.raises(SpecError, match="invalid inventory"):
        fleet(tmp_path, credentials=creds)
    spec = FleetSpec.model_validate({"name": "demo", "agents": [{"name": "coder", "credentials": [
        {"name": "API_KEY", "from_env": "A"}, {"name": "API_KEY", "from_env": "B"}]}]})  # fmt: skip
    with pytest.raises(SpecError, match="agent coder: credential API_KEY is named more than once"):
        check(spec)


@pytest.mark.parametrize(
    ("mount", "problem"),
    [({"source": "srv/data", "target": "/data"}, "expected an absolute path"),
     ({"source": "~/.ssh", "target": "/data"}, "expected an absolute path"),
     ({"source": "/srv/a,b", "target": "/data"}, "comma"),
     ({"source": "/srv/a", "target": "/workspace"}, "overlaps"),
     ({"source": "/srv/a", "target": "/workspace/x"}, "overlaps"),
     ({"source": "/srv/a", "target": "/run/jackin/credentials"}, "overlaps"),
     ({"source": "/srv/a", "target": "/run"}, "overlaps"),
     ({"source": "/srv/a", "target": "/"}, "root")],
)  # fmt: skip
def test_bad_mounts_are_spec_errors(mount: dict, problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        Mount(**mount)


def test_mounts_default_to_read_only() -> None:
    assert Mount(source="/srv/data/", target="/data").model_dump() == {
        "source": "/srv/data", "target": "/data", "readonly": True, "acknowledge_credentials": False}  # fmt: skip


# --- the plan: names only -------------------------------------------------------------


def test_plan_has_names_and_a_read_only_directory_mount_never_values(tmp_path: Path) -> None:
    spec = fleet(tmp_path)
    plan = plan_of(spec)
    coder, plain = plan.agents[0], plan.agents[-1]
    assert coder.credentials == ["API_KEY", "GH_TOKEN"] and plain.credentials == []
    args = coder.run_args()
    mount = f"type=bind,src=/var/lib/jackin/credentials/demo/coder-1,dst={CREDENTIALS_TARGET},readonly"
    assert args[args.index(mount) - 1] == "--mount"
    assert not any("credentials" in a for a in plain.run_args())
    assert not any(a.startswith(("--env", "-e")) and "API" in a for a in args)
    text = json.dumps(plan.model_dump(mode="json"))
    assert VALUE_A not in text and VALUE_B.decode().strip() not in text
    assert "JK_TEST_API_KEY" not in text and str(tmp_path) not in text  # not even the sources


def test_config_hash_is_stable_across_values_and_names_only_add_a_mount(tmp_path: Path) -> None:
    first = plan_of(fleet(tmp_path)).agents[0]
    (tmp_path / "token").write_bytes(b"another value")
    assert plan_of(fleet(tmp_path)).agents[0].config_hash == first.config_hash
    none = plan_of(fleet(tmp_path, credentials="")).agents[0]
    assert none.config_hash != first.config_hash  # the mount comes and goes with having credentials
    one = plan_of(fleet(tmp_path, credentials=CREDS.splitlines(keepends=True)[0] + CREDS.splitlines(keepends=True)[1]))
    assert one.agents[0].config_hash == first.config_hash  # the directory is mounted, not each name


def test_mounts_reach_the_run_line_read_only_by_default(tmp_path: Path) -> None:
    mounts = "      mounts:\n        - {source: /srv/data, target: /data}\n" \
             "        - {source: /srv/out, target: /out, readonly: false}\n"
    args = plan_of(fleet(tmp_path, credentials="", mounts=mounts)).agents[0].run_args()
    assert "type=bind,src=/srv/data,dst=/data,readonly" in args
    assert "type=bind,src=/srv/out,dst=/out" in args


# --- delivery commands -----------------------------------------------------------------


def _text(commands) -> str:
    return "\n".join(str(c) if isinstance(c, (str, SecretUpload)) else repr(c) for c in commands)


def _uploads(commands) -> list[SecretUpload]:
    return [c for c in commands if isinstance(c, SecretUpload)]


def _delivered(plan: FleetPlan, values: Secrets, *, only: dict[str, list[str]] | None = None) -> HostState:
    """The host after a delivery of ``values`` (``only``: per instance, the names delivered)."""
    base = "/var/lib/jackin/credentials/demo"
    paths = {base: PathInfo(kind="d", mode="0700", uid=0, gid=0)}
    digests: dict[str, dict[str, str]] = {}
    for agent in plan.agents:
        if not agent.credentials:
            continue
        paths[agent.credentials_dir] = PathInfo(kind="d", mode="0750", uid=0, gid=agent.uid)
        paths[digests_file("demo", agent.instance)] = PathInfo(kind="f", mode="0600", uid=0, gid=0)
        for name in (only or {}).get(agent.instance, agent.credentials):
            paths[f"{agent.credentials_dir}/{name}"] = PathInfo(kind="f", mode="0400", uid=agent.uid, gid=agent.uid)
            digests.setdefault(agent.instance, {})[name] = values.digest("demo", agent.instance, agent.agent, name)
    return HostState(credentials=paths, credential_digests=digests)


def test_first_delivery_by_sftp_with_owner_and_mode(tmp_path: Path) -> None:
    spec = fleet(tmp_path)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    commands = credential_commands(plan, HostState(), values)
    uploads = _uploads(commands)
    assert [u.target for u in uploads] == [f"{agent_dir('demo', i)}/{n}" for i in ("coder-1", "coder-2")
                                           for n in ("API_KEY", "GH_TOKEN")]  # fmt: skip
    assert {u._data for u in uploads} == {VALUE_A.encode(), VALUE_B}
    assert all(u.dest.startswith("/run/jackin-upload/") for u in uploads)
    text = _text(commands)
    assert VALUE_A not in text and VALUE_B.decode().strip() not in text
    assert "install -m 0400 -o 60000 -g 60000 -T" in text
    assert "mv -f -T /var/lib/jackin/credentials/demo/coder-1/.API_KEY.jackin-new " \
           "/var/lib/jackin/credentials/demo/coder-1/API_KEY" in text
    assert "chown -h 0:60000 -- /var/lib/jackin/credentials/demo/coder-1" in text
    assert "chmod 00750 -- /var/lib/jackin/credentials/demo/coder-1" in text
    assert "chmod 00700 -- /var/lib/jackin/credentials/demo" in text
    assert "plain-1" not in text


def test_an_unchanged_delivery_yields_nothing(tmp_path: Path) -> None:
    spec = fleet(tmp_path)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    assert credential_commands(plan, _delivered(plan, values), values) == []


def test_a_changed_value_is_redelivered_alone(tmp_path: Path) -> None:
    spec = fleet(tmp_path)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    state = _delivered(plan, values)
    changed = read(spec, environ={"JK_TEST_API_KEY": "rotated"}, key=KEY)
    commands = credential_commands(plan, state, changed)
    assert [u.target.rsplit("/", 2)[1:] for u in _uploads(commands)] == [["coder-1", "API_KEY"], ["coder-2", "API_KEY"]]
    assert "rotated" not in _text(commands)


def test_a_file_with_the_wrong_mode_or_owner_is_redelivered(tmp_path: Path) -> None:
    spec = fleet(tmp_path, count=1)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    state = _delivered(plan, values)
    path = f"{agent_dir('demo', 'coder-1')}/GH_TOKEN"
    loose = state.model_copy(update={"credentials": {**state.credentials, path: PathInfo(kind="f", mode="0644",
                                                                                       uid=60000, gid=60000)}})
    assert [u.target for u in _uploads(credential_commands(plan, loose, values))] == [path]


def test_a_removed_credential_and_a_stray_file_are_removed(tmp_path: Path) -> None:
    spec = fleet(tmp_path, count=1)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    state = _delivered(plan, values)
    one = fleet(tmp_path, credentials=CREDS.rsplit("        - {name: GH", 1)[0], count=1)
    d = agent_dir("demo", "coder-1")
    stray = {**state.credentials, f"{d}/.X.jackin-new": PathInfo(kind="f", mode="0400", uid=0, gid=0)}
    commands = credential_commands(plan_of(one), state.model_copy(update={"credentials": stray}),
                                   read(one, environ=ENV, key=KEY))  # fmt: skip
    text = _text(commands)
    assert f"rm -rf --one-file-system -- {d}/.X.jackin-new" in text
    assert f"rm -rf --one-file-system -- {d}/GH_TOKEN" in text
    assert _uploads(commands) == []
    assert "/var/lib/jackin/credentials/demo/coder-1.digests" in text  # the record is rewritten


def test_an_agent_that_left_or_has_no_credentials_left_loses_its_directory(tmp_path: Path) -> None:
    spec = fleet(tmp_path)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    smaller = plan_of(fleet(tmp_path, count=1))
    text = _text(credential_commands(smaller, _delivered(plan, values), values))
    assert "rm -rf --one-file-system -- /var/lib/jackin/credentials/demo/coder-2\n" in text + "\n"
    assert "rm -rf --one-file-system -- /var/lib/jackin/credentials/demo/coder-2.digests" in text
    assert "coder-1" not in text
    none = plan_of(fleet(tmp_path, credentials=""))
    assert credential_commands(none, _delivered(plan, values), Secrets({}, b"")) == [
        "rm -rf --one-file-system -- /var/lib/jackin/credentials/demo",
        "rmdir /var/lib/jackin/credentials 2>/dev/null || true",
    ]
    assert credential_commands(none, HostState(), Secrets({}, b"")) == []


def test_a_value_not_handed_to_the_engine_fails_the_operation(tmp_path: Path) -> None:
    plan = plan_of(fleet(tmp_path))
    with pytest.raises(OperationError, match="credential API_KEY, GH_TOKEN of agent coder was not handed"):
        credential_commands(plan, HostState(), Secrets({}, b""))


def test_secret_upload_shows_its_target_only() -> None:
    upload = SecretUpload(VALUE_A.encode(), "/run/jackin-upload/x/0", target="/var/lib/jackin/credentials/d/c-1/K")
    assert repr(upload) == str(upload) == ("upload a credential by SFTP to /run/jackin-upload/x/0 "
                                           "(for /var/lib/jackin/credentials/d/c-1/K, mode 0400)")  # fmt: skip
    assert upload == SecretUpload(VALUE_A.encode(), "/run/jackin-upload/x/0", target=upload.target)
    assert upload != SecretUpload(b"other", "/run/jackin-upload/x/0", target=upload.target)


def test_teardown_removes_credentials_even_keeping_data(tmp_path: Path) -> None:
    spec = fleet(tmp_path)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    state = _delivered(plan, values)
    removal = "rm -rf --one-file-system -- /var/lib/jackin/credentials/demo"
    assert teardown_commands("demo", state)[0] == removal
    assert teardown_commands("demo", HostState()) == []
    for keep in (False, True):
        assert removal in fleet_teardown(plan, state, keep_data=keep)


# --- the state read ----------------------------------------------------------------------


def test_state_read_parses_credential_paths_digests_and_reports_them_as_leftovers() -> None:
    base = "/var/lib/jackin/credentials/demo"
    records = b"".join(f"{k} {m} {u} {g} {p}\0".encode() for k, m, u, g, p in [
        ("d", "700", 0, 0, base), ("d", "750", 0, 60000, f"{base}/coder-1"),
        ("f", "400", 60000, 60000, f"{base}/coder-1/API_KEY"), ("f", "600", 0, 0, f"{base}/coder-1.digests")])  # fmt: skip
    hexed = " ".join(f"{b:02x}" for b in records)
    digest = "ab" * 32
    state = parse_state(["##creds", hexed, "##creddigests", f"{base}/coder-1.digests:API_KEY {digest}",
                         f"{base}/coder-1.digests:bad line", f"{base}/coder-1.digests:lower {digest}"])  # fmt: skip
    assert state.credentials[f"{base}/coder-1/API_KEY"] == PathInfo(kind="f", mode="0400", uid=60000, gid=60000)
    assert state.credentials[base] == PathInfo(kind="d", mode="0700", uid=0, gid=0)
    assert state.credential_digests == {"coder-1": {"API_KEY": digest}}
    assert state.leftovers["credentials"] == sorted(state.credentials)


# --- SSH agent forwarding is never enabled ------------------------------------------------


def test_fabric_connections_never_forward_the_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host *\n  ForwardAgent yes\n")
    (home / ".fabric.yaml").write_text("forward_agent: true\n")
    monkeypatch.setenv("HOME", str(home))
    conn = connection(SshTarget(name="a", address="10.0.0.9", known_hosts=tmp_path / "known_hosts"))
    assert conn.forward_agent is False
    assert conn.config.forward_agent is False


def test_a_credentials_dir_left_makes_the_clean_check_dirty_even_keeping_data(tmp_path: Path) -> None:
    from jackin.lifecycle.down import _leftovers

    spec = fleet(tmp_path)
    plan, values = plan_of(spec), read(spec, environ=ENV, key=KEY)
    state = _delivered(plan, values)
    for keep in (False, True):
        assert _leftovers(plan, state, keep_data=keep) == {"credentials": sorted(state.credentials)}
    assert _leftovers(plan, HostState(), keep_data=False) == {}


def test_fleet_up_reads_and_checks_before_it_opens_the_ledger(tmp_path: Path, monkeypatch) -> None:
    """A missing source or a refused mount fails ``up`` before the ledger, the lab or any host is touched."""
    import jackin.lifecycle.fleet as fleet_api
    from jackin.spec import parse_inventory as parse

    touched: list[str] = []
    monkeypatch.setattr(fleet_api, "Ledger", lambda *a, **k: touched.append("ledger"))
    monkeypatch.delenv("JK_TEST_API_KEY", raising=False)
    inventory = parse(spec_text(CREDS.replace("FILE", str(tmp_path / "none"))), "f.yaml")
    with pytest.raises(CredentialError):
        fleet_api.up(inventory)
    refused = parse(spec_text("", MOUNTS), "f.yaml")
    with pytest.raises(SpecError, match="mount of /home/me/.aws is refused"):
        fleet_api.up(refused)
    assert touched == []
