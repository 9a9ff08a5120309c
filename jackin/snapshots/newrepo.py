"""A new restic repository's files, made here instead of by ``restic init`` (pure: bytes out).

``restic init`` calibrates scrypt for its key (about 0.5 s of CPU, and as much again to measure it: 2.6 s
on this machine's CPUs), and jackin then re-seals that key cheaply (``jackin.snapshots.repokey``). For a
fleet's generated password (256 random bits: no KDF cost protects it further) jackin writes the
repository's two files itself, as restic 0.14 writes them for repository format 2 (restic's design
document, "Repository Format" and "Keys, Encryption and MAC"):

- ``keys/<sha256 of the file>``: the master key (a random AES-256 key and a Poly1305-AES key k, r, with r
  masked as restic masks it), sealed under the password with ``repokey.CHEAP`` scrypt parameters;
- ``config``: IV || AES-256-CTR(JSON {version 2, a random 32-byte id, a random irreducible polynomial of
  degree 53 for the content-defined chunker}) || Poly1305-AES MAC, under the master key.

The empty directories (``data/00`` .. ``data/ff``, ``index``, ``locks``, ``snapshots``) are the
caller's. The polynomial is drawn as restic's chunker draws it (``DerivePolynomial``: 54 random bits,
bits 53 and 0 set) and kept only when Ben-Or's test finds it irreducible, as restic's ``Irreducible``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from jackin.snapshots import repokey

DEGREE = 53
_MASK = bytes([0xFF, 0xFF, 0xFF, 0x0F, 0xFC, 0xFF, 0xFF, 0x0F, 0xFC, 0xFF, 0xFF, 0x0F, 0xFC, 0xFF, 0xFF, 0x0F])


@dataclass(frozen=True)
class NewRepository:
    key_name: str  # keys/<key_name>
    key: bytes
    config: bytes
    repository_id: str
    polynomial: int


# --- polynomials over GF(2), as ints (bit i: the coefficient of x^i) -------------------------


def _mod(a: int, m: int) -> int:
    degree = m.bit_length() - 1
    while a.bit_length() - 1 >= degree:
        a ^= m << (a.bit_length() - 1 - degree)
    return a


def _mulmod(a: int, b: int, m: int) -> int:
    result, a = 0, _mod(a, m)
    top = m.bit_length() - 1
    while b:
        if b & 1:
            result ^= a
        b >>= 1
        a <<= 1
        if a >> top & 1:
            a ^= m
    return result


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, _mod(a, b)
    return a


def irreducible(f: int) -> bool:
    """Ben-Or's test, as restic's chunker runs it: gcd(f, x^(2^i) - x mod f) == 1 for i = 1 .. deg/2."""
    if f < 2:
        return False
    x = 2
    power = x
    for _ in range(1, (f.bit_length() - 1) // 2 + 1):
        power = _mulmod(power, power, f)  # x^(2^i)
        if _gcd(f, power ^ x) != 1:
            return False
    return True


def polynomial(random: Callable[[int], bytes] = os.urandom, tries: int = 1_000_000) -> int:
    """A random irreducible polynomial of degree 53 (restic's ``chunker.RandomPolynomial``)."""
    for _ in range(tries):
        f = int.from_bytes(random(8), "little") & ((1 << (DEGREE + 1)) - 1)
        f |= (1 << DEGREE) | 1
        if irreducible(f):
            return f
    raise RuntimeError("no irreducible polynomial found")  # pragma: no cover - about 1 in 53 draws is one


# --- the files ----------------------------------------------------------------------------


def _seal(key: bytes, mac_k: bytes, mac_r: bytes, plaintext: bytes) -> bytes:
    nonce = os.urandom(16)
    ciphertext = repokey._ctr(key, nonce, plaintext)
    return nonce + ciphertext + repokey._mac(mac_k, mac_r, nonce, ciphertext)


def create(password: bytes) -> NewRepository:
    """A new repository's key file and config for ``password`` (restic trims its whitespace, as here)."""
    encrypt, mac_k = os.urandom(32), os.urandom(16)
    mac_r = bytes(b & m for b, m in zip(os.urandom(16), _MASK, strict=True))
    master = json.dumps({"mac": {"k": base64.b64encode(mac_k).decode(), "r": base64.b64encode(mac_r).decode()},
                         "encrypt": base64.b64encode(encrypt).decode()}).encode()  # fmt: skip
    cost, salt = repokey.CHEAP, os.urandom(repokey.SALT_BYTES)
    user_key, user_k, user_r = repokey._derive(password.strip(), salt, cost["N"], cost["r"], cost["p"])
    key_file = json.dumps({
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "username": "root",
        "hostname": "jackin", "kdf": "scrypt", "N": cost["N"], "r": cost["r"], "p": cost["p"],
        "salt": base64.b64encode(salt).decode(),
        "data": base64.b64encode(_seal(user_key, user_k, user_r, master)).decode(),
    }).encode()  # fmt: skip
    repository_id, pol = os.urandom(32).hex(), polynomial()
    config = json.dumps({"version": 2, "id": repository_id, "chunker_polynomial": f"{pol:x}"},
                        separators=(",", ":")).encode()  # fmt: skip
    return NewRepository(key_name=hashlib.sha256(key_file).hexdigest(), key=key_file,
                         config=_seal(encrypt, mac_k, mac_r, config), repository_id=repository_id,
                         polynomial=pol)  # fmt: skip
