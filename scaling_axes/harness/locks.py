"""One process per run directory: the run's lock (an OS file lock beside it) and the writability check that comes
before it."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout
from lightning.pytorch.utilities import rank_zero_only

from scaling_axes.io import atomic_write, check_directory


def check_writable(out: Path) -> None:
    """Fail before any compute (and before its lock is taken) if the run's directories cannot take files."""
    for directory in (out, out / "checkpoints"):
        check_directory(directory, "--out-dir")


_HELD: set[Path] = set()  # run directories whose lock this process holds (the runner's and train_run's nest)


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """One process trains a run directory at a time (rank 0 of a job holds the lock; its other ranks are its own).
    The lock is an OS file lock beside the directory (`.<run>.lock`), so it holds while --force-new moves the
    directory aside, and is released when its holder dies, so a killed run's lock is simply taken over."""
    key = out.resolve()
    if rank_zero_only.rank != 0 or key in _HELD:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    lock, owner = FileLock(out.parent / f".{out.name}.lock"), out.parent / f".{out.name}.lock.owner"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = owner.read_text().strip() if owner.exists() else "another process"
        raise SystemExit(f"run {out} is being trained by {holder}; wait for it to finish or stop it (a second launch "
                         "of the same run would clobber its checkpoints and logs)") from None  # fmt: skip
    _HELD.add(key)
    try:
        atomic_write(owner, f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        yield
    finally:
        _HELD.discard(key)
        owner.unlink(missing_ok=True)
        lock.release()
