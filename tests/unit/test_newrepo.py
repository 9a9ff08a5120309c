"""A new repository written by jackin instead of ``restic init`` (jackin/snapshots/newrepo.py): restic
itself (this machine's, as .ci/setup installs it) opens it, backs up into it, checks it and restores from
it; its key is cheap, its config is restic's format 2, and its chunker polynomial is irreducible, as
restic's own are. Also: a pulled copy's snapshot ids read from its files (jackin/snapshots/copies.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from jackin.snapshots import copies, newrepo, repokey, transfer

RESTIC = shutil.which("restic")
needs_restic = pytest.mark.skipif(RESTIC is None, reason="restic is not installed here")
PASSWORD = b"tFZ2uSx2t7Wq4m2-1_nU0Jb0oZ3Vt7bqS9o6Qm3vC8s"  # the shape of secrets.token_urlsafe(32)
# Polynomials restic 0.14's own init drew on this machine (read back from their configs).
RESTICS = [0x221922CEEBF4C9, 0x3EF88D276CC45F, 0x3D27657128351D, 0x3E8B75DC3B41A7, 0x3197F4CFC5CFA5]


def _times(a: int, b: int) -> int:
    """The product of two polynomials over GF(2)."""
    out = 0
    while b:
        if b & 1:
            out ^= a
        a, b = a << 1, b >> 1
    return out


def test_restics_own_polynomials_are_irreducible_and_products_are_not() -> None:
    assert all(newrepo.irreducible(p) for p in RESTICS)
    assert not newrepo.irreducible(_times(0b111, (1 << 51) | 0b1011))  # degree 2 times degree 51
    assert not newrepo.irreducible(_times(RESTICS[0] >> 27 | 1, (1 << 27) | 0b11))
    assert not newrepo.irreducible((1 << 53) | (1 << 20))  # x divides it (no constant term)
    assert newrepo.irreducible(0b111) and newrepo.irreducible(0b1011)  # small controls: x^2+x+1, x^3+x+1
    assert not newrepo.irreducible(0b101)  # x^2+1 = (x+1)^2


def test_a_drawn_polynomial_has_degree_53_and_is_irreducible() -> None:
    seeded = random.Random(7)
    for _ in range(20):
        p = newrepo.polynomial(lambda n: seeded.randbytes(n))
        assert p.bit_length() - 1 == 53 and p & 1 and newrepo.irreducible(p)
    # about one draw in 53 is irreducible, as for restic (a prime's density): the draws are not all kept
    kept = sum(newrepo.irreducible(seeded.getrandbits(53) | (1 << 53) | 1) for _ in range(2000))
    assert 10 < kept < 100


def test_the_key_is_cheap_and_opens_the_master_key_that_seals_the_config() -> None:
    made = newrepo.create(PASSWORD + b"\n")  # restic trims the password file's whitespace
    assert repokey.is_cheap(made.key) and made.key_name == hashlib.sha256(made.key).hexdigest()
    master, fields = repokey.open_master(made.key, PASSWORD)
    keys = json.loads(master)
    enc, mac_k, mac_r = (base64.b64decode(v) for v in (keys["encrypt"], keys["mac"]["k"], keys["mac"]["r"]))
    assert (len(enc), len(mac_k), len(mac_r), fields["kdf"], fields["hostname"]) == (32, 16, 16, "scrypt", "jackin")
    assert all(b & ~m & 0xFF == 0 for b, m in zip(mac_r, newrepo._MASK, strict=True))  # masked, as restic masks r
    nonce, body, tag = made.config[:16], made.config[16:-16], made.config[-16:]
    assert repokey._mac(mac_k, mac_r, nonce, body) == tag
    config = json.loads(repokey._ctr(enc, nonce, body))
    assert config == {"version": 2, "id": made.repository_id, "chunker_polynomial": f"{made.polynomial:x}"}
    with pytest.raises(repokey.KeyError_):
        repokey.open_master(made.key, b"not the password")
    assert newrepo.create(PASSWORD).repository_id != made.repository_id


def lay_out(repo: Path, made: newrepo.NewRepository) -> None:
    for sub in ("keys", "index", "locks", "snapshots", *(f"data/{i:02x}" for i in range(256))):
        (repo / sub).mkdir(parents=True, mode=0o700)
    (repo / "keys" / made.key_name).write_bytes(made.key)
    (repo / "config").write_bytes(made.config)


@needs_restic
def test_restic_opens_backs_up_into_checks_and_restores_from_the_written_repository(tmp_path: Path) -> None:
    repo, password, source = tmp_path / "repo", tmp_path / "password", tmp_path / "source"
    password.write_bytes(PASSWORD)
    made = newrepo.create(PASSWORD)
    lay_out(repo, made)
    (source / "deep").mkdir(parents=True)
    (source / "deep" / "data").write_bytes(os.urandom(3 << 20))  # chunked by the polynomial: several blobs
    (source / "text").write_text("hello\n")
    base = [RESTIC or "restic", "--repo", str(repo), "--password-file", str(password), "--no-cache"]

    def restic(*args: str) -> str:
        done = subprocess.run([*base, *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    shown = json.loads(restic("cat", "config"))
    assert (shown["id"], int(shown["chunker_polynomial"], 16), shown["version"]) == (
        made.repository_id, made.polynomial, 2)  # fmt: skip
    restic("backup", "--quiet", str(source))
    assert "no errors were found" in restic("check", "--read-data")
    restic("restore", "latest", "--target", str(tmp_path / "back"), "--verify")
    back = tmp_path / "back" / str(source).lstrip("/")
    assert (back / "deep" / "data").read_bytes() == (source / "deep" / "data").read_bytes()
    assert (back / "text").read_text() == "hello\n"
    ids = {s["id"] for s in json.loads(restic("snapshots", "--json"))}
    assert copies.restic_ids(repo) == ids and len(ids) == 1  # the files' names are the ids restic lists


def test_a_copys_ids_are_its_snapshot_files_names_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "snapshots").mkdir()
    good = "a" * 64
    for name in (good, "b" * 63, "C" * 64, good + ".tmp", "z" * 64):
        (tmp_path / "snapshots" / name).write_text("x")
    assert copies.restic_ids(tmp_path) == {good}
    with pytest.raises(transfer.TransferError, match="cannot list the snapshots"):
        copies.restic_ids(tmp_path / "missing")
