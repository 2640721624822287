"""The instructor's signing key: made on first use, kept private, never printed."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

KEY_ENV = "COURSEKIT_KEY"
KEY_BYTES = 32


def default_key_path() -> Path:
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "coursekit" / "instructor.key"


def load_or_create_key(path: Path | None = None) -> bytes:
    """Read the key, or create it (mode 0600) if there is none yet."""
    path = Path(path) if path else default_key_path()
    if path.exists():
        key = bytes.fromhex(path.read_text().strip())
        if len(key) != KEY_BYTES:
            raise ValueError(f"The key file {path} is damaged (expected {KEY_BYTES} bytes).")
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(key.hex())
    return key
