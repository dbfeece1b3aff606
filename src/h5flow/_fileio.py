"""Small file helpers shared by the transports and the runner (no transport imports another's)."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (write a temporary file, fsync, rename).

    On failure (a full file system included) the temporary file is removed and ``path`` is unchanged.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
