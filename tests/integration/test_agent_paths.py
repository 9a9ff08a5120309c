"""Root never follows a path the agent controls: provoked as the agent's user on a real lab host.

The attacks run as the agent's uid (``setpriv``, its shell is nologin) on the host itself.
Homes used to be the agent's (0700); this release makes them root's (0750), so the
agent can no longer plant a link beside its workspace. To provoke the old hole the
tests first give the home back to the agent, as the previous release left it on
every host, and then attack: ``fleet.up`` must take the home back and replace the
link without following it. One 1-host lab for the module; each test its own fleet.
"""

from __future__ import annotations

import json
import secrets

import pytest

from jackin.lab import Lab
from jackin.operations import agent_paths

from .conftest import inv, module_lab, sh

STAT = "stat -c '%F %a %u %g %Y'"  # type, mode, owner, group, mtime


@pytest.fixture(scope="module")
def plab():
    yield from module_lab("p", 1, shared=True)



def as_agent(lab: Lab, user: str, script: str, *, warn: bool = False):
    """``script`` run on the host with the agent's uid and gid only (what a process of that user could do),
    through the helper later tasks use for work inside a workspace."""
    uid = int(sh(lab, f"id -u {user}").stdout.strip())
    return sh(lab, agent_paths.as_agent(uid, uid, "sh", "-c", script), warn=warn)


def give_home_to_agent(lab: Lab, fleet: str, instance: str) -> None:
    """The home as the previous release made it: the agent's, 0700."""
    home = f"/srv/jackin/{fleet}/{instance}"
    sh(lab, f"chown jk-{fleet}--{instance}:jk-{fleet}--{instance} {home} && chmod 0700 {home}")


def up(spec: str) -> dict:
    done = inv("fleet.up", "-i", spec, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def down(spec: str, *extra: str):
    return inv("fleet.down", "-i", spec, "--yes", "--keep-lab", *extra)


@pytest.fixture
def fleet(plab, tmp_path):
    """A fleet of three agents on the lab's one host, torn down (data included) afterwards."""
    name = f"p{secrets.token_hex(3)}"
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(f"""fleet:
  name: {name}
  provider: lab
  lab: {{name: {plab.name}, hosts: 1}}
  agents:
    - {{name: coder, role: demo, count: 3}}
  resources: {{memory: 128m, cpus: 0.5, pids: 64}}
""")
    try:
        yield name, str(spec)
    finally:  # a cleanup (a no-op after a test's own down): its final snapshot would prove nothing here
        down(str(spec), "--no-final-snapshot")


def test_up_makes_the_home_roots_and_the_workspace_the_agents_so_the_agent_cannot_swap_it(plab, fleet):
    name, spec = fleet
    up(spec)
    home, a = f"/srv/jackin/{name}/coder-1", f"jk-{name}--coder-1"
    out = sh(plab, f"stat -c '%F %a %U %G' {home} {home}/workspace").stdout.splitlines()
    assert out == [f"directory 750 root {a}", f"directory 700 {a} {a}"]
    uid = sh(plab, f"id -u {a}").stdout.strip()
    ids = as_agent(plab, a, "id -u; id -g; id -G; grep CapEff /proc/self/status").stdout.split()
    assert ids == [uid, uid, uid, "CapEff:", "0000000000000000"]  # the helper: agent's ids only, no capabilities
    # Positive control: the agent writes its workspace (setpriv works, the uid is the owner) ...
    assert as_agent(plab, a, f"touch {home}/workspace/ok && ls {home}").stdout.split() == ["workspace"]
    # ... and cannot replace it with a link any more.
    swap = as_agent(plab, a, f"mv {home}/workspace {home}/w2 || ln -s /etc {home}/w3", warn=True)
    assert swap.failed and "Permission denied" in swap.stderr
    assert sh(plab, f"ls {home}").stdout.split() == ["workspace"]


def test_a_symlinked_workspace_is_replaced_and_its_targets_are_untouched(plab, fleet):
    """coder-1's workspace -> /etc, coder-2's -> coder-3's workspace, planted as each agent in a home of
    the old layout; its container restarted so Docker mounted the link. fleet.up replaces both links
    (never following them), takes the homes back, recreates the containers; a second up changes nothing."""
    name, spec = fleet
    up(spec)
    base = f"/srv/jackin/{name}"
    third = f"{base}/coder-3/workspace"
    sh(plab, f"docker exec jk-{name}--coder-3 sh -c 'echo mine > /workspace/data'")
    for instance, target in (("coder-1", "/etc"), ("coder-2", third)):
        give_home_to_agent(plab, name, instance)
        plant = f"cd {base}/{instance} && rm -rf workspace && ln -s {target} workspace"
        as_agent(plab, f"jk-{name}--{instance}", plant)
    sh(plab, f"docker restart jk-{name}--coder-1 jk-{name}--coder-2")
    # The hole being closed: Docker (root) followed the links at the restart (coder-3's files stay
    # unreadable to coder-2 only thanks to their modes).
    uid3 = sh(plab, f"id -u jk-{name}--coder-3").stdout.strip()
    assert sh(plab, f"docker exec jk-{name}--coder-1 ls /workspace/passwd").ok
    assert sh(plab, f"docker exec jk-{name}--coder-2 stat -c %u /workspace").stdout.strip() == uid3
    targets = f"/etc /etc/passwd {third} {third}/data"
    before = sh(plab, f"{STAT} {targets}").stdout

    up(spec)
    assert sh(plab, f"{STAT} {targets}").stdout == before
    assert sh(plab, f"cat {third}/data").stdout.strip() == "mine"
    for instance in ("coder-1", "coder-2"):
        user = f"jk-{name}--{instance}"
        home = f"{base}/{instance}"
        out = sh(plab, f"stat -c '%F %a %U %G' {home} {home}/workspace").stdout.splitlines()
        assert out == [f"directory 750 root {user}", f"directory 700 {user} {user}"]
        uid = sh(plab, f"id -u {user}").stdout.strip()
        # Nothing in the workspace but the entrypoint's own status directory (.jackin).
        listing = "stat -c %u /workspace; ls -A /workspace | grep -vx .jackin || true"
        assert sh(plab, f"docker exec {user} sh -c '{listing}'").stdout.split() == [uid]
    assert [h["changed"] for h in up(spec)["run"]["hosts"]] == [0]


def test_a_workspace_replaced_by_a_file_is_refused_and_kept(plab, fleet):
    name, spec = fleet
    up(spec)
    home = f"/srv/jackin/{name}/coder-1"
    give_home_to_agent(plab, name, "coder-1")
    as_agent(plab, f"jk-{name}--coder-1", f"cd {home} && rm -rf workspace && echo notes > workspace")
    done = inv("fleet.up", "-i", spec, "--yes")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "File exists" in done.stdout + done.stderr
    assert sh(plab, f"cat {home}/workspace").stdout.strip() == "notes"
    assert sh(plab, f"stat -c '%a %U' {home}").stdout.strip() == "750 root"  # taken back before the refusal
    # Control: with the file moved away, the same run converges.
    sh(plab, f"mv {home}/workspace /root/notes-{name}")
    up(spec)
    assert sh(plab, f"stat -c '%F %a' {home}/workspace").stdout.strip() == "directory 700"


def test_file_names_with_newlines_forge_nothing_and_down_deletes_only_the_fleets_users(plab, fleet):
    """Names holding newlines, a forged ##users section naming decoy accounts (one inside the fleet's
    uid range, one outside), '##' and non-UTF-8 bytes, made by the agent in its workspace and in a
    home of the old layout. fleet.down removes the fleet's users only; the clean check passes."""
    name, spec = fleet
    up(spec)
    decoys = {"jkdecoyin": 60990, "jkdecoyout": 59990}
    base = f"/srv/jackin/{name}"
    try:
        for decoy, uid in decoys.items():
            sh(plab, f"useradd --uid {uid} --no-create-home --shell /usr/sbin/nologin --comment decoy {decoy}")
        forged = "".join(f"\\n{d}:x:{u}:{u}:jackin:h:sh" for d, u in decoys.items())  # a name has no '/'

        names = [f"x\\n##users{forged}", f"y\\n##paths\\n##users{forged}\\n##marker\\nyes", "z ##groups \\377\\376"]
        give_home_to_agent(plab, name, "coder-1")
        for directory in (f"{base}/coder-1", f"{base}/coder-1/workspace"):
            touch = "; ".join(f"touch \"{directory}/$(printf '{n}')\"" for n in names)
            made = as_agent(plab, f"jk-{name}--coder-1", f"{touch}; ls {directory} | wc -l")
            assert int(made.stdout.strip()) >= 8  # each name spans lines: the names are there
        up(spec)  # the read with those names in place: the home is taken back, nothing else changes

        done = down(spec)
        assert done.returncode == 0, done.stdout + done.stderr  # 0: the clean check passed
        passwd = sh(plab, "getent passwd").stdout
        assert all(f"{d}:x:{u}:" in passwd for d, u in decoys.items())
        assert f"jk-{name}--" not in passwd
        assert sh(plab, f"ls {base}", warn=True).failed
    finally:
        for decoy in decoys:
            sh(plab, f"userdel {decoy}", warn=True)


def test_down_keep_data_leaves_the_targets_of_planted_links_untouched(plab, fleet):
    """Links to /etc, to a root-owned sentinel and to another agent's workspace, planted by the agent in
    its workspace and in a home of the old layout: down --keep-data keeps them and touches no target;
    the full down then removes the links, not what they point to. (/etc's files change times:
    userdel writes /etc/passwd; their type, mode and owner must not.)"""
    name, spec = fleet
    up(spec)
    base, sentinel = f"/srv/jackin/{name}", f"/srv/sentinel-{name}"
    a = f"jk-{name}--coder-1"
    sh(plab, f"mkdir -m 0755 {sentinel} && echo root > {sentinel}/file")
    try:
        give_home_to_agent(plab, name, "coder-1")
        links = {f"{base}/coder-1/etc": "/etc", f"{base}/coder-1/workspace/etc": "/etc",
                 f"{base}/coder-1/sentinel": sentinel, f"{base}/coder-1/workspace/sentinel": sentinel,
                 f"{base}/coder-1/workspace/other": f"{base}/coder-2/workspace"}  # fmt: skip
        as_agent(plab, a, "; ".join(f"ln -s {t} {p}" for p, t in links.items()))
        sh(plab, f"docker exec jk-{name}--coder-2 sh -c 'echo mine > /workspace/data'")
        owners = "stat -c '%F %a %u %g' /etc /etc/passwd /etc/shadow"
        full = f"{STAT} {sentinel} {sentinel}/file {base}/coder-2/workspace {base}/coder-2/workspace/data; " \
               f"cat {sentinel}/file {base}/coder-2/workspace/data"
        before = (sh(plab, owners).stdout, sh(plab, full).stdout)

        kept = down(spec, "--keep-data")
        assert kept.returncode == 0, kept.stdout + kept.stderr
        assert (sh(plab, owners).stdout, sh(plab, full).stdout) == before
        assert sh(plab, " && ".join(f"[ -L {p} ]" for p in links)).ok  # kept data is kept, links included

        wiped = down(spec)
        assert wiped.returncode == 0, wiped.stdout + wiped.stderr
        assert sh(plab, owners).stdout == before[0]
        assert sh(plab, f"{STAT} {sentinel} {sentinel}/file; cat {sentinel}/file").stdout.splitlines() == [
            *before[1].splitlines()[:2], "root"]  # fmt: skip
        assert sh(plab, f"ls {base}", warn=True).failed
    finally:
        sh(plab, f"rm -rf {sentinel}")
