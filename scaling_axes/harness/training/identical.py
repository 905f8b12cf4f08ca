"""One run, one directory: a run that two experiments declare identically (the same identity: its fingerprint, names
aside) trains once, and the second experiment's directory is a link to the first's. The index lives under the runs
folder (`runs/.identical/<scale>/<identity>`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scaling_axes.harness.runs import Run, find_run
from scaling_axes.harness.training.launch import Launch, fingerprint, fingerprint_fields
from scaling_axes.harness.training.settings import read_config
from scaling_axes.io import CorruptFileError, atomic_write

IDENTICAL = ".identical"  # runs/.identical/<scale>/<identity>: where the run of that identity finished


def record_identity(launch: Launch, same: str, done: dict) -> dict:
    """Note that the run of identity `same` (the launch's) finished in its directory (a real directory, not a link
    to one), with the fingerprint of the settings it trained with; a diverged sweep point is no run to share
    (declared plainly, the same settings stop with the error). Returns `done`."""
    runs_dir, out = launch.out.parents[2], launch.out
    index = runs_dir / IDENTICAL / launch.scale.name / same
    if not out.is_symlink() and not index.exists() and not done.get("diverged"):
        entry = {"run": str(out.relative_to(runs_dir)), "fingerprint": read_config(out).get("fingerprint")}
        atomic_write(index, json.dumps(entry))
    return done


def link_identical(launch: Launch, same: str) -> Path | None:
    """Where another experiment finished the run of identity `same` that the launch would train: its directory
    becomes a link to it (one run, one directory). None, and nothing done, where the directory exists or no such run
    finished; an index entry whose run no longer holds the settings it recorded (moved aside, retrained otherwise)
    is dropped."""
    out = launch.out
    if launch.force_new or os.path.lexists(out):
        return None
    runs_dir = out.parents[2]
    index = runs_dir / IDENTICAL / launch.scale.name / same
    if not index.exists():
        return None
    try:
        entry = json.loads(index.read_text())
        shared = runs_dir / entry["run"]
        current = read_config(shared).get("fingerprint") if (shared / "done.json").exists() else None
    except (ValueError, TypeError, KeyError, OSError, CorruptFileError):  # an older suite's or a damaged entry
        entry, shared, current = {}, None, None
    if current is None or current != entry.get("fingerprint"):
        index.unlink(missing_ok=True)
        return None
    if shared == out:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.symlink_to(os.path.relpath(shared, out.parent), target_is_directory=True)
    return shared


def forget_identity(out: Path) -> None:
    """A run directory moved aside (`--force-new`) is shared no more: the index entries naming it and the other
    experiments' links to it go (each of those runs trains again, or links to the new run once it finished)."""
    runs_dir, scale = out.parents[2], out.parent.name
    for index in (runs_dir / IDENTICAL / scale).glob("*"):
        try:
            named = runs_dir / json.loads(index.read_text())["run"]
        except (ValueError, TypeError, KeyError, OSError):
            named = None
        if named is None or named == out:
            index.unlink(missing_ok=True)
    for link in runs_dir.glob(f"*/{scale}/*"):
        if link.is_symlink() and (link.parent / os.readlink(link)).resolve() == out.resolve():
            link.unlink()


def identity(launch: Launch, run: Run | None = None) -> str:
    """What makes two declared runs one: their fingerprint without the names (`NAMES`), a grown run's with its
    source's identity in place of the source's name. Two experiments that declare the same run share it."""
    run = run or launch.run
    fields = fingerprint_fields(run, launch.options)
    del fields["run"]["name"], fields["run"]["grow_from"], fields["code"]  # one run whichever code trained it
    if run.grow_from:
        fields["source"] = identity(launch, find_run(launch.experiment, launch.scale, run.grow_from))
    return fingerprint(fields)
