"""A run directory's lock: one process trains it at a time, and no cleanup can take the lock from under it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from scaling_axes.io import atomic_write


class DirectoryLock:
    """An OS lock on a run directory itself (`flock` on the directory), which no cleanup can delete while its holder
    lives: a `rm .*.lock` takes the lock file beside it, never this one. `hold` takes it on the directory now at
    `out` (again after --force-new moved the old one aside)."""

    def __init__(self, out: Path, owner: Path) -> None:
        self.out, self.owner, self.fd = out, owner, None

    def hold(self) -> None:
        self.release()
        self.out.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.out, os.O_RDONLY)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise SystemExit(
                f"run {self.out} is being trained by another process (its directory is locked, though "
                f"its lock file {self.owner.name.removesuffix('.owner')} is gone: deleted by a cleanup?); "
                "wait for it to finish or stop it"
            ) from None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[DirectoryLock | None]:
    """One process trains a run directory at a time (rank 0 of a job holds the lock; its other ranks are its own).
    The lock is an OS file lock beside the directory (`.<run>.lock`, naming its holder), and one on the directory
    itself (`DirectoryLock`), which a cleanup deleting the lock file cannot break; both are released when their
    holder dies, so a killed run's lock is simply taken over."""
    from lightning.pytorch.utilities import rank_zero_only  # here: reading a run needs no Lightning

    if rank_zero_only.rank != 0:
        yield None
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    lock, owner = FileLock(out.parent / f".{out.name}.lock"), out.parent / f".{out.name}.lock.owner"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = owner.read_text().strip() if owner.exists() else "another process"
        raise SystemExit(
            f"run {out} is being trained by {holder}; wait for it to finish or stop it (a second launch "
            "of the same run would clobber its checkpoints and logs)"
        ) from None
    directory = DirectoryLock(out, owner)
    try:
        directory.hold()
        atomic_write(owner, f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        yield directory
    finally:
        directory.release()
        owner.unlink(missing_ok=True)
        lock.release()
