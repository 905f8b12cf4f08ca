"""A run's directory: the lock that lets one process train it (an OS file lock beside it), the check that it can
take files, and what it holds of the settings it was started with (config.yaml, compared field by field with the
launch's fingerprint; moved aside by --force-new, never deleted)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock, Timeout
from lightning.pytorch.utilities import rank_zero_only

from scaling_axes.harness.runs import Run
from scaling_axes.harness.training.launch import NAMES, Launch, fingerprint
from scaling_axes.io import CorruptFileError, atomic_write, check_directory, verify_checksum


def check_writable(out: Path) -> None:
    """Fail before any compute (and before its lock is taken) if the run's directories cannot take files."""
    for directory in (out, out / "checkpoints"):
        check_directory(directory, "--out-dir")


@contextlib.contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """One process trains a run directory at a time (rank 0 of a job holds the lock; its other ranks are its own).
    The lock is an OS file lock beside the directory (`.<run>.lock`), so it holds while --force-new moves the
    directory aside, and is released when its holder dies, so a killed run's lock is simply taken over."""
    if rank_zero_only.rank != 0:
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
    try:
        atomic_write(owner, f"{socket.gethostname()} pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def read_config(out: Path) -> dict:
    """`out`'s config.yaml, verified against its checksum, or an error naming it and the fix when it is damaged,
    edited or not the mapping the suite writes."""
    path, fix = out / "config.yaml", "restore it, or pass --force-new to move the run aside and start over"
    verify_checksum(path, fix)
    try:
        config = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        first = str(error).splitlines()[0]
        raise CorruptFileError(f"{path} is not readable YAML ({first}); {fix}") from error
    if not isinstance(config, dict) or not isinstance(config.get("fingerprinted", {}), dict):
        raise CorruptFileError(f"{path} is not a run's config.yaml (no mapping of its settings); {fix}")
    return config


def fingerprint_changes(out: Path, fields: dict[str, Any]) -> list[str]:
    """The fields (`field: old -> new`) in which the run in `out` was started with other settings than `fields`;
    fields it did not record (it predates them) are not compared, nor is a run from before fingerprints, nor one that
    never reached a checkpoint (a launch stopped before training, by its data or its cluster: nothing of it is
    kept, so its config.yaml is replaced)."""
    if not (out / "config.yaml").exists() or not ((out / "checkpoints" / "last.ckpt").exists()
                                                   or (out / "done.json").exists()):  # fmt: skip
        return []
    recorded = read_config(out).get("fingerprinted") or {}
    return recorded_differences(recorded, fields)


def check_fingerprint(out: Path, fields: dict[str, Any]) -> None:
    """Stop if `out` holds a run started with other settings, naming each field that differs."""
    if changes := fingerprint_changes(out, fields):
        raise SystemExit(
            f"{out} holds a run started with other settings ({'; '.join(changes[:10])}). Rerun with its settings "
            "to resume or keep it, or pass --force-new to move it aside and start over"
        )


def recorded_differences(recorded: dict, now: dict) -> list[str]:
    """`field: recorded -> now` for each recorded field that differs now, names aside (`NAMES`)."""
    differences = _differences(recorded, {key: now.get(key) for key in recorded})
    return [f"{key}: {old!r} -> {new!r}" for key, old, new in differences if key not in NAMES]


def _differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for key in sorted(set(old) | set(new), key=str)
                for d in _differences(old.get(key), new.get(key), f"{prefix}{key}.")]  # fmt: skip
    return [] if old == new else [(prefix.rstrip("."), old, new)]


def move_aside(out: Path, changes: list[str]) -> Path | None:
    """--force-new: the old run directory (started with other settings: `changes`) is renamed, never overwritten;
    the run starts over in a fresh one."""
    if not out.exists():
        return None
    aside = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    out.rename(aside)
    print(f"moved the earlier run {out} ({'; '.join(changes[:3])}) aside to {aside}; starting over")
    return aside


def write_config(launch: Launch, run: Run) -> None:
    """config.yaml: `run` as it trains (grown: with the overrides growth set), the launch's options and fingerprint."""
    config = {
        "run": {k: v for k, v in dataclasses.asdict(run).items() if k != "budget"},
        "budget": dataclasses.asdict(run.budget),
        "model_config": dataclasses.asdict(run.config),
        "model_class": type(run.config).__name__,
        "trainer": launch.options,
        "command": " ".join(sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "fingerprint": fingerprint(launch.fingerprint),
        "fingerprinted": launch.fingerprint,
    }
    atomic_write(launch.out / "config.yaml", yaml.safe_dump(config, sort_keys=False), checksum=True)


def changes_or_unreadable(out: Path, fields: dict[str, Any]) -> list[str]:
    """What --force-new moves a directory aside for: the settings it differs in, or why they cannot be compared."""
    try:
        return fingerprint_changes(out, fields)
    except CorruptFileError as error:
        return [str(error)]
