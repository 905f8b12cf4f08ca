"""Atomic file writes: a temporary file in the same directory, then a rename, so readers see old or new, never half."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _temporary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def _replace_with(path: str | Path, write: Callable[[Path], None]) -> None:
    """`write` a temporary file, then rename it over `path`; on any failure the temporary file goes, `path` stays."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: str | Path, data: str | bytes) -> None:
    _replace_with(path, lambda tmp: tmp.write_bytes(data.encode() if isinstance(data, str) else data))


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    _replace_with(path, lambda tmp: torch.save(obj, tmp))
