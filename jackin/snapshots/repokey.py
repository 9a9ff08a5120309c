"""A fleet repository's restic key, re-sealed with cheap scrypt parameters (pure: bytes in, bytes out).

restic seals a repository's master key in ``keys/<id>`` with a key derived from the password by
scrypt, its parameters calibrated at ``restic init`` to cost about half a second of CPU. Every restic
command pays that again to open the repository: a suite's or a fleet's hundreds of backups, checks and
restores spend more CPU on it than on their data. The cost guards a password a person chose; a fleet's
password is ``secrets.token_urlsafe(32)`` (256 random bits, ``jackin.snapshots.transfer``), which no
guessing reaches whatever the KDF costs. So right after ``restic init`` jackin opens the new key with
the password and seals the same master key again with ``CHEAP`` parameters: the repository, its master
key and every snapshot stay as they are, and opening it costs milliseconds.

The key file format is restic's documented one (restic's design document, "Keys, Encryption and MAC"):
scrypt(password, salt, N, r, p) gives 64 bytes, an AES-256 key and a Poly1305-AES key (k, r); ``data``
is IV (16 bytes) || AES-256-CTR(master key JSON) || Poly1305-AES MAC (16 bytes) over the ciphertext; the
file's name is the SHA-256 of its bytes. ``reseal`` refuses a key it cannot open (wrong password, changed
bytes, a KDF other than scrypt) and leaves nothing half-made: it returns the new file, the caller writes it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.poly1305 import Poly1305

CHEAP = {"N": 4096, "r": 8, "p": 1}  # about 10 ms of CPU; restic's own calibration picks about 500 ms
SALT_BYTES = 64  # restic's salt length
_MAX_MEMORY = (1 << 31) - 1  # scrypt's working memory cap for opening a key (restic's calibration stays at 60 MiB)


class KeyError_(ValueError):  # noqa: N801 - not the builtin KeyError
    """A key file that cannot be opened with the password, or that is not a restic scrypt key."""


@dataclass(frozen=True)
class Sealed:
    name: str  # keys/<name>: the SHA-256 of ``data``, as restic names a key file
    data: bytes


def _derive(password: bytes, salt: bytes, n: int, r: int, p: int) -> tuple[bytes, bytes, bytes]:
    """restic's KDF: (AES-256 key, Poly1305-AES k, Poly1305 r) from scrypt's 64 bytes."""
    out = hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=_MAX_MEMORY, dklen=64)
    return out[:32], out[32:48], out[48:64]


def _mac(k: bytes, r: bytes, nonce: bytes, ciphertext: bytes) -> bytes:
    """Poly1305-AES: Poly1305 with the key r || AES-128_k(nonce) (Poly1305 clamps r, as restic masks it)."""
    encryptor = Cipher(algorithms.AES(k), modes.ECB()).encryptor()  # noqa: S305 - one block: AES_k(nonce), the MAC's s
    s = encryptor.update(nonce) + encryptor.finalize()
    return Poly1305.generate_tag(r + s, ciphertext)


def _ctr(key: bytes, nonce: bytes, data: bytes) -> bytes:
    cipher = Cipher(algorithms.AES(key), modes.CTR(nonce))
    return cipher.encryptor().update(data)


def open_master(key_file: bytes, password: bytes) -> tuple[bytes, dict]:
    """The master key JSON sealed in ``key_file`` (bytes as restic wrote them) and the file's other fields."""
    try:
        fields = json.loads(key_file)
        if not isinstance(fields, dict) or fields.get("kdf") != "scrypt":
            raise KeyError_("not a restic scrypt key file")
        salt, data = base64.b64decode(fields["salt"]), base64.b64decode(fields["data"])
        n, r, p = int(fields["N"]), int(fields["r"]), int(fields["p"])
    except (ValueError, KeyError, TypeError) as error:
        raise KeyError_(f"not a restic key file: {error}") from None
    if len(data) < 32 or n < 2 or n & (n - 1):
        raise KeyError_("not a restic key file: its data or its parameters are malformed")
    try:
        enc, k, mac_r = _derive(password.strip(), salt, n, r, p)  # restic trims the password file's whitespace
    except ValueError as error:  # parameters scrypt refuses (r=0, memory past its cap)
        raise KeyError_(f"the key's scrypt parameters cannot be used: {error}") from None
    nonce, ciphertext, tag = data[:16], data[16:-16], data[-16:]
    if not hmac.compare_digest(_mac(k, mac_r, nonce, ciphertext), tag):
        raise KeyError_("the password does not open this key (or the key file was changed)")
    return _ctr(enc, nonce, ciphertext), fields


def reseal(key_file: bytes, password: bytes, *, params: dict | None = None) -> Sealed:
    """``key_file``'s master key sealed again under ``params`` (default ``CHEAP``), with a new salt and IV;
    its user, host and creation time are kept."""
    master, fields = open_master(key_file, password)
    cost = params or CHEAP
    salt, nonce = os.urandom(SALT_BYTES), os.urandom(16)
    enc, k, mac_r = _derive(password.strip(), salt, cost["N"], cost["r"], cost["p"])
    ciphertext = _ctr(enc, nonce, master)
    data = nonce + ciphertext + _mac(k, mac_r, nonce, ciphertext)
    new = {
        **{f: fields[f] for f in ("created", "username", "hostname") if f in fields},
        "kdf": "scrypt", "N": cost["N"], "r": cost["r"], "p": cost["p"],
        "salt": base64.b64encode(salt).decode(), "data": base64.b64encode(data).decode(),
    }  # fmt: skip
    body = json.dumps(new).encode()
    return Sealed(name=hashlib.sha256(body).hexdigest(), data=body)


GENERATED = re.compile(rb"[A-Za-z0-9_-]{43,}")  # secrets.token_urlsafe(32): 43 characters of its alphabet


def generated(password: bytes) -> bool:
    """Whether ``password`` has the shape of one jackin generated (``secrets.token_urlsafe(32)``): only such
    a password may have its repository's key made cheap; a person's own password keeps restic's KDF."""
    return GENERATED.fullmatch(password.strip()) is not None


def is_cheap(key_file: bytes) -> bool:
    """Whether ``key_file`` already costs no more than ``CHEAP`` to open (nothing to do)."""
    try:
        fields = json.loads(key_file)
        return int(fields["N"]) * int(fields["r"]) * int(fields["p"]) <= CHEAP["N"] * CHEAP["r"] * CHEAP["p"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False
