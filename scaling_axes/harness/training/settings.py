"""A run directory's settings: the config.yaml it was started with (its fingerprint and every commit that trained
it), compared field by field with a launch's and with its checkpoint's own record before a resume, and moved aside by
--force-new, never deleted."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from scaling_axes.checkout import source_commit
from scaling_axes.harness.runs import Run
from scaling_axes.harness.training.launch import NAMES, Launch, fingerprint
from scaling_axes.io import CorruptFileError, atomic_write, load_torch, verify_checksum

RUN_STATE = "scaling_axes"  # a checkpoint's own record: the run's settings and how far its metrics log went


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


def fingerprint_changes(out: Path, fields: dict[str, Any], tolerated: tuple[str, ...] = ()) -> list[str]:
    """The fields (`field: old -> new`) in which the run in `out` was started with other settings than `fields`;
    fields it did not record (it predates them) are not compared, nor is a run from before fingerprints, nor one that
    never reached a checkpoint (a launch stopped before training, by its data or its cluster: nothing of it is
    kept, so its config.yaml is replaced)."""
    if not (out / "config.yaml").exists() or not (
        (out / "checkpoints" / "last.ckpt").exists() or (out / "done.json").exists()
    ):
        return []
    recorded = read_config(out).get("fingerprinted") or {}
    return recorded_differences(recorded, fields, tolerated)


def check_fingerprint(out: Path, fields: dict[str, Any], tolerated: tuple[str, ...] = ()) -> None:
    """Stop if `out` holds a run started with other settings, naming each field that differs (but `tolerated`)."""
    if changes := fingerprint_changes(out, fields, tolerated):
        raise SystemExit(
            f"{out} holds a run started with other settings ({'; '.join(changes[:10])}). Rerun with its settings "
            f"to resume or keep it, or pass --force-new to move it aside and start over{_allowance_hint(changes)}"
        )


def _allowance_hint(changes: list[str]) -> str:
    hints = []
    if any(change.startswith("kernels:") for change in changes):
        hints.append("to resume on these kernels knowing it will not be the same run bitwise, --allow-other-kernels")
    if any(change.startswith("code:") for change in changes):
        hints.append(
            "to resume under this code (the commit that started it is in its config.yaml's trained_by) knowing it "
            "will not be the same run, --allow-other-code"
        )
    return "".join(f"; or, {hint}" for hint in hints)


def checkpoint_state(out: Path, fingerprinted: dict, tolerated: tuple[str, ...] = ()) -> dict | None:
    """The record (`RUN_STATE`) of `out`'s `checkpoints/last.ckpt`, verified, or None without one. Verified: that it
    opens as tensors and plain data (cheaply, memory-mapped; a crafted pickle is named as such), its checksum, and
    that the settings it records are `fingerprinted` (config.yaml may be damaged or edited; the checkpoint is
    checksummed). A broken one stops the run with what to do."""
    last = out / "checkpoints" / "last.ckpt"
    if not last.exists():
        return None
    fix = "delete it and rerun to start the run over (no earlier checkpoint is kept), or restore it from a copy"
    checkpoint = load_torch(last, fix, mmap=True)
    verify_checksum(last, fix)
    state = checkpoint.get(RUN_STATE) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not {"fingerprinted", "metrics_csv"} <= state.keys():
        raise CorruptFileError(f"{last} records no run settings (a checkpoint of an older suite); {fix}")
    if changes := recorded_differences(state["fingerprinted"], fingerprinted, tolerated):
        raise SystemExit(
            f"{last} was written by a run with other settings ({'; '.join(changes[:10])}). Rerun with "
            f"its settings to resume, or pass --force-new to move it aside and start over{_allowance_hint(changes)}"
        )
    return {**state, "global_step": int(checkpoint.get("global_step", 0))}  # where it resumes


def recorded_differences(recorded: dict, now: dict, tolerated: tuple[str, ...] = ()) -> list[str]:
    """`field: recorded -> now` for each recorded field that differs now, names (`NAMES`) and `tolerated` aside."""
    differences = _differences(recorded, {key: now.get(key) for key in recorded})
    return [f"{key}: {old!r} -> {new!r}" for key, old, new in differences if key not in (*NAMES, *tolerated)]


def _differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d
            for key in sorted(set(old) | set(new), key=str)
            for d in _differences(old.get(key), new.get(key), f"{prefix}{key}.")
        ]
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


def write_config(launch: Launch, run: Run, plans: list[str] | None = None) -> None:
    """config.yaml: `run` as it trains (grown: with the overrides growth set), the launch's options and fingerprint.
    Rank zero writes it (each rank's would differ in its time)."""
    from lightning.pytorch.utilities import rank_zero_only  # here: reading a run needs no Lightning

    if rank_zero_only.rank != 0:
        return
    config = {
        "run": {k: v for k, v in dataclasses.asdict(run).items() if k != "budget"},
        "budget": dataclasses.asdict(run.budget),
        "model_config": dataclasses.asdict(run.config),
        "model_class": type(run.config).__name__,
        "trainer": launch.options,
        "labels": launch.labels,  # the experiment, scale and analysis plan (its digest) it trains under
        "command": " ".join(sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "started": first_started(launch.out),  # its first launch's, kept when it resumes (seconds since the epoch)
        "fingerprint": fingerprint(launch.fingerprint),
        "fingerprinted": launch.fingerprint,
        "trained_by": [*trained_by(launch.out), {"commit": source_commit(), "code": launch.fingerprint.get("code")}],
        "plans": plans or [],  # every analysis plan it trained under (`checked_plans`)
    }
    atomic_write(launch.out / "config.yaml", yaml.safe_dump(config, sort_keys=False), checksum=True)


def first_started(out: Path) -> float:
    """When the run in `out` was first launched: its config.yaml's record, else now."""
    earlier = read_config(out).get("started") if (out / "config.yaml").exists() else None
    return float(earlier) if isinstance(earlier, (int, float)) else time.time()


def trained_by(out: Path) -> list[dict]:
    """Every commit (and code digest) that trained the run in `out` so far, as its config.yaml records them: a
    resume adds its own, so a run requeued after a `git pull` names both."""
    if not (out / "config.yaml").exists():
        return []
    try:
        return list(read_config(out).get("trained_by") or [])
    except (OSError, CorruptFileError):
        return []


def recorded_plans(out: Path) -> list[str]:
    """Every analysis plan (its digest) the run in `out` trained under so far, as its config.yaml records them (a
    config.yaml from before the list: the plan its labels name)."""
    if not (out / "config.yaml").exists():
        return []
    config = read_config(out)
    plans = config.get("plans")
    if plans is None:
        plans = [plan] if (plan := (config.get("labels") or {}).get("plan")) else []
    return [str(p) for p in plans]


def checked_plans(launch: Launch, resuming: bool) -> list[str]:
    """The plans the launch's run will have trained under, this launch's last (none: it trains under no plan; a run
    that starts over, with no checkpoint to resume, under none before). A resume under another plan than the run
    trained under stops, naming both digests, unless --allow-other-plan (then both are recorded, in its config.yaml
    and done.json, and its verdicts are `plan_changed`)."""
    earlier, now = recorded_plans(launch.out) if resuming else [], launch.labels.get("plan")
    if earlier and now not in earlier and not launch.options.get("other_plan"):
        raise SystemExit(
            f"{launch.out} holds a run trained under analysis plan {', '.join(earlier)}, and the plan now is "
            f"{now or '(none)'}: a plan changed while its runs trained decides nothing. Restore that plan to resume, "
            "or pass --allow-other-plan to go on (both digests recorded; its verdicts are `plan_changed`)"
        )
    return [*earlier, now] if now and now not in earlier else earlier


def changes_or_unreadable(out: Path, fields: dict[str, Any]) -> list[str]:
    """What --force-new moves a directory aside for: the settings it differs in, or why they cannot be compared; a
    finished run's code not among them (it is read whichever code reads it, so a --force-new for one changed run
    never retrains every finished run of the experiment because the suite's code moved on)."""
    tolerated = ("code",) if (out / "done.json").exists() else ()
    try:
        return fingerprint_changes(out, fields, tolerated)
    except CorruptFileError as error:
        return [str(error)]
