"""Docker daemon settings: our keys (hardening, address pools) merged into the host's daemon.json,
the exact commands for a given file and running daemon, and the ``DockerDaemon`` fact's parser."""

from __future__ import annotations

import json
import subprocess

import pytest

from jackin.facts.docker import DaemonState, daemon_command, parse_daemon
from jackin.operations.host import (DAEMON_JSON, ENSURE_LIVE_RESTORE, HARDENING, KEEP_RUNNING, RESTART, daemon_commands,
                                    daemon_config)
from jackin.operations.script import Upload, write_files
from jackin.spec.models import AddressPool

POOLS = [AddressPool(base="10.213.0.0/16", size=24), AddressPool(base="10.214.0.0/16", size=26)]
WANTED = [{"base": "10.213.0.0/16", "size": 24}, {"base": "10.214.0.0/16", "size": 26}]
LAB = '{\n  "dns": ["127.0.0.1"]\n}\n'  # the lab image's own daemon.json
HARDENED = {"icc": False, "live-restore": True, "no-new-privileges": True, "userland-proxy": False}


@pytest.mark.parametrize("current", [None, "", "  \n", "{}"], ids=["missing", "empty", "blank", "empty-object"])
def test_new_config(current: str | None) -> None:
    assert daemon_config(current, POOLS) == (
        "{\n"
        '  "default-address-pools": [\n'
        "    {\n"
        '      "base": "10.213.0.0/16",\n'
        '      "size": 24\n'
        "    },\n"
        "    {\n"
        '      "base": "10.214.0.0/16",\n'
        '      "size": 26\n'
        "    }\n"
        "  ],\n"
        '  "icc": false,\n'
        '  "live-restore": true,\n'
        '  "no-new-privileges": true,\n'
        '  "userland-proxy": false\n'
        "}\n"
    )


def test_hardening_alone_without_pools() -> None:
    assert HARDENING == HARDENED
    assert json.loads(daemon_config(None, []) or "") == HARDENED
    assert json.loads(daemon_config(None, None) or "") == HARDENED


def test_keeps_the_labs_dns_and_adds_the_four_keys() -> None:
    assert json.loads(daemon_config(LAB, []) or "") == {"dns": ["127.0.0.1"], **HARDENED}


def test_merges_into_the_existing_settings() -> None:
    current = '{"log-driver": "journald", "live-restore": true, "storage-driver": "overlay2"}'
    new = daemon_config(current, POOLS)
    assert new is not None and new.endswith("}\n")
    assert json.loads(new) == {"log-driver": "journald", "storage-driver": "overlay2",
                               "default-address-pools": WANTED, **HARDENED}  # fmt: skip


def test_without_pools_the_hosts_own_pools_stay() -> None:
    current = json.dumps({"default-address-pools": [{"base": "172.80.0.0/16", "size": 24}], **HARDENED})
    assert daemon_config(current, []) is None


def test_replaces_other_pools() -> None:
    current = json.dumps({"default-address-pools": [{"base": "172.80.0.0/16", "size": 24}], "debug": False})
    assert json.loads(daemon_config(current, POOLS) or "") == {"default-address-pools": WANTED, "debug": False, **HARDENED}


def test_an_operators_opposite_value_is_overridden() -> None:
    current = json.dumps({**HARDENED, "icc": True, "debug": True})
    assert json.loads(daemon_config(current, []) or "") == {**HARDENED, "debug": True}


@pytest.mark.parametrize(
    "current",
    [json.dumps({"default-address-pools": WANTED, **HARDENED}),
     json.dumps({"debug": True, **HARDENED, "default-address-pools": [{"size": 24, "base": "10.213.0.0/16"},
                                                                    {"size": 26, "base": "10.214.0.0/16"}]}, indent=4)],
    ids=["same", "same-reordered-keys"],
)  # fmt: skip
def test_unchanged_is_none(current: str) -> None:
    assert daemon_config(current, POOLS) is None


def test_its_own_output_is_unchanged() -> None:
    assert daemon_config(daemon_config('{"debug": true}', POOLS), POOLS) is None


def test_pool_order_matters() -> None:
    assert daemon_config(json.dumps({"default-address-pools": WANTED[::-1], **HARDENED}), POOLS) is not None


@pytest.mark.parametrize(
    ("current", "what"),
    [("[]", "a JSON list, not an object"), ("42", "a JSON int, not an object"), ('"text"', "a JSON str, not an object"),
     ("null", "a JSON NoneType, not an object"), ("true", "a JSON bool, not an object"),
     ("{", "not valid JSON (line 1 column 2: Expecting property name enclosed in double quotes)"),
     ("{'single': 1}", "not valid JSON (line 1 column 2: Expecting property name enclosed in double quotes)"),
     ('{"a": 1}\n{', "not valid JSON (line 2 column 1: Extra data)")],
)  # fmt: skip
def test_non_object_is_refused_clearly(current: str, what: str) -> None:
    with pytest.raises(ValueError) as caught:
        daemon_config(current, POOLS)
    assert str(caught.value) == (f"{DAEMON_JSON} is {what}; jackin merges its settings into it: "
                                 "fix or remove it by hand, then run again")  # fmt: skip
    with pytest.raises(ValueError):
        daemon_commands(current, True, POOLS)


# --- daemon_commands: facts in, commands out --------------------------------------------------


def _write(text: str) -> list:
    return write_files({DAEMON_JSON: text}, modes={DAEMON_JSON: "0644"})


def test_in_place_and_in_effect_is_nothing() -> None:
    current = json.dumps({"dns": ["127.0.0.1"], **HARDENED})
    assert daemon_commands(current, True, []) == []
    assert daemon_commands(current, None, []) == []  # the daemon did not answer: nothing to tell


def test_restart_is_not_held_back_by_the_start_rate_limit() -> None:
    assert RESTART == ["systemctl reset-failed docker", "systemctl restart docker"]


def test_first_time_writes_once_keeps_running_containers_then_restarts_once() -> None:
    new = daemon_config(LAB, POOLS) or ""
    commands = daemon_commands(LAB, False, POOLS)
    assert commands == [*_write(new), KEEP_RUNNING, *RESTART]
    assert [c for c in commands if isinstance(c, Upload)][0].data == new.encode()
    assert all(new not in c for c in commands if isinstance(c, str))  # the body goes by SFTP only


def test_only_live_restore_changed_is_a_reload_without_restart() -> None:
    current = json.dumps({**HARDENED, "live-restore": False})
    assert daemon_commands(current, False, []) == [*_write(json.dumps(HARDENED, indent=2, sort_keys=True) + "\n"),
                                                   ENSURE_LIVE_RESTORE]  # fmt: skip


def test_a_key_that_needs_a_restart_restarts_once_after_keeping_running_containers() -> None:
    current = json.dumps({**HARDENED, "icc": True, "userland-proxy": True})
    commands = daemon_commands(current, True, [])
    assert commands[-3:] == [KEEP_RUNNING, *RESTART] and commands.count("systemctl restart docker") == 1


def test_new_pools_restart() -> None:
    assert daemon_commands(json.dumps(HARDENED), True, POOLS)[-2:] == RESTART


def test_a_file_the_daemon_never_took_is_applied_without_rewriting() -> None:
    # An earlier run wrote the file and stopped before the reload: live-restore is off in the daemon.
    assert daemon_commands(json.dumps(HARDENED), False, []) == [KEEP_RUNNING, *RESTART]


def _ensure(tmp_path, live_after_reload: bool) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """ENSURE_LIVE_RESTORE against stub docker/systemctl/sleep: live-restore reads false until a reload."""
    bin_dir, log, flag = tmp_path / "bin", tmp_path / "calls", tmp_path / "reloaded"
    bin_dir.mkdir()
    stubs = {
        "docker": f'[ "$1 $2" = "--host unix:///var/run/docker.sock" ] || exit 99; shift 2; '
                  f'echo "docker $*" >> {log}; if [ -e {flag} ]; then echo {str(live_after_reload).lower()}; else echo false; fi',
        "systemctl": f'echo "systemctl $*" >> {log}; [ "$1" = reload ] && touch {flag}; true',
        "sleep": f'echo "sleep $*" >> {log}',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(["sh", "-c", f"set -e\n{ENSURE_LIVE_RESTORE}\necho after"], env=env,
                          capture_output=True, text=True, timeout=10)  # fmt: skip
    return done, log.read_text().splitlines()


def _keep_running(tmp_path, running: str, ps_exit: int = 0) -> list[str]:
    """KEEP_RUNNING against stub docker/systemctl/sleep: ``docker ps -q`` prints ``running``, exits ``ps_exit``."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir(parents=True)
    # The stub takes the system engine's --host (KEEP_RUNNING never asks a CLI context's engine) and logs the rest.
    stubs = {"docker": f'[ "$1 $2" = "--host unix:///var/run/docker.sock" ] || exit 99; shift 2; '
                       f'echo "docker $*" >> {log}; case "$1" in ps) printf "%s" "{running}"; exit {ps_exit};; '
                       '*) echo true;; esac',
             "systemctl": f'echo "systemctl $*" >> {log}', "sleep": f'echo "sleep $*" >> {log}'}  # fmt: skip
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    done = subprocess.run(["sh", "-c", f"set -e\n{KEEP_RUNNING}\necho after"], env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=10)  # fmt: skip
    assert done.returncode == 0 and done.stdout == "after\n", done.stderr
    return log.read_text().splitlines()


def test_before_a_restart_live_restore_is_made_effective_only_when_a_container_runs(tmp_path) -> None:
    # A container runs: live-restore is checked (here already in effect) so the restart keeps it running.
    assert _keep_running(tmp_path / "a", "0123abcd\n") == ["docker ps -q", "docker info --format {{.LiveRestoreEnabled}}",
                                                            "docker info --format {{.LiveRestoreEnabled}}"]  # fmt: skip
    # None runs (a fresh host): nothing to keep, so neither a reload nor a poll; the restart applies the file.
    assert _keep_running(tmp_path / "b", "") == ["docker ps -q"]
    # docker ps fails or hangs (timeout's 124: the engine busy): taken as containers running, live-restore is made sure of.
    assert _keep_running(tmp_path / "c", "", ps_exit=124) == ["docker ps -q", "docker info --format {{.LiveRestoreEnabled}}",
                                                            "docker info --format {{.LiveRestoreEnabled}}"]  # fmt: skip


def test_ensure_live_restore_reloads_and_waits_and_never_restarts(tmp_path) -> None:
    done, calls = _ensure(tmp_path, live_after_reload=True)
    assert done.returncode == 0 and done.stdout == "after\n"
    assert [c for c in calls if c.startswith("systemctl")] == ["systemctl reload docker"]


def test_ensure_live_restore_fails_when_a_reload_does_not_take(tmp_path) -> None:
    done, calls = _ensure(tmp_path, live_after_reload=False)
    assert done.returncode == 1 and "after" not in done.stdout
    assert done.stderr == "docker live-restore is not in effect after a reload; Docker was not restarted\n"
    assert [c for c in calls if c.startswith("systemctl")] == ["systemctl reload docker"]
    assert calls.count("sleep 0.5") == 60


# --- the DockerDaemon fact's parser -------------------------------------------------------------


LIVE, ARGS = "##jackin-live-restore", "##jackin-dockerd-args"


def test_parse_daemon() -> None:
    lines = [LIVE, "true", ARGS, "/usr/sbin/dockerd", "-H", "fd://", "", "##jackin-file", "{", '  "dns": ["127.0.0.1"]', "}"]
    assert parse_daemon(lines) == DaemonState(config='{\n  "dns": ["127.0.0.1"]\n}', live_restore=True,
                                              args=["/usr/sbin/dockerd", "-H", "fd://"])  # fmt: skip
    assert parse_daemon([LIVE, "false", ARGS, "##jackin-no-file"]) == DaemonState(config=None, live_restore=False)
    assert parse_daemon([LIVE, ARGS, "##jackin-no-file"]) == DaemonState(config=None, live_restore=None)
    assert parse_daemon([LIVE, "", ARGS, "##jackin-file"]) == DaemonState(config="", live_restore=None)
    assert parse_daemon([]) == DaemonState()


def test_parse_daemon_reads_the_file_whatever_it_holds() -> None:
    lines = [LIVE, "true", ARGS, "##jackin-file", '{"x": "', LIVE, "false", ARGS, "##jackin-file", '"}']
    assert parse_daemon(lines) == DaemonState(config=f'{{"x": "\n{LIVE}\nfalse\n{ARGS}\n##jackin-file\n"}}',
                                              live_restore=True)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "pools", "message"),
    [(["dockerd", "--icc=false"], [], "dockerd is started with --icc"),
     (["dockerd", "--live-restore", "--userland-proxy=false"], [], "dockerd is started with --live-restore, --userland-proxy"),
     (["dockerd", "--default-address-pool", "base=10.0.0.0/8,size=24"], POOLS, "dockerd is started with --default-address-pool"),
     (["dockerd", "--config-file=/etc/other.json"], [], "dockerd reads /etc/other.json, not /etc/docker/daemon.json"),
     (["dockerd", "--config-file", "/etc/other.json"], [], "dockerd reads /etc/other.json, not /etc/docker/daemon.json")],
)  # fmt: skip
def test_a_conflicting_dockerd_flag_is_refused_before_writing(args: list[str], pools: list, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        daemon_commands(LAB, False, pools, args)
    assert str(caught.value).startswith(message)


def test_harmless_flags_and_our_own_config_file_pass() -> None:
    args = ["/usr/sbin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock",
            "--config-file=/etc/docker/daemon.json", "--default-address-pool", "base=10.0.0.0/8,size=24"]  # fmt: skip
    assert daemon_commands(json.dumps(HARDENED), True, [], args) == []  # pools not ours to set: no conflict


def test_daemon_command_is_valid_sh() -> None:
    done = subprocess.run(["sh", "-n", "-c", daemon_command()], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    for script in (ENSURE_LIVE_RESTORE, KEEP_RUNNING):
        done = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, done.stderr
