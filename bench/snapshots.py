"""Snapshot benchmark: restic's durable copy and btrfs checkpoints against ``tar | zstd`` floors.

On one workspace of mixed file sizes (default 500 MB: many small files, some large; mostly
random bytes plus some text) it times, in the same run and on the same disk:

    floor      ``tar -cf - . | zstd -T0`` then fsync (create) and ``zstd -dc | tar -xf -`` (extraction):
               compression only, no hashing, encryption or deduplication
    work floor the same pipeline plus what restic must do to every byte: sha256 of the input and of
               the output, AES-256-CTR (no chunking, MAC, index or dedup): shows what is design cost
    restic     with the product's own options (``jackin.snapshots.restic``: what ``snapshot.create``
               and ``snapshot.restore`` run): its fixed cost (a backup of an empty directory), the
               first full backup, the restore (``check``, then ``restore --verify``), and a second
               backup after 1% of the files changed (time and added bytes from ``--json``)
    btrfs      (when a loop device and btrfs can be had) a read-only subvolume snapshot of the
               workspace while a writer keeps appending to it (the agent running), and a restore
               by swap: a writable snapshot of the checkpoint beside the live subvolume, two renames

and prints each against its floor with the issue's targets: full <= 2x tar create, restore <= 2x
extraction, incremental < 10% of the full backup in time and in added bytes, checkpoint < 100 ms,
restore by swap < 1 s.

It runs in a directory on this machine (``--dir``, default under /var/tmp), not on a lab host: the
lab hosts have no zstd and no package mirror, and a lab host is a container on this same kernel and
disk, so the figures are the same hardware without SSH in the way. The btrfs part needs root (loop
device, mount); without it it is skipped with the reason. This machine is shared and noisy (2 CPUs,
other engineers' labs): compare ratios, not seconds. Never a timed test.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's jackin

from jackin.snapshots import restic  # noqa: E402  (argv builders only: no host, no pyinfra)

WORDS = ("agent workspace snapshot restore fleet host repository checkpoint subvolume policy "
         "egress container jackin restic btrfs tar zstd def return class import self value").split()  # fmt: skip
TARGETS = {"full": 2.0, "restore": 2.0, "incremental time": 0.10, "incremental bytes": 0.10}


class BenchError(Exception):
    pass


def sh(*argv: str, stdin: bytes | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, input=stdin, capture_output=True, cwd=cwd)
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode(errors='replace')[-800:]}")
    return done.stdout.decode(errors="replace")


def timed(*argv: str, shell: bool = False) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds (user + system of the command and its children) and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv[0] if shell else argv, shell=shell, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise BenchError(f"{argv[0] if shell else ' '.join(argv)}: exit {done.returncode}: {done.stderr[-800:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.stdout


def text(rng: random.Random, size: int) -> bytes:
    line = " ".join(rng.choice(WORDS) for _ in range(12)) + "\n"
    return (line * (size // len(line) + 1)).encode()[:size]


def make_workspace(root: Path, total: int, rng: random.Random) -> list[Path]:
    """About ``total`` bytes: 30% in many small files (70% of them 0.5-8 KB, the rest 8-128 KB; 100 to a
    directory), 70% in a few
    large ones (~total/12 each, random bytes); one small file in five is text, the others random."""
    files: list[Path] = []
    small_budget, large_budget = total * 3 // 10, total - total * 3 // 10
    written, index = 0, 0
    while written < small_budget:
        size = rng.randint(512, 8 * 1024) if rng.random() < 0.7 else rng.randint(8 * 1024, 128 * 1024)
        path = root / "src" / f"d{index // 100:04d}" / f"f{index:06d}.{'txt' if index % 5 == 0 else 'bin'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text(rng, size) if index % 5 == 0 else rng.randbytes(size))
        files.append(path)
        written, index = written + size, index + 1
    large = max(1, total // 12)
    (root / "large").mkdir(exist_ok=True)
    while large_budget > 0:
        size = min(large, large_budget)
        path = root / "large" / f"blob{len(files):06d}.bin"
        with path.open("wb") as out:
            for offset in range(0, size, 1 << 22):
                out.write(rng.randbytes(min(1 << 22, size - offset)))
        files.append(path)
        large_budget -= size
    return files


def change_one_percent(files: list[Path], rng: random.Random) -> tuple[int, int]:
    """Rewrite 1% of the files (same size, new bytes); the count and bytes changed."""
    chosen = rng.sample(files, max(1, len(files) // 100))
    for path in chosen:
        path.write_bytes(rng.randbytes(path.stat().st_size))
    return len(chosen), sum(p.stat().st_size for p in chosen)


def tree_summary(root: Path) -> tuple[int, int]:
    count = size = 0
    for path in root.rglob("*"):
        if path.is_file():
            count, size = count + 1, size + path.stat().st_size
    return count, size


def bench_restic(work: Path, ws: Path, files: list[Path], rng: random.Random, compression: str | None) -> dict[str, float]:
    """The floors, then restic exactly as the product runs it (``jackin.snapshots.restic``'s options:
    ``snapshot.create``'s backup, ``snapshot.restore``'s check and verified restore), in this order."""
    r: dict[str, float] = {}
    out = work / "ws.tar.zst"
    sh("sync")
    r["tar create"], r["tar create cpu"], _ = timed(f"tar -C {ws} -cf - . | zstd -q -T0 -o {out} && sync {out}", shell=True)
    r["tar bytes"] = out.stat().st_size
    sh("sync")
    r["work floor"], r["work floor cpu"], _ = timed("bash", "-o", "pipefail", "-c", WORK_FLOOR.format(
        ws=ws, out=work / "ws.tar.zst.aes", key=secrets.token_hex(32), iv=secrets.token_hex(16)))  # fmt: skip
    (work / "ws.tar.zst.aes").unlink()
    (work / "untar").mkdir()
    sh("sync")
    r["tar extract"], r["tar extract cpu"], _ = timed(f"zstd -q -dc {out} | tar -C {work}/untar -xf -", shell=True)
    password = work / "password"
    password.write_text(secrets.token_urlsafe(32))
    base = ["restic", *restic.repo_options(str(work / "repo"), str(password), str(work / "cache"))]
    base += ["--compression", compression] if compression else []
    sh(*base, "--quiet", "init")
    (work / "empty").mkdir()
    r["restic start"], _, _ = timed(*base, "--quiet", "cat", "config")  # opening the repository: key derivation
    r["fixed"], r["fixed cpu"], _ = timed(*base, *restic.backup_options("bench", "bench-empty", "empty"), "--",
                                          str(work / "empty"))  # restic's own floor: a backup of nothing  # fmt: skip
    sh("sync")
    r["full"], r["full cpu"], out_json = timed(*base, *restic.backup_options("bench", "bench-full", "ws"), "--", str(ws))
    full = restic.parse_backup(out_json)
    r["full added"] = full.data_added
    sh("sync")
    r["check"], r["check cpu"], _ = timed(*base, *restic.check_options())
    r["restore only"], r["restore only cpu"], _ = timed(*base, *restic.restore_options(full.snapshot_id,
                                                                                       str(work / "restored")))  # fmt: skip
    r["restore"], r["restore cpu"] = r["check"] + r["restore only"], r["check cpu"] + r["restore only cpu"]
    if tree_summary(work / "restored" / ws.relative_to("/")) != tree_summary(ws):
        raise BenchError("restic's restore does not hold the workspace's files")
    r["changed files"], r["changed bytes"] = change_one_percent(files, rng)
    sh("sync")
    r["incremental"], r["incremental cpu"], out_json = timed(*base, *restic.backup_options("bench", "bench-incr", "ws"),
                                                             "--", str(ws))  # fmt: skip
    r["incremental added"] = restic.parse_backup(out_json).data_added
    return r


# The per-byte work restic's design needs, as one pipeline without restic: hash the content (restic
# names each chunk by its SHA-256), compress, encrypt, hash the stored bytes (a pack file's name is
# its SHA-256), and fsync. No chunking, MAC, index or deduplication lookups.
WORK_FLOOR = ("tar -C {ws} -cf - . | tee >(sha256sum >/dev/null) | zstd -q -T0 "
              "| openssl enc -aes-256-ctr -K {key} -iv {iv} | tee >(sha256sum >/dev/null) > {out} && sync {out}")


@contextmanager
def btrfs_mount(work: Path, size: int) -> Iterator[Path]:
    """A loop-mounted btrfs of ``size`` bytes (sparse image); detached and removed afterwards."""
    image, mnt = work / "cow.img", work / "cow"
    with image.open("wb") as handle:
        handle.truncate(size)
    device = sh("losetup", "--find", "--show", str(image)).strip()
    try:
        sh("mkfs.btrfs", "-q", device)
        mnt.mkdir()
        sh("mount", "-t", "btrfs", device, str(mnt))
        try:
            yield mnt
        finally:
            sh("umount", str(mnt))
    finally:
        sh("losetup", "--detach", device)
        image.unlink()


def btrfs_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop device and mount)"
    for tool in ("losetup", "mkfs.btrfs", "btrfs"):
        if not shutil.which(tool):
            return f"{tool} is not installed (apt-get install btrfs-progs)"
    if "btrfs" not in Path("/proc/filesystems").read_text():
        return "the kernel has no btrfs"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control"
    return None


def bench_btrfs(work: Path, ws: Path, total: int, repeat: int) -> dict[str, float]:
    r: dict[str, float] = {}
    with btrfs_mount(work, max(3 * total, 1 << 30)) as mnt:
        home, checkpoints = mnt / "home", mnt / ".checkpoints"
        sh("btrfs", "subvolume", "create", str(home))
        checkpoints.mkdir(mode=0o700)
        sh("cp", "-a", f"{ws}/.", str(home))
        sh("sync")
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(home / "agent.log")])  # the agent, running
        try:
            time.sleep(0.5)
            snaps = [checkpoints / f"snap{i}" for i in range(repeat)]
            r["checkpoint"] = statistics.median(timed("btrfs", "subvolume", "snapshot", "-r", str(home), str(snap))[0]
                                                for snap in snaps)  # fmt: skip
        finally:
            writer.terminate()
            writer.wait()
        swaps, deletes = [], []
        for _ in range(repeat):
            shutil.rmtree(home / "src" / "d0000")  # the agent's damage
            start = time.perf_counter()
            sh("btrfs", "subvolume", "snapshot", str(snaps[0]), str(mnt / ".new"))
            os.rename(home, mnt / ".old")
            os.rename(mnt / ".new", home)
            swaps.append(time.perf_counter() - start)
            start = time.perf_counter()
            sh("btrfs", "subvolume", "delete", str(mnt / ".old"))
            deletes.append(time.perf_counter() - start)
            if not (home / "src" / "d0000").is_dir():
                raise BenchError("the swapped-in subvolume does not hold the checkpoint's files")
        r["swap restore"], r["old delete"] = statistics.median(swaps), statistics.median(deletes)
        for subvolume in (*snaps, home):
            sh("btrfs", "subvolume", "delete", str(subvolume))
    return r


WRITER = """
import os, sys, time
with open(sys.argv[1], "ab") as f:
    while True:
        f.write(os.urandom(4096)); f.flush(); os.fsync(f.fileno()); time.sleep(0.001)
"""


def verdict(value: float, target: float) -> str:
    return "PASS" if value <= target else "FAIL"


def report(mb: int, r: dict[str, float], cow: dict[str, float] | str) -> None:
    rows = [
        ("restic full backup", "full", "tar create", "tar|zstd create", TARGETS["full"]),
        ("restic full backup", "full", "work floor", "work floor", None),
        ("restic restore", "restore", "tar extract", "zstd|tar extract", TARGETS["restore"]),
        ("incremental (time)", "incremental", "full", "full backup", TARGETS["incremental time"]),
    ]
    print(f"\n   {'op':<22}{'seconds':>9}{'floor':>9}  {'floor is':<18}{'ratio':>7}{'target':>9}  result  "
          "CPU s (op / floor)")
    for op, key, floor_key, what, target in rows:
        value, floor = r[key], r[floor_key]
        aim, result = ("<=" + format(target, "g") + "x", verdict(value / floor, target)) if target else ("-", "info")
        print(f"   {op:<22}{value:>9.3f}{floor:>9.3f}  {what:<18}{value / floor:>6.2f}x{aim:>9}"
              f"  {result:<6}  {r[key + ' cpu']:.2f} / {r[floor_key + ' cpu']:.2f}")
    ratio = r["incremental added"] / r["full added"]
    print(f"   {'incremental (bytes)':<22}{r['incremental added'] / 1e6:>8.1f}M{r['full added'] / 1e6:>8.1f}M  "
          f"{'full added':<18}{ratio:>6.3f}x{'<=0.1':>8}x  {verdict(ratio, TARGETS['incremental bytes'])}")
    fixed = r["fixed"]
    print(f"   restic's own floor, a backup of an empty directory: {fixed:.3f}s ({r['fixed cpu']:.2f} CPU s; opening "
          f"the repository alone, key derivation: {r['restic start']:.3f}s). Without it: full "
          f"{(r['full'] - fixed) / r['tar create']:.2f}x tar|zstd, incremental "
          f"{max(r['incremental'] - fixed, 0) / (r['full'] - fixed):.2f}x the full backup; CPU seconds (steadier than wall "
          f"time on a loaded machine): full {r['full cpu'] / r['tar create cpu']:.2f}x tar|zstd, "
          f"{r['full cpu'] / r['work floor cpu']:.2f}x the work floor")
    print(f"   restore = restic check {r['check']:.3f}s + restore --verify {r['restore only']:.3f}s "
          "(what snapshot.restore runs per agent, before its rename; with --repeat, each is its own median)")
    print("   floors: tar|zstd compresses and fsyncs its output, but neither hashes, encrypts nor deduplicates; "
          "the work floor adds sha256 of the input and of the output and AES-256-CTR (restic's per-byte work, "
          "without chunking, MAC, index or dedup)")
    print(f"   1% change: {r['changed files']:.0f} files, {r['changed bytes'] / 1e6:.1f} MB rewritten; "
          f"tar.zst {r['tar bytes'] / 1e6:.1f} MB, restic full added {r['full added'] / 1e6:.1f} MB")
    if isinstance(cow, str):
        print(f"   btrfs checkpoint: SKIPPED: {cow}")
        return
    print(f"   btrfs checkpoint (agent writing) {cow['checkpoint'] * 1000:.1f} ms (target < 100 ms) "
          f"{verdict(cow['checkpoint'], 0.1)}; restore by swap {cow['swap restore'] * 1000:.1f} ms (target < 1 s) "
          f"{verdict(cow['swap restore'], 1.0)}; then deleting the old subvolume {cow['old delete'] * 1000:.1f} ms "
          "(after the swap, not in the restore)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=500, help="workspace size in MB (default 500)")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where to work (default /var/tmp)")
    parser.add_argument("--no-btrfs", action="store_true", help="skip the copy-on-write checkpoint part")
    parser.add_argument("--compression", default=None, choices=("auto", "off", "max"),
                        help="add restic's --compression (an experiment: the product passes none, restic's default "
                             "auto)")
    parser.add_argument("--repeat", type=int, default=1, help="median of K rounds (each its own repository)")
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    for tool in ("tar", "zstd", "restic", "openssl", "bash"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is not installed here (apt-get install {tool})")
    rng = random.Random(args.seed)
    total = args.size * 1_000_000
    restic_version = sh("restic", "version").split(" compiled")[0]
    work = Path(tempfile.mkdtemp(prefix="jackin-snapbench-", dir=args.dir))
    try:
        ws = work / "ws"
        ws.mkdir()
        start = time.perf_counter()
        files = make_workspace(ws, total, rng)
        count, size = tree_summary(ws)
        print(f"{restic_version}; {os.cpu_count()} CPUs; workspace {count} files, {size / 1e6:.0f} MB "
              f"(made in {time.perf_counter() - start:.1f}s, not measured); in {work}; load average "
              f"{os.getloadavg()[0]:.1f}; restic options: the product's{' + --compression ' + args.compression if args.compression else ''}")
        rounds = []
        for index in range(args.repeat):
            (work / f"round{index}").mkdir()
            rounds.append(bench_restic(work / f"round{index}", ws, files, rng, args.compression))
            shutil.rmtree(work / f"round{index}")
        r = {key: statistics.median(each[key] for each in rounds) for key in rounds[0]}
        reason = "--no-btrfs" if args.no_btrfs else btrfs_skip_reason()
        cow: dict[str, float] | str = reason if reason else {}
        if not reason:
            try:
                cow = bench_btrfs(work, ws, total, args.repeat)
            except BenchError as error:
                cow = f"failed: {error}"
        report(args.size, r, cow)
    except BenchError as error:
        sys.exit(f"bench: FAILED: {error}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
