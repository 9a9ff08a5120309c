"""Fleet lifecycle benchmark on the lab: jackin's CLI against plain-SSH floors.

For W(N hosts, 3 agents) with N in --hosts (default 1,4,8; --scale adds 16,32)
it times, the way an operator runs them (``python -m invoke ...`` in the repo):
cold ``fleet.up``, ``fleet.status --json`` once from cold (the SSH master connections of earlier
reads closed), then --repeat rounds of ``ssh true``, ``fleet.status`` and a warm no-change
``fleet.up`` (masters open; each target's ratio is the median of the rounds' own ratios), and
``fleet.down --yes --no-final-snapshot`` (then, after a second cold up, ``fleet.down`` with its
final snapshot and pull, reported apart as the final snapshot's cost). Beside each, in the same
run and on the same lab hosts, a floor: N parallel ``ssh host true`` (for fleet.status, right
before each status run, with the agents running as they do for it); one bare Python start
(``python -c pass``); N parallel ssh sessions each running one
plain shell script doing the same work (cold: the Docker daemon's settings merged into the
host's daemon.json and Docker's one restart, users, dirs, the egress policy
bundle, networks, hardened containers from ``AgentPlan.run_args()``; warm: one
round trip of checks; down: remove all and check); one start of the CLI's Python process; one start
of the engine child with no hosts. The lab runs on a shared, noisy machine
(other engineers run tests on it), so absolute seconds drift from run to run;
ratios to floors measured minutes apart on the same hosts are what we compare
against the targets. Before a cold script and before the cold fleet.up, every host's daemon.json is
put back as the lab made it and Docker restarted (untimed), so both start from a fresh host; the cold
script without the daemon settings (the floor before 2026-12-03) is timed too and reported beside it. Lab boot (``Lab.up``) and loading the agents' role image into every host
(``images.deliver``) are timed separately, outside: fleet.up and the floors both find the image.
Everything uses a private state dir and labs ``bench<N>-<pid>`` (two benches never share one), removed at the end.
Each lab host's systemd holds about 8 inotify instances: ``Lab.up`` raises root's
``fs.inotify.max_user_instances`` when N needs it (as root), or fails saying what to run.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shlex
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

STATE = tempfile.mkdtemp(prefix="jackin-bench-")
atexit.register(shutil.rmtree, STATE, True)  # also after --help or an error
os.environ["JACKIN_STATE_DIR"] = STATE  # before jackin is imported

from jackin.net import dns
from jackin import hostpaths
from jackin.net import policy
from jackin.images import build as images
from jackin.lifecycle import fleet as fleet_api
from jackin.plan import fleet as planning
from jackin.errors import JackinError  # noqa: E402
from jackin.lab import Lab  # noqa: E402
from jackin.lab.limits import INOTIFY_LIMIT, inotify_in_use  # noqa: E402
from jackin.transport.openssh import PERSIST  # noqa: E402
from jackin.operations import host as host_ops  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
INVENTORY = """fleet:
  name: {fleet}
  provider: lab
  lab: {{name: {lab}, hosts: {n}}}
  uid_base: {uid_base}
  agents:
    - {{name: coder, role: demo, count: 2}}
    - {{name: reviewer, role: demo}}
  network: {{mode: none}}
  resources: {{memory: 512m, cpus: 1, pids: 256}}
"""


class BenchError(Exception):
    pass


# issue 9's targets, each against its floor (see ``report``).
TARGETS = {"fleet.up cold": 1.5, "fleet.up warm": 1.2, "fleet.status": 1.5, "fleet.down": 1.5,
           "fleet.down final": 2.0}  # the final snapshot and pull: issue 18


def timed(argv: list[str], stdin: str | None = None) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, input=stdin, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def cli(*args: str, ok: tuple[int, ...] = (0,)) -> tuple[float, str]:
    seconds, proc = timed([PY, "-m", "invoke", *args])
    if proc.returncode not in ok:
        raise BenchError(f"inv {' '.join(args)}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def sh(lab: Lab, port: int, command: str) -> str:
    """One command on one lab host (untimed): its stdout."""
    return subprocess.run(["ssh", "-F", "/dev/null", "-o", f"UserKnownHostsFile={lab.known_hosts}", "-o",
                           "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-i",
                           str(lab.key_file), "-p", str(port), "root@127.0.0.1", command],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip


def ssh_all(lab: Lab, ports: list[int], script: str) -> float:
    """N parallel sessions of the system ssh client, each running ``script`` with bash."""
    base = ["ssh", "-F", "/dev/null", "-o", f"UserKnownHostsFile={lab.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-i", str(lab.key_file)]  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as file:
        file.write(script)
        file.flush()
        inputs = [open(file.name) for _ in ports]  # one open file each: children must not share an offset
        start = time.perf_counter()
        procs = [subprocess.Popen([*base, "-p", str(port), "root@127.0.0.1", "bash", "-s"], stdin=stdin,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for port, stdin in zip(ports, inputs)]  # fmt: skip
        errors = [p.communicate()[1] for p in procs]
        seconds = time.perf_counter() - start
        for stdin in inputs:
            stdin.close()
    for proc, err in zip(procs, errors):
        if proc.returncode != 0:
            raise BenchError(f"floor script failed (exit {proc.returncode}): {err.strip()[-1000:]}")
    return seconds


def parts(lab: Lab, inventory: Path, repeat: int) -> dict[str, float]:
    """Where fleet.status's and a warm fleet.up's time goes, in this process (masters open): the lab
    lookup (``Lab.status``: docker CLI calls on this machine), the status read and the state read."""
    from jackin.snapshots.auto import read_states
    from jackin.lifecycle.status import fleet_status

    spec = fleet_api.load(inventory)
    hosts = [h.target() for h in lab.status().hosts]
    with fleet_api.Ledger() as ledger:
        plan = fleet_api.make_plan(spec, ledger, store=False)

    def clock(fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    return {"lab lookup": median(lambda: clock(lab.status), repeat),
            "status read": median(lambda: clock(lambda: fleet_status(spec.fleet.name, hosts)), repeat),
            "state read": median(lambda: clock(lambda: read_states(plan, hosts)), repeat)}  # fmt: skip


def close_masters() -> None:
    """End the OpenSSH master connections jackin's reads left open (jackin.transport.openssh), so the next read
    starts cold: each with ``ssh -O exit`` on its socket (only ours: the bench's private state dir)."""
    for socket in sorted((Path(STATE) / "ssh").glob("*")):
        subprocess.run(["ssh", "-F", "/dev/null", "-o", f"ControlPath={socket}", "-O", "exit", "x"],
                       capture_output=True)  # fmt: skip


def inotify() -> tuple[int, int]:
    """inotify instances in use and root's limit: a booted lab host (systemd) holds about 8."""
    return inotify_in_use(), int(INOTIFY_LIMIT.read_text())


def median(fn: Callable[[], float], k: int) -> float:
    return statistics.median(fn() for _ in range(k))


def q(*args: str) -> str:
    return " ".join(shlex.quote(a) for a in args)


def plain_scripts(plan: planning.FleetPlan, daemon_json: str | None = None) -> dict[str, str]:
    """``daemon_json``: the hosts' daemon.json before any run; the cold script then writes it with
    jackin's settings merged in and restarts Docker once, as fleet.up does on a fresh host."""
    label, image = f"label=jackin.fleet={plan.fleet}", sorted({a.image for a in plan.agents})
    users = [a.user for a in plan.agents]
    bootstrap = ("command -v dockerd nft >/dev/null\nsystemctl is-active -q docker\nsystemctl is-enabled -q docker\n"
                 + q("docker", "image", "inspect", "--format", "ok", *image) + " >/dev/null\n")
    check = (f"getent passwd | grep -c 'jackin/{plan.fleet}/' || true\ngetent group | grep -c '^jk-{plan.fleet}-' || true\n"
             f"[ ! -d {plan.fleet_dir} ] || find {plan.fleet_dir} -maxdepth 2 -printf '%m %U %G %p\\n'\n"
             f"docker ps -a --filter {label} --format '{{{{.Names}}}} {{{{.State}}}} {{{{.Label \"jackin.config\"}}}}'\n"
             f"docker network ls --filter {label} --format '{{{{.Name}}}}'\n"
             f"test -e {plan.marker} || true\ncat {hostpaths.NFT_DIR}/{plan.fleet}.sha 2>/dev/null || true\n"
             f"nft list table inet jackin-{plan.fleet} >/dev/null 2>&1 || true\n")  # fmt: skip
    hardened = host_ops.daemon_config(daemon_json, plan.address_pools) if daemon_json is not None else None
    daemon = [f"printf '%s' {shlex.quote(hardened)} > {host_ops.DAEMON_JSON}", *host_ops.RESTART] if hardened else []
    cold = ["set -e", bootstrap.rstrip(), *daemon,
            q("install", "-d", "-m", "0755", "-o", "root", "-g", "root", hostpaths.ROOT),
            q("install", "-d", "-m", "0711", "-o", "root", "-g", "root", plan.fleet_dir)]  # fmt: skip
    f, nft = plan.fleet, f"{hostpaths.NFT_DIR}/{plan.fleet}"  # the egress policy, before any agent starts
    cold += [f"install -d -m 0755 {path.rsplit('/', 1)[0]} && printf '%s' {shlex.quote(text)} > {path}"
             for path, text in sorted(policy.bundle(plan).items())]  # fmt: skip
    cold += [f"nft -c -f {nft}.nft && nft -f {nft}.nft",  # enabled for boot, then one reload (as fleet.up does)
             f"systemctl enable --no-reload --quiet jackin-nft-{f}.service {hostpaths.dns_target(f)}",
             "systemctl daemon-reload", *dns.apply_commands(plan, []),
             f"echo {policy.bundle_hash(plan)} > {nft}.sha"]  # fmt: skip
    for a in plan.agents:
        uid = str(a.uid)
        cold += [q("groupadd", "--gid", uid, a.user),
                 q("useradd", "--uid", uid, "--gid", uid, "--no-create-home", "--home-dir", a.home,
                   "--shell", "/usr/sbin/nologin", "--comment", f"jackin/{a.fleet}/{a.instance}", a.user),
                 q("install", "-d", "-m", "0700", "-o", uid, "-g", uid, a.home),
                 q("install", "-d", "-m", "0700", "-o", uid, "-g", uid, a.workspace),
                 q("docker", "network", "create", "--driver", "bridge",
                   "--opt", f"com.docker.network.bridge.name={a.bridge}",
                   "--opt", "com.docker.network.bridge.enable_icc=false",
                   "--label", f"jackin.fleet={a.fleet}", "--label", f"jackin.agent={a.instance}", a.network),
                 q("docker", "run", "-d", *a.run_args()) + " >/dev/null"]  # fmt: skip
    cold.append(f"install -d -m 0700 {hostpaths.STATE_DIR} && echo '{{}}' > {plan.marker}")
    down = ["set -e", q("docker", "rm", "-f", *users) + " >/dev/null", q("docker", "network", "rm", *users) + " >/dev/null",
            *(q("userdel", u) for u in users), *(f"! getent group {u} >/dev/null || groupdel {u}" for u in users),
            q("rm", "-rf", "--one-file-system", plan.fleet_dir), f"rmdir {hostpaths.ROOT} 2>/dev/null || true",
            q("rm", "-f", plan.marker),
            f"systemctl disable --now --quiet jackin-nft-{f}.service jackin-nft-resolve-{f}.timer "
            f"jackin-nft-resolve-{f}.service 2>/dev/null || true", *dns.remove_commands(f, hostpaths.dns_paths(f)),
            f"nft delete table inet jackin-{f}",
            q("rm", "-f", *hostpaths.firewall_paths(f)), "systemctl daemon-reload",
            f"ls {hostpaths.NFT_DIR}/*.nft >/dev/null 2>&1 || {{ rm -f {hostpaths.RESOLVER}; "
            f"rmdir {hostpaths.NFT_DIR} /etc/jackin /usr/local/lib/jackin 2>/dev/null || true; }}", check]  # fmt: skip
    return {"cold": "\n".join(cold) + "\n", "warm": bootstrap + check, "down": "\n".join(down) + "\n",
            "cold without daemon": "\n".join(c for c in cold if c not in daemon) + "\n"}


def bench(n: int, repeat: int, work: Path) -> dict[str, Any]:
    lab_name, r = f"bench{n}-{os.getpid() % 100000}", {"n": n, "repeat": repeat}  # type: str, dict[str, Any]
    inv, floor_inv = work / f"bench{n}.yaml", work / f"floor{n}.yaml"
    inv.write_text(INVENTORY.format(fleet="bench", lab=lab_name, n=n, uid_base=60000))
    floor_inv.write_text(INVENTORY.format(fleet="floor", lab=lab_name, n=n, uid_base=62000))
    spec = fleet_api.load(floor_inv).fleet
    floor_plan = planning.build(spec, {inst: 62000 + i for i, (_, inst) in enumerate(planning.instances(spec))})
    lab = Lab(lab_name)
    try:
        start = time.perf_counter()
        try:
            status = lab.up(n, timeout=300 + 10 * n, log=lambda line: print(f"   lab: {line}") if "inotify" in line else None)
        except JackinError as error:
            states = sorted(f"{h.name}={h.state}" for h in lab.status().hosts if h.state != "running")
            raise BenchError(f"lab.up({n}): {error.message}; not running: {' '.join(states) or 'none'}; "
                             f"inotify instances in use/limit: {inotify()}") from None
        r["lab.up"] = time.perf_counter() - start
        ports = [h.port for h in status.hosts]
        # The agents' role image, loaded into every host before anything is timed (fleet.up would
        # load it by SFTP + docker load; the floor scripts would have to as well): both sides find it.
        start = time.perf_counter()
        tags = sorted({a.image for a in floor_plan.agents})
        failed = images.deliver({h.name: tags for h in status.hosts}, [h.target() for h in status.hosts])
        if failed:
            raise BenchError(f"loading {tags}: " + "; ".join(f"{k}: {e.message}" for k, e in sorted(failed.items())))
        r["image load"] = time.perf_counter() - start
        # A fresh host's daemon.json (the lab's), which a cold fleet.up hardens and restarts Docker for.
        none = "<no daemon.json>"
        fresh = {sh(lab, port, f"cat {host_ops.DAEMON_JSON} 2>/dev/null || echo '{none}'") for port in ports}
        if len(fresh) != 1:
            raise BenchError(f"the lab hosts' {host_ops.DAEMON_JSON} differ: {sorted(fresh)}")
        daemon_json = None if (text := fresh.pop()) == none + "\n" else text
        scripts = plain_scripts(floor_plan, daemon_json)
        put_back = (f"rm -f {host_ops.DAEMON_JSON}" if daemon_json is None
                    else f"printf '%s' {shlex.quote(daemon_json)} > {host_ops.DAEMON_JSON}")  # fmt: skip
        # Untimed, before each cold run: the fresh host's daemon.json, Docker restarted (as fleet.up and the
        # floor do: reset-failed first, docker.service allows 3 starts a minute), answering before the clock starts.
        restore = "\n".join(["set -e", put_back, *host_ops.RESTART, "docker info >/dev/null", ""])
        r["ssh true"] = median(lambda: ssh_all(lab, ports, "true\n"), repeat)
        r["cli start"] = median(lambda: cli("--list")[0], repeat)
        r["python start"] = median(lambda: timed([PY, "-c", "pass"])[0], repeat)
        engine_req = json.dumps({"deploy": str(REPO / "deploys" / "fleet.py"), "targets": []})
        r["engine start"] = median(lambda: timed([PY, "-m", "jackin.engine.runner"], engine_req)[0], repeat)
        ssh_all(lab, ports, restore)  # every cold run starts the same way: right after Docker's restart
        r["plain cold"] = ssh_all(lab, ports, scripts["cold"])
        r["plain warm"] = median(lambda: ssh_all(lab, ports, scripts["warm"]), repeat)
        r["plain down"] = ssh_all(lab, ports, scripts["down"])
        # The floor as it was before 2026-12-03 (no daemon settings), on hosts made fresh again; and
        # fresh again for fleet.up (untimed: the lab's daemon.json back, Docker restarted).
        ssh_all(lab, ports, restore)
        r["plain cold without daemon"] = ssh_all(lab, ports, scripts["cold without daemon"])
        ssh_all(lab, ports, scripts["down"])
        ssh_all(lab, ports, restore)

        cold_run = cli("fleet.up", "-i", str(inv), "--yes", "--json")
        close_masters()  # status from cold: no SSH master connection left by the up
        r["fleet.status cold"], _ = cli("fleet.status", "-i", str(inv), "--json")
        # Then, masters open, --repeat rounds of: an `ssh true` floor, fleet.status, a warm fleet.up. The
        # agents now run, and their health checks come in bursts (24 `docker exec` every 10 s here, all
        # started together), so each target's ratio is the median of the rounds' own ratios: status against
        # the floor just before it, the warm up against the status just before it (medians taken apart
        # could set a burst against a quiet moment). The idle floor (before any agent) is printed too.
        statuses, trues, warms = [], [], []
        for _ in range(repeat):
            trues.append(ssh_all(lab, ports, "true\n"))
            statuses.append(cli("fleet.status", "-i", str(inv), "--json"))
            seconds, out = cli("fleet.up", "-i", str(inv), "--yes", "--json")
            warms.append((seconds, json.loads(out)["run"]))
        r["fleet.status"] = statistics.median(s for s, _ in statuses)
        r["ssh true busy"] = statistics.median(trues)
        r["status ratio"] = statistics.median(s / (t + r["python start"]) for (s, _), t in zip(statuses, trues))
        r["warm ratio"] = statistics.median(w / s for (w, _), (s, _) in zip(warms, statuses))
        runs = [(cold_run[0], json.loads(cold_run[1])["run"]), *warms]
        warm = sorted(runs[1:], key=lambda x: x[0])
        for kind, (seconds, run) in (("cold", runs[0]), ("warm", warm[len(warm) // 2])):
            r[f"fleet.up {kind}"], r[f"{kind} engine"] = seconds, run["elapsed"]
            r[f"{kind} host max"] = max(h["elapsed"] for h in run["hosts"])
            batch = runs[1:] if kind == "warm" else runs[:1]  # warm: the most any warm run changed
            r[f"{kind} changed"] = max(sum(h["changed"] for h in x["hosts"]) for _, x in batch)
        try:
            r.update(parts(lab, inv, repeat))
        except Exception as error:  # noqa: BLE001 - a breakdown that fails must not lose the run's figures
            print(f"   (breakdown failed: {type(error).__name__}: {error})")
            r.update({"lab lookup": float("nan"), "status read": float("nan"), "state read": float("nan")})
        doc = json.loads(statuses[-1][1])
        r["status agents"] = sum(a["state"] == "running" for h in doc["hosts"] for a in h["agents"])
        wall0 = time.time()
        r["fleet.down"], _ = cli("fleet.down", "-i", str(inv), "--yes", "--keep-lab", "--no-final-snapshot")
        r.update(down_phases(wall0))
        r["fleet.up cold 2"], _ = cli("fleet.up", "-i", str(inv), "--yes", "--json")
        r["fleet.down final"], _ = cli("fleet.down", "-i", str(inv), "--yes", "--keep-lab")
    finally:
        lab.down()
    return r


def down_phases(wall0: float) -> dict[str, float]:
    """From the ledger's timestamps: when the teardown engine run and the clean check ended."""
    db = sqlite3.connect(Path(STATE) / "ledger.sqlite3")
    run_id, started, finished = db.execute(
        "SELECT id, started, finished FROM runs WHERE action = 'fleet.down' ORDER BY id DESC LIMIT 1").fetchone()
    checked = db.execute("SELECT max(at) FROM audit WHERE run = ? AND action = 'clean-check'", (run_id,)).fetchone()[0]
    db.close()
    return {"down to engine": started - wall0, "down engine": finished - started, "down check": checked - finished,
            "down before lab rm": checked - wall0}  # fmt: skip


def report(r: dict[str, Any]) -> None:
    n = r["n"]
    status_floor = r["ssh true busy"] + r["python start"]
    rows = [("fleet.up cold", r["plain cold"], "plain cold"), ("fleet.up warm", r["fleet.status"], "fleet.status"),
            ("fleet.status", status_floor, "ssh true + py"), ("fleet.down", r["plain down"], "plain down"),
            ("fleet.down final", r["fleet.down"], "fleet.down")]  # fmt: skip
    print(f"\n== W({n} hosts, 3 agents)  lab.up {r['lab.up']:.2f}s, role image build and load into every host "
          f"{r['image load']:.2f}s (not measured below: both sides find the image)")
    print(f"   floors: ssh true {r['ssh true']:.3f}s (with the agents running, beside each status: "
          f"{r['ssh true busy']:.3f}s)  python start {r['python start']:.3f}s  cli start "
          f"{r['cli start']:.3f}s  engine start {r['engine start']:.3f}s  plain cold {r['plain cold']:.3f}s  "
          f"plain warm {r['plain warm']:.3f}s  plain down {r['plain down']:.3f}s")  # fmt: skip
    print(f"   {'op':<17}{'seconds':>9}{'floor':>9}  {'floor is':<16}{'ratio':>7}{'target':>8}  result")
    for op, floor, what in rows:
        paired = {"fleet.status": "status ratio", "fleet.up warm": "warm ratio"}.get(op)
        ratio, target = r[paired] if paired else r[op] / floor, TARGETS.get(op)
        verdict = "-" if target is None else ("PASS" if ratio <= target else "FAIL")
        tgt = f"<={target:g}x" if target else "none"
        print(f"   {op:<17}{r[op]:>9.3f}{floor:>9.3f}  {what:<16}{ratio:>6.2f}x{tgt:>8}  {verdict}")
    print("   fleet.status's and the warm up's ratios are medians over the rounds of each round's own ratio (status / "
          "(the ssh true just before it + python start); warm up / the status just before it); their seconds and "
          "floor columns show medians")
    print(f"   fleet.up warm / plain warm: {r['fleet.up warm'] / r['plain warm']:.2f}x; fleet.down is "
          "--no-final-snapshot (the plain floor takes none)")
    print(f"   plain cold includes the Docker daemon settings and Docker's one restart (as a cold fleet.up on a "
          f"fresh host); without them (the floor before 2026-12-03) it took {r['plain cold without daemon']:.3f}s: "
          f"fleet.up cold / that = {r['fleet.up cold'] / r['plain cold without daemon']:.2f}x")
    print(f"   in process, masters open: lab lookup {r['lab lookup']:.3f}s, status read {r['status read']:.3f}s, "
          f"state read {r['state read']:.3f}s; fleet.status = cli start + lab lookup + status read + "
          f"{r['fleet.status'] - r['cli start'] - r['lab lookup'] - r['status read']:.3f}s")  # fmt: skip
    cold = r["fleet.status cold"]
    print(f"   fleet.status is the median of {r['repeat']} runs with the SSH masters of earlier reads open (what an "
          f"operator's next command within {PERSIST}s gets); from cold (masters closed) it took {cold:.3f}s = "
          f"{cold / status_floor:.2f}x the floor; against the idle floor (ssh true before any agent ran) the "
          f"median is {r['fleet.status'] / (r['ssh true'] + r['python start']):.2f}x")  # fmt: skip
    for kind in ("cold", "warm"):
        wall, engine = r[f"fleet.up {kind}"], r[f"{kind} engine"]
        print(f"   {kind} up: engine {engine:.3f}s (slowest host {r[f'{kind} host max']:.3f}s), outside the engine "
              f"{wall - engine:.3f}s; ops changed {r[f'{kind} changed']}")  # fmt: skip
    print(f"   final snapshot: fleet.down with it {r['fleet.down final']:.3f}s, without {r['fleet.down']:.3f}s: "
          f"costs {r['fleet.down final'] - r['fleet.down']:.3f}s (a second cold up, on hosts whose Docker keeps the "
          f"settings, took {r['fleet.up cold 2']:.3f}s)")
    print(f"   fixed cost of an engine run: cli start + engine start = {r['cli start'] + r['engine start']:.3f}s;"
          f" status: {r['status agents']}/{3 * n} agents running")
    print(f"   down: to engine {r['down to engine']:.3f}s, teardown engine {r['down engine']:.3f}s, clean check "
          f"{r['down check']:.3f}s, then exit {r['fleet.down'] - r['down before lab rm']:.3f}s")


def scale(results: list[dict[str, Any]]) -> None:
    base = next((r for r in results if r["n"] == 8), results[0])
    ns = [r["n"] for r in results]
    print(f"\n== growth with N: seconds; s/host = least-squares slope; growth = time / time at N={base['n']}")
    print(f"   {'op':<15}" + "".join(f"{'N=' + str(n):>9}" for n in ns) + f"{'s/host':>9}   growth")
    for op in ["lab.up", "ssh true", "plain cold", "fleet.up cold", "plain warm", "fleet.up warm", "fleet.status",
               "fleet.down"]:  # fmt: skip
        fit = statistics.linear_regression(ns, [r[op] for r in results]).slope
        growth = " ".join(f"N={r['n']}:{r[op] / base[op]:.2f}x" for r in results if r is not base)
        print(f"   {op:<15}" + "".join(f"{r[op]:>9.2f}" for r in results) + f"{fit:>9.3f}   {growth}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,4,8", help="comma-separated host counts (default 1,4,8)")
    parser.add_argument("--scale", action="store_true", help="also run N=16 and N=32 once")
    parser.add_argument("--repeat", type=int, default=3, help="median of K for floors, warm up and status")
    args = parser.parse_args()
    counts = sorted({int(x) for x in args.hosts.split(",")} | ({16, 32} if args.scale else set()))
    rev = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True).stdout
    used, limit = inotify()
    # An installed package has its bytecode; this environment sets PYTHONDONTWRITEBYTECODE, so without
    # this every CLI start would compile jackin's modules from source (~0.09 s), which no operator pays.
    subprocess.run([PY, "-m", "compileall", "-q", "jackin", "tasks.py", "deploys"], cwd=REPO, check=True)
    print(f"jackin {rev.strip()}; state {STATE}; {os.cpu_count()} CPUs; repeat {args.repeat}; inotify {used}/{limit}")
    results = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for n in counts:
                try:
                    results.append(bench(n, args.repeat, Path(work)))
                    report(results[-1])
                except BenchError as error:
                    print(f"\n== W({n} hosts, 3 agents): FAILED: {error}")
                sys.stdout.flush()
    finally:
        shutil.rmtree(STATE, ignore_errors=True)
    if len(results) > 1:
        scale(results)


if __name__ == "__main__":
    main()
