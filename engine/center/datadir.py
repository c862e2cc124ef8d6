"""The Center's data directory (docs/center.md): owner-only files, role and generation, keys.

```
DIR/store/          the hosted store (SQLite), unless --store names a PostgreSQL database
DIR/members.json    named grants (0600; engine/center/members.py)
DIR/admin.token     the admin bearer token (0600), written at first start
DIR/center.key      the Ed25519 signing key, sealed by a key derived from the operator password
DIR/center.json     role (primary | standby), credential generation, primary URL (standby)
```

Files holding a credential are written through a temporary file and ``os.replace`` with mode
0600, and checked at every start: a file others can read or write is refused (the operator
fixes the mode; we never "repair" a file someone else may already have read).
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from engine.crypto.aead import AeadError, open_sealed, seal
from engine.crypto.canonical import canonical_bytes, decode_canonical
from engine.crypto.kdf import KdfParams, calibrate, derive_key
from engine.crypto.keys import fingerprint
from engine.errors import MemoriesError

__all__ = [
    "CenterDir",
    "CenterRole",
    "check_owner_only",
    "write_private",
    "SealedKey",
    "ADMIN_TOKEN_PREFIX",
]

ADMIN_TOKEN_PREFIX = "mca_"  # noqa: S105 (a public prefix)
_KEY_AAD = b"memories.center.key\x00\x01"


def check_owner_only(path: Path, what: str) -> None:
    """Refuse a credential file that is not a regular file owned by us with mode 0600 or less."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise MemoriesError("not_found", f"{what} ({path.name}) is missing from the Center's data directory.") from None
    if not stat.S_ISREG(info.st_mode):
        raise MemoriesError("permission_denied", f"{what} ({path.name}) is not a regular file; the Center did not start.")
    if info.st_mode & 0o077 or (hasattr(os, "getuid") and info.st_uid != os.getuid()):
        raise MemoriesError(
            "permission_denied",
            f"{what} ({path.name}) must be owner-only (chmod 600, owned by the Center's user); the Center did not start.",
        )


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` as an owner-only file, atomically (temporary file, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@dataclass
class CenterRole:
    """center.json: not secret (no key or token), but only the Center writes it."""

    role: str = "primary"  # primary | standby
    generation: int = 1
    primary: str | None = None  # a standby's primary URL
    public_key: str | None = None  # base64 of the Ed25519 public key, once it exists
    fenced: bool = False  # a primary told that a standby took over (refuses everything)

    @classmethod
    def from_json(cls, data: Any) -> CenterRole:
        if not isinstance(data, dict):
            raise ValueError("center.json is not an object")
        role = data.get("role", "primary")
        generation = data.get("generation", 1)
        if role not in ("primary", "standby") or not isinstance(generation, int) or generation < 1:
            raise ValueError("center.json has an invalid role or generation")
        primary = data.get("primary")
        public = data.get("public_key")
        return cls(
            role=role,
            generation=generation,
            primary=primary if isinstance(primary, str) else None,
            public_key=public if isinstance(public, str) else None,
            fenced=data.get("fenced") is True,
        )


@dataclass(frozen=True)
class SealedKey:
    """center.key: the signing key's seed under a key derived from the operator password."""

    public: bytes
    kdf: KdfParams
    sealed: bytes

    @classmethod
    def create(cls, password: str, signing_key: SigningKey | None = None) -> tuple[SealedKey, SigningKey]:
        key = signing_key or SigningKey.generate()
        public = bytes(key.verify_key)
        kdf = calibrate()
        sealed = seal(derive_key(password, kdf), bytes(key), _KEY_AAD + public)
        return cls(public, kdf, sealed), key

    def open(self, password: str) -> SigningKey:
        try:
            seed = open_sealed(derive_key(password, self.kdf), self.sealed, _KEY_AAD + self.public)
        except AeadError:
            raise MemoriesError("wrong_password") from None
        key = SigningKey(seed)
        if bytes(key.verify_key) != self.public:
            raise MemoriesError("store_corrupt", "center.key does not hold the key it names.")
        return key

    def to_bytes(self) -> bytes:
        return canonical_bytes({"v": 1, "public": self.public, "kdf": self.kdf.to_dict(), "sealed": self.sealed})

    @classmethod
    def from_bytes(cls, data: bytes) -> SealedKey:
        try:
            obj = decode_canonical(data)
            if not isinstance(obj, dict) or obj.get("v") != 1:
                raise ValueError("version")
            public, sealed = obj["public"], obj["sealed"]
            if not isinstance(public, bytes) or len(public) != 32 or not isinstance(sealed, bytes):
                raise ValueError("fields")
            return cls(public, KdfParams.from_dict(obj["kdf"]), sealed)
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise MemoriesError("store_corrupt", "center.key is damaged.") from None


class CenterDir:
    """Paths and the owner-only files of one Center data directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    @property
    def members_file(self) -> Path:
        return self.root / "members.json"

    @property
    def admin_token_file(self) -> Path:
        return self.root / "admin.token"

    @property
    def key_file(self) -> Path:
        return self.root / "center.key"

    @property
    def role_file(self) -> Path:
        return self.root / "center.json"

    @property
    def access_log(self) -> Path:
        return self.root / "access.log"

    def prepare(self) -> None:
        """First start: the directory (0700), the admin token, an empty members.json, center.json.

        Every later start checks the owner-only files instead (a wrong mode is refused)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store_dir.mkdir(exist_ok=True, mode=0o700)
        if not self.admin_token_file.exists():
            write_private(self.admin_token_file, (ADMIN_TOKEN_PREFIX + secrets.token_urlsafe(32) + "\n").encode("ascii"))
        if not self.members_file.exists():
            write_private(self.members_file, b'{"v": 1, "grants": []}\n')
        if not self.role_file.exists():
            self.save_role(CenterRole())
        self.check()

    def check(self) -> None:
        check_owner_only(self.members_file, "The members file")
        check_owner_only(self.admin_token_file, "The admin token")
        if self.key_file.exists():
            check_owner_only(self.key_file, "The Center key")

    def admin_token(self) -> str:
        return self.admin_token_file.read_text("ascii").strip()

    def admin_token_ok(self, presented: str) -> bool:
        try:
            return hmac.compare_digest(presented.encode("ascii"), self.admin_token().encode("ascii"))
        except UnicodeEncodeError:
            return False

    def load_role(self) -> CenterRole:
        try:
            return CenterRole.from_json(json.loads(self.role_file.read_text("utf-8")))
        except (OSError, ValueError) as exc:
            raise MemoriesError("invalid_input", f"center.json could not be read ({type(exc).__name__}).") from None

    def save_role(self, role: CenterRole) -> None:
        write_private(self.role_file, (json.dumps(asdict(role), indent=1, sort_keys=True) + "\n").encode("utf-8"))

    def sealed_key(self) -> SealedKey | None:
        if not self.key_file.exists():
            return None
        return SealedKey.from_bytes(self.key_file.read_bytes())

    def save_key(self, sealed: SealedKey) -> None:
        write_private(self.key_file, sealed.to_bytes())


def public_key_text(public: bytes) -> str:
    return base64.b64encode(public).decode("ascii")


def key_fingerprint(public: bytes) -> str:
    return fingerprint(public)
