"""Credential delivery on a real lab host: a 0400 file of the agent, read-only in its container alone,
never in ``docker inspect``, the container's environment, ``ps``, the ledger or any output.

One 1-host lab and one fleet for the module; the tests run in order, each building on the last
(up, up again, change a value, remove one, down). Values are random per run, so a find is real.
"""

from __future__ import annotations

import io
import json
import secrets
import shlex
import subprocess
from pathlib import Path

import pytest

from jackin.plan import terms
from jackin.lab import Lab
from jackin.operations import agent_paths
from jackin.paths import state_dir

from .conftest import inv, module_lab, sh

STAT = "stat -c '%a %u %g %F %i %Y'"  # mode, owner, group, type, inode, mtime


@pytest.fixture(scope="module")
def clab():
    yield from module_lab("c", 1, shared=True)


class Fleet:
    def __init__(self, lab: Lab, tmp: Path):
        self.lab, self.name = lab, f"c{secrets.token_hex(3)}"
        self.env = f"JK_TEST_{secrets.token_hex(4).upper()}"
        self.api_key = f"sk-api-{secrets.token_hex(16)}"
        self.token_file = tmp / "gh_token"
        self.gh_token = f"ghp_{secrets.token_hex(16)}"
        self.token_file.write_text(self.gh_token + "\n")
        self.token_file.chmod(0o600)
        self.spec = tmp / f"{self.name}.yaml"
        self.write_spec(gh=True)
        self.dir = f"/var/lib/jackin/credentials/{self.name}"
        self.coder, self.other = f"jk-{self.name}--coder-1", f"jk-{self.name}--other-1"

    def write_spec(self, *, gh: bool) -> None:
        gh_line = f"        - {{name: GH_TOKEN, from_file: {self.token_file}}}\n" if gh else ""
        self.spec.write_text(f"""fleet:
  name: {self.name}
  provider: lab
  lab: {{name: {self.lab.name}, hosts: 1}}
  agents:
    - name: coder
      credentials:
        - {{name: API_KEY, from_env: {self.env}}}
{gh_line}    - name: other
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")

    @property
    def values(self) -> list[str]:
        return [self.api_key, self.gh_token]


@pytest.fixture(scope="module")
def cfleet(clab, tmp_path_factory):
    fleet = Fleet(clab, tmp_path_factory.mktemp("creds"))
    try:
        yield fleet
    finally:
        inv("fleet.down", "-i", str(fleet.spec), "--yes", "--keep-lab", "--no-final-snapshot")  # cleanup


def up(fleet: Fleet, monkeypatch, *extra: str) -> subprocess.CompletedProcess:
    monkeypatch.setenv(fleet.env, fleet.api_key)
    return inv("fleet.up", "-i", str(fleet.spec), "--yes", "--json", *extra)


def host_state(fleet: Fleet | tuple[Lab, str]) -> str:
    """Everything of the fleet a run could change on the host."""
    lab, name = (fleet.lab, fleet.name) if isinstance(fleet, Fleet) else fleet
    return sh(lab, f"ls -laR /var/lib/jackin 2>&1; getent passwd | grep -- '{name}--' ; "
                         f"docker ps -a --format '{{{{.Names}}}} {{{{.Status}}}}'; docker network ls --format '{{{{.Name}}}}'; "
                         f"ls -la /srv/jackin 2>&1; nft list tables", warn=True).stdout  # fmt: skip


def assert_nowhere(fleet: Fleet, *texts: str) -> None:
    """No value in the given texts, nor in any file of the operator's state dir (the ledger included)."""
    for value in fleet.values:
        for text in texts:
            assert value not in text
    found = subprocess.run(["grep", "-rlaF", "-e", fleet.api_key, "-e", fleet.gh_token, str(state_dir())],
                           capture_output=True, text=True)  # fmt: skip
    assert found.stdout == "", f"a credential value is in {found.stdout}"


def in_container(fleet: Fleet, container: str, command: str, *, warn: bool = False):
    return sh(fleet.lab, f"docker exec {container} sh -c {shlex.quote(command)}", warn=warn)


WATCH = r"""
cd /root/jk-watch || exit 1
n=0; hits=0; control=0
while [ ! -e stop ] && [ $n -lt 20000 ]; do
    n=$((n+1))
    # One grep reads every process's argv and environment (NUL-separated, read as text): a sample costs two
    # processes, not two per process on the host, so it keeps pace on a loaded machine.
    c=$(grep -alFf needles /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | wc -l); hits=$((hits+c))
    c=$(grep -alFf control /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | wc -l); control=$((control+c))
    [ $n -eq 1 ] && touch started
    sleep 0.05
done
echo "$n $hits $control" > result
"""


def start_watch(fleet: Fleet, needles: list[str], control: str) -> None:
    """Sample every process's argv and environment on the host until stopped, counting files that hold a
    needle (given by SFTP, so the sampler's own argv holds none) and the control string. The positive control,
    a process whose argv holds the control string, runs from before the first sample until the stop; this
    returns once the first sample is done, so every later command runs under the watch."""
    from jackin.transport.ssh import connect

    with connect(fleet.lab.status().hosts[0].target()) as conn:
        conn.run("rm -rf /root/jk-watch && mkdir -m 0700 /root/jk-watch", hide=True)
        conn.put(io.BytesIO("".join(f"{n}\n" for n in needles).encode()), "/root/jk-watch/needles")
        conn.put(io.BytesIO(f"{control}\n".encode()), "/root/jk-watch/control")
        conn.put(io.BytesIO(WATCH.encode()), "/root/jk-watch/watch.sh")
        conn.run("nohup sh -c 'while [ ! -e /root/jk-watch/stop ]; do sleep 0.2; done' "
                 f"{control} >/dev/null 2>&1 &", hide=True)  # fmt: skip
        conn.run("nohup sh /root/jk-watch/watch.sh >/dev/null 2>&1 &", hide=True)
        conn.run("for i in $(seq 1 300); do [ -e /root/jk-watch/started ] && exit 0; sleep 0.1; done; exit 1",
                 hide=True)  # fmt: skip


def stop_watch(fleet: Fleet, _watcher: None) -> tuple[int, int, int]:
    sh(fleet.lab, "touch /root/jk-watch/stop; for i in $(seq 1 100); do [ -e /root/jk-watch/result ] && break; "
                  "sleep 0.1; done")  # fmt: skip
    samples, hits, control = (int(x) for x in sh(fleet.lab, "cat /root/jk-watch/result").stdout.split())
    sh(fleet.lab, "rm -rf /root/jk-watch")
    return samples, hits, control


def test_an_unset_source_fails_before_any_host_changes(cfleet: Fleet, monkeypatch) -> None:
    before = host_state(cfleet)
    monkeypatch.delenv(cfleet.env, raising=False)
    done = inv("fleet.up", "-i", str(cfleet.spec), "--yes", "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"credential API_KEY of agent coder: environment variable {cfleet.env} is not set" in done.stderr
    assert host_state(cfleet) == before
    dry = inv("fleet.up", "-i", str(cfleet.spec), "--dry-run", "--json")
    assert dry.returncode == 2 and "is not set" in dry.stderr
    assert_nowhere(cfleet, done.stdout, done.stderr, dry.stdout, dry.stderr)


def test_up_delivers_each_credential_as_the_agents_read_only_file(cfleet: Fleet, monkeypatch) -> None:
    dry = up(cfleet, monkeypatch, "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "API_KEY" in dry.stdout and "GH_TOKEN" in dry.stdout  # names, in the plan and the preview
    done = up(cfleet, monkeypatch)  # the positive control of the unset source
    assert done.returncode == 0, done.stdout + done.stderr
    assert_nowhere(cfleet, dry.stdout, dry.stderr, done.stdout, done.stderr)
    uid = sh(cfleet.lab, f"id -u {cfleet.coder}").stdout.strip()
    out = sh(cfleet.lab, f"stat -c '%a %u %g %F' {cfleet.dir} {cfleet.dir}/coder-1 {cfleet.dir}/coder-1/API_KEY "
                         f"{cfleet.dir}/coder-1/GH_TOKEN /var/lib/jackin").stdout.splitlines()  # fmt: skip
    assert out == ["700 0 0 directory", f"750 0 {uid} directory", f"400 {uid} {uid} regular file",
                   f"400 {uid} {uid} regular file", "700 0 0 directory"]  # fmt: skip
    assert sh(cfleet.lab, f"ls -A {cfleet.dir}/coder-1").stdout.split() == ["API_KEY", "GH_TOKEN"]
    assert sh(cfleet.lab, f"ls -A {cfleet.dir}").stdout.split() == ["coder-1", "coder-1.digests"]
    # The agent reads them in its container, byte-exact (the file's newline kept).
    assert in_container(cfleet, cfleet.coder, "cat /run/jackin/credentials/API_KEY").stdout == cfleet.api_key
    assert in_container(cfleet, cfleet.coder, "cat /run/jackin/credentials/GH_TOKEN").stdout == cfleet.gh_token + "\n"
    assert in_container(cfleet, cfleet.coder, "id -u").stdout.strip() == uid


def test_values_are_not_in_docker_inspect_the_environment_or_the_agents_home(cfleet: Fleet) -> None:
    inspect = sh(cfleet.lab, f"docker inspect {cfleet.coder} {cfleet.other}").stdout
    env = in_container(cfleet, cfleet.coder, "env").stdout
    home = sh(cfleet.lab, f"grep -rlaF -e {cfleet.api_key} -e {cfleet.gh_token} /srv/jackin/{cfleet.name}",
              warn=True)  # fmt: skip
    assert_nowhere(cfleet, inspect, env, home.stdout)
    mounts = json.loads(sh(cfleet.lab, f"docker inspect -f '{{{{json .Mounts}}}}' {cfleet.coder}").stdout)
    mount = next(m for m in mounts if m["Destination"] == "/run/jackin/credentials")
    assert (mount["Source"], mount["RW"]) == (f"{cfleet.dir}/coder-1", False)
    other = json.loads(sh(cfleet.lab, f"docker inspect -f '{{{{json .Mounts}}}}' {cfleet.other}").stdout)
    assert [m["Destination"] for m in other] == ["/workspace"]


def test_the_agent_cannot_change_its_credentials_and_another_agent_cannot_read_them(cfleet: Fleet) -> None:
    for attack in ("echo x > /run/jackin/credentials/API_KEY", "rm -f /run/jackin/credentials/API_KEY",
                   "mv /run/jackin/credentials/API_KEY /run/jackin/credentials/X", "chmod 644 /run/jackin/credentials/API_KEY",
                   "touch /run/jackin/credentials/NEW"):  # fmt: skip
        assert in_container(cfleet, cfleet.coder, attack, warn=True).failed, attack
    assert in_container(cfleet, cfleet.coder, "echo ok > /workspace/probe && cat /workspace/probe").stdout == "ok\n"
    assert in_container(cfleet, cfleet.coder, "cat /run/jackin/credentials/API_KEY").stdout == cfleet.api_key
    # The other agent's container has no such mount, and its uid cannot reach the files on the host.
    assert in_container(cfleet, cfleet.other, "cat /run/jackin/credentials/API_KEY", warn=True).failed
    other_uid = int(sh(cfleet.lab, f"id -u {cfleet.other}").stdout)
    read = f"cat {cfleet.dir}/coder-1/API_KEY"
    assert sh(cfleet.lab, agent_paths.as_agent(other_uid, other_uid, "sh", "-c", read), warn=True).failed
    assert sh(cfleet.lab, read).stdout == cfleet.api_key  # control: the path is right


def test_a_second_up_rewrites_nothing(cfleet: Fleet, monkeypatch) -> None:
    files = f"{cfleet.dir}/coder-1/API_KEY {cfleet.dir}/coder-1/GH_TOKEN {cfleet.dir}/coder-1.digests"
    before = sh(cfleet.lab, f"{STAT} {files}").stdout
    done = up(cfleet, monkeypatch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [h["changed"] for h in json.loads(done.stdout)["run"]["hosts"]] == [0]
    assert sh(cfleet.lab, f"{STAT} {files}").stdout == before


def test_a_changed_value_is_redelivered_and_seen_by_the_running_container(cfleet: Fleet, monkeypatch) -> None:
    started = sh(cfleet.lab, f"docker inspect -f '{{{{.State.StartedAt}}}}' {cfleet.coder}").stdout
    gh_before = sh(cfleet.lab, f"{STAT} {cfleet.dir}/coder-1/GH_TOKEN").stdout
    old = cfleet.api_key
    cfleet.api_key = f"sk-api-{secrets.token_hex(16)}"
    monkeypatch.setenv(cfleet.env, cfleet.api_key)
    preview = inv("fleet.up", "-i", str(cfleet.spec), "--dry-run")  # the human preview: names and paths only
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert "credential API_KEY of coder-1: deliver" in preview.stdout  # fleet.plan's line: the in-process plan
    assert "GH_TOKEN" not in preview.stdout  # the unchanged one is not in the preview
    assert cfleet.api_key not in preview.stdout + preview.stderr and old not in preview.stdout
    plans = [inv("fleet.plan", "-i", str(cfleet.spec), *extra) for extra in ((), ("--json",))]  # fleet.plan too
    for plan in plans:
        assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "credential API_KEY of coder-1: deliver" in plans[0].stdout
    document = json.loads(plans[1].stdout)
    assert any("credential API_KEY of coder-1: deliver" in c["lines"] for c in document["hosts"][0]["changes"]["changes"])
    assert [c.name for c in terms.FleetContract.model_validate(document["contract"]).agent("coder-1").credentials] == [
        "API_KEY", "GH_TOKEN"]  # names in the contract, never a value
    assert_nowhere(cfleet, *(p.stdout + p.stderr for p in plans))
    assert not any(old in p.stdout + p.stderr for p in plans)
    control = f"CONTROL-{secrets.token_hex(8)}"
    watcher = start_watch(cfleet, [cfleet.api_key, old, cfleet.gh_token], control)
    try:
        done = up(cfleet, monkeypatch)
    finally:
        samples, hits, control_hits = stop_watch(cfleet, watcher)
    assert done.returncode == 0, done.stdout + done.stderr
    print(f"ps watch: {samples} samples, {control_hits} control hits")
    # The first sample ended before the up began and the stop came after it ended: a second sample ran
    # during the up. Every sample saw the control, a value in a live process's argv.
    assert samples >= 2 and control_hits >= samples
    assert hits == 0, "a credential value was in a process's argv or environment on the host"
    assert in_container(cfleet, cfleet.coder, "cat /run/jackin/credentials/API_KEY").stdout == cfleet.api_key
    assert sh(cfleet.lab, f"docker inspect -f '{{{{.State.StartedAt}}}}' {cfleet.coder}").stdout == started
    assert sh(cfleet.lab, f"{STAT} {cfleet.dir}/coder-1/GH_TOKEN").stdout == gh_before  # the unchanged one stays
    assert_nowhere(cfleet, done.stdout, done.stderr)


def test_a_removed_credential_is_removed_from_the_host(cfleet: Fleet, monkeypatch) -> None:
    cfleet.write_spec(gh=False)
    done = up(cfleet, monkeypatch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sh(cfleet.lab, f"ls -A {cfleet.dir}/coder-1").stdout.split() == ["API_KEY"]
    assert in_container(cfleet, cfleet.coder, "ls /run/jackin/credentials").stdout.split() == ["API_KEY"]


def test_down_removes_the_credentials(cfleet: Fleet) -> None:
    done = inv("fleet.down", "-i", str(cfleet.spec), "--yes", "--keep-lab", "--keep-data")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sh(cfleet.lab, f"test -e {cfleet.dir}", warn=True).failed
    assert sh(cfleet.lab, "test -e /var/lib/jackin/credentials", warn=True).failed
    assert sh(cfleet.lab, f"test -d /srv/jackin/{cfleet.name}/coder-1/workspace").ok  # --keep-data kept the data
    assert_nowhere(cfleet, done.stdout, done.stderr)


def test_a_credential_like_mount_is_refused_and_a_plain_one_is_mounted_read_only(clab, tmp_path) -> None:
    name = f"m{secrets.token_hex(3)}"
    spec = tmp_path / f"{name}.yaml"

    def write(source: str) -> None:
        spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {clab.name}, hosts: 1}}
  agents:
    - name: coder
      mounts:
        - {{source: {source}, target: /data}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")

    write("/root/.ssh")
    before = host_state((clab, name))
    refused = inv("fleet.up", "-i", str(spec), "--yes")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "agent coder: mount of /root/.ssh is refused: it holds .ssh" in refused.stderr
    assert host_state((clab, name)) == before
    shared = f"/srv/shared-{name}"
    sh(clab, f"mkdir -p {shared} && echo hello > {shared}/hello")
    write(shared)  # the positive control: a plain path is mounted, read-only by default
    try:
        done = inv("fleet.up", "-i", str(spec), "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        container = f"jk-{name}--coder-1"
        assert sh(clab, f"docker exec {container} cat /data/hello").stdout == "hello\n"
        assert sh(clab, f"docker exec {container} sh -c 'echo x > /data/hello'", warn=True).failed
        assert sh(clab, f"cat {shared}/hello").stdout == "hello\n"
    finally:
        inv("fleet.down", "-i", str(spec), "--yes", "--keep-lab", "--no-final-snapshot")  # cleanup
        sh(clab, f"rm -rf {shared}")
