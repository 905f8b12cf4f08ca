"""Finished runs as the reports read them: their done.json at every seed, whether each still matches its
declaration (`staleness`), and where each swept run's sweep stands."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from scaling_axes.harness.final import read_done
from scaling_axes.harness.runs import (
    LAUNCH_FIELDS,
    RUNS_DIR,
    SEED_SUFFIX,
    Experiment,
    Run,
    find_run,
    fingerprint_fields,
    read_config,
    recorded_differences,
    run_dir,
    seed_run,
)
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import instability
from scaling_axes.harness.sweeps import SWEEP_INFIX, Choice, Point, Points, parse_point, sweep_point, tune, tuned
from scaling_axes.io import CorruptFileError

SweepDone = dict[tuple[float, int], dict]  # (rate, draw) -> the done.json of a finished sweep point


def sweep_points(experiment: Experiment, scale: Scale, run: Run, runs_dir: Path = RUNS_DIR) -> SweepDone:
    """(rate, draw) -> done.json of `run`'s finished sweep points."""
    points = {}
    for path in run_dir(experiment, scale, run, runs_dir).parent.glob(f"{run.name}{SWEEP_INFIX}*/done.json"):
        point = parse_point(path.parent.name.removeprefix(f"{run.name}{SWEEP_INFIX}"))
        if point is not None and (done := _read_finished(path, path.parent.name)) is not None:
            points[point] = done
    return points


def as_points(finished: SweepDone) -> Points:
    """A sweep's finished points as it compares them: each draw's final loss and whether it was unstable."""
    points: Points = {}
    for (lr, draw), done in sorted(finished.items()):
        points.setdefault(lr, {})[draw] = Point(done.get("val_loss"), instability(done))
    return points


def tuning(
    experiment: Experiment,
    scale: Scale,
    run: Run,
    runs_dir: Path = RUNS_DIR,
    train: Callable[[Run], None] | None = None,
    read: Callable[[Run], SweepDone] | None = None,
) -> Choice:
    """Where `run`'s sweep stands on disk, training its next points with `train` until it has chosen (`read`: how
    a run's finished points are read, `sweep_points` unless given)."""
    read = read or (lambda r: sweep_points(experiment, scale, r, runs_dir))
    return tune(run, lambda r: as_points(read(r)), lambda name: find_run(experiment, scale, name), train)


def load_results(experiment: Experiment, scale: Scale, runs_dir: Path = RUNS_DIR) -> dict[str, dict]:
    """name -> done.json of the finished runs, each with `seed_runs` {k: done.json} of its finished repeats at
    further seeds (`--seeds`); a broken done.json is skipped with a line saying why. A swept run is read at the rate
    its sweep chose, with `tuning` (its `Choice`), and its finished sweep points are results of their own."""
    results, points = {}, {}

    def read(run: Run) -> SweepDone:  # each sweep's points read once, an anchor's too
        if run.name not in points:
            points[run.name] = sweep_points(experiment, scale, run, runs_dir)
        return points[run.name]

    for run in experiment.runs(scale):
        if run.sweep is not None:
            choice = tuning(experiment, scale, run, runs_dir, read=read)
            results |= {sweep_point(run, lr, draw).name: done for (lr, draw), done in read(run).items()}
            if choice.lr is None:
                continue
            run = tuned(run, choice.lr)
        out = run_dir(experiment, scale, run, runs_dir)
        if (done := _read_finished(out / "done.json", run.name)) is None:
            continue
        done = _with_staleness(done, run, out)
        seed_runs = {}
        for path in out.parent.glob(f"{run.name}{SEED_SUFFIX}*/done.json"):
            k = path.parent.name.removeprefix(f"{run.name}{SEED_SUFFIX}")
            if k.isdigit() and (repeat := _read_finished(path, path.parent.name)) is not None:
                seed_runs[int(k)] = _with_staleness(repeat, seed_run(run, int(k)), path.parent)
        results[run.name] = {**done, "seed_runs": dict(sorted(seed_runs.items()))} if seed_runs else done
        if run.sweep is not None:
            rule = f"the lr of {run.sweep.anchor}'s sweep ({run.sweep.rule})" if run.sweep.anchor else ""
            results[run.name] = {**results[run.name], "tuning": choice, "tuning_rule": rule,
                                 "tuning_anchor": run.sweep.anchor}  # fmt: skip
    return with_refuted_transfers(results)


def with_refuted_transfers(results: dict[str, dict]) -> dict[str, dict]:
    """Each run whose lr was carried from an anchor that a checked size of the same family refutes (there the
    one of its neighbours beats the carried lr beyond one draw's noise) names that size as `transfer_refuted`."""
    refuted = {done["tuning_anchor"]: name for name, done in results.items()
               if done.get("tuning_anchor") and done["tuning"].carried_best is False}  # fmt: skip
    return {name: {**done, "transfer_refuted": refuted[done["tuning_anchor"]]}
            if done.get("tuning_anchor") in refuted else done for name, done in results.items()}  # fmt: skip


def _with_staleness(done: dict, run: Run, out: Path) -> dict:
    """`done` with `stale` (what changed) when the run in `out` was trained with other settings than `run` declares
    now: a changed preset, budget or corpus makes its numbers someone else's."""
    stale = staleness(run, out)
    return {**done, "stale": stale} if stale else done


def staleness(run: Run, out: Path) -> str | None:
    """The fields in which `out`'s recorded fingerprint differs from `run` as declared now, with the trainer settings
    and micro-batch it was trained with (those are the launch's, not the code's), or why its recorded settings
    cannot be trusted (config.yaml missing, edited, its checksum gone); None when they agree or a run from before
    fingerprints recorded none."""
    if not (out / "config.yaml").exists():
        return None  # nothing recorded to compare (the hand-made runs of tests; every run of the suite has one)
    try:
        recorded = read_config(out)
    except (OSError, CorruptFileError) as error:  # settings that cannot be verified are no run's settings
        return f"its settings cannot be verified ({error})"
    if not isinstance(recorded.get("fingerprinted"), dict):
        return None
    micro = (recorded.get("budget") or {}).get("micro_batch")
    declared = dataclasses.replace(run, budget=dataclasses.replace(run.budget, micro_batch=micro))
    launch = {key: recorded["fingerprinted"].get(key) for key in LAUNCH_FIELDS}  # "auto" resolved where it trained
    now = {**fingerprint_fields(declared, recorded.get("trainer") or {}), **launch}
    return "; ".join(recorded_differences(recorded["fingerprinted"], now)[:5]) or None


def _read_finished(done: Path, name: str) -> dict | None:
    if not done.exists():
        return None
    try:
        return read_done(done)
    except (CorruptFileError, FileNotFoundError) as error:
        print(f"skipping run {name} in the report: {error}")
        return None
