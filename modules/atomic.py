"""Atomic file writes: a temporary file in the same directory, then a rename, so readers see old or new, never half."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def _temporary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


def atomic_write(path: str | Path, data: str | bytes) -> None:
    path = Path(path)
    tmp = _temporary(path)
    tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    path = Path(path)
    tmp = _temporary(path)
    torch.save(obj, tmp)
    os.replace(tmp, path)
