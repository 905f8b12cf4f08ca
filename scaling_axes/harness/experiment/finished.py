"""Finished runs as the reports read them: their done.json at every seed, whether each still matches its
declaration (`staleness`), where each swept run's sweep stands, and the rate its claim seeds settled at
(`settled_rate`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from scaling_axes.harness.names import parse_seed, parse_sweep, seed_glob, sweep_glob
from scaling_axes.harness.runs import RUNS_DIR, Experiment, Run, find_run, run_dir, seed_run
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import instability, unstable_seeds
from scaling_axes.harness.sweeps import (
    Choice,
    Point,
    Points,
    fallback,
    stable_run,
    sweep_point,
    tune,
    tuned,
)
from scaling_axes.harness.training.launch import LAUNCH_FIELDS, fingerprint_fields
from scaling_axes.harness.training.record import read_done
from scaling_axes.harness.training.rundir import read_config, recorded_differences
from scaling_axes.io import CorruptFileError

SweepDone = dict[tuple[float, int], dict]  # (rate, draw) -> the done.json of a finished sweep point


def sweep_points(experiment: Experiment, scale: Scale, run: Run, runs_dir: Path = RUNS_DIR) -> SweepDone:
    """(rate, draw) -> done.json of `run`'s finished sweep points."""
    points = {}
    for path in run_dir(experiment, scale, run, runs_dir).parent.glob(f"{sweep_glob(run.name)}/done.json"):
        point = parse_sweep(path.parent.name)
        if point and point[0] == run.name and (done := _read_finished(path, path.parent.name)) is not None:
            points[point[1:]] = done
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


@dataclasses.dataclass(frozen=True)
class Settled:
    """Where a swept run's claim seeds settled: `run` at rate `lr` (its sweep's `choice`, or a `fallback` below it),
    their finished done.json at each seed, and each higher rate where they trained unstably, with why."""

    run: Run
    lr: float
    seeds: dict[int, dict]
    choice: Choice
    unstable_at: dict[float, list[str]] = dataclasses.field(default_factory=dict)
    at_edge: bool = False  # the fallback's best stable rate is the lowest it could try


def settled_rate(experiment: Experiment, scale: Scale, run: Run, runs_dir: Path = RUNS_DIR, seeds: int = 1,
                 train: Callable[[Run], None] | None = None, read: Callable[[Run], SweepDone] | None = None,
                 ) -> Settled | None:  # fmt: skip
    """`run` (as declared, with its sweep) where its claim seeds settle: at the sweep's choice unless one of them
    trained unstably there (`stability.unstable_seeds`), then at each `fallback` rate below in turn (a grown stage
    stays at its chain's rate, which its head's sweep chose: its spikes are flagged). With `train`, trains its
    `seeds` claim seeds at each rate and the points a fallback needs; without, goes as far as the finished runs on
    disk. None: the sweep has not chosen."""
    read = read or (lambda r: sweep_points(experiment, scale, r, runs_dir))
    choice = tuning(experiment, scale, run, runs_dir, train, read)
    if choice.lr is None:
        return None
    settled = Settled(tuned(run, choice.lr), choice.lr, {}, choice)
    while True:
        by_seed = finished_seeds(experiment, scale, settled.run, runs_dir)
        if train is not None and (missing := [k for k in range(1, seeds + 1) if k not in by_seed]):
            for k in missing:  # the finished ones are read once, not trained (and their weights hashed) again
                train(seed_run(settled.run, k))
            by_seed = finished_seeds(experiment, scale, settled.run, runs_dir)
        settled = dataclasses.replace(settled, seeds=by_seed)
        if not (why := unstable_seeds(settled.seeds)) or run.grow_from is not None:  # a stage: its chain's rate
            return settled
        unstable_at = {**settled.unstable_at, settled.lr: list(why.values())}
        lower = fallback(run.sweep, as_points(read(run)), unstable_at)
        while lower.next is not None and train is not None:
            train(sweep_point(run, lower.next))
            lower = fallback(run.sweep, as_points(read(run)), unstable_at)
        if lower.lr is None:
            return settled
        following = stable_run(run, lower.lr)
        if train is None and not finished_seeds(experiment, scale, following, runs_dir):
            return settled
        settled = Settled(following, lower.lr, {}, choice, unstable_at, lower.at_edge)


def finished_seeds(experiment: Experiment, scale: Scale, run: Run, runs_dir: Path = RUNS_DIR) -> dict[int, dict]:
    """k -> done.json of `run`'s finished claim seeds (1: the run itself, k: `<run>_seed<k>`), each marked `stale`
    where it no longer matches its declaration."""
    out, found = run_dir(experiment, scale, run, runs_dir), {}
    if (done := _read_finished(out / "done.json", run.name)) is not None:
        found[1] = _with_staleness(done, run, out)
    for path in out.parent.glob(f"{seed_glob(run.name)}/done.json"):
        base, k = parse_seed(path.parent.name)
        if base == run.name and k >= 2 and (repeat := _read_finished(path, path.parent.name)) is not None:
            found[k] = _with_staleness(repeat, seed_run(run, k), path.parent)
    return dict(sorted(found.items()))


def load_results(experiment: Experiment, scale: Scale, runs_dir: Path = RUNS_DIR) -> dict[str, dict]:
    """name -> done.json of the finished runs, each with `seed_runs` {k: done.json} of its finished repeats at
    further seeds (`--seeds`); a broken done.json is skipped with a line saying why. A swept run is read where its
    claim seeds settled (`settled_rate`), with its sweep's `Choice` (`tuning`) and any fallback below it
    (`stable_fallback`); its finished sweep points are results of their own."""
    results, points = {}, {}

    def read(run: Run) -> SweepDone:  # each sweep's points read once, an anchor's too
        if run.name not in points:
            points[run.name] = sweep_points(experiment, scale, run, runs_dir)
        return points[run.name]

    for run in experiment.runs(scale):
        settled = None
        if run.sweep is not None:
            results |= {sweep_point(run, lr, draw).name: done for (lr, draw), done in read(run).items()}
            if (settled := settled_rate(experiment, scale, run, runs_dir, read=read)) is None:
                continue
        by_seed = settled.seeds if settled else finished_seeds(experiment, scale, run, runs_dir)
        if 1 not in by_seed:
            continue
        repeats = {k: done for k, done in by_seed.items() if k > 1}
        results[run.name] = {**by_seed[1], "seed_runs": repeats} if repeats else by_seed[1]
        if settled is not None:
            results[run.name] = {**results[run.name], **_tuning(run, settled)}
    return with_refuted_transfers(results)


def _tuning(run: Run, settled: Settled) -> dict:
    """What a swept run's results say of its rate: the sweep's choice (`tuning`), the rule it was carried by, and
    where its claim seeds fell back below it."""
    rule = f"the lr of {run.sweep.anchor}'s sweep ({run.sweep.rule})" if run.sweep.anchor else ""
    fell = {"lr": settled.lr, "unstable_at": settled.unstable_at, "at_edge": settled.at_edge}
    return {"tuning": settled.choice, "tuning_rule": rule, "tuning_anchor": run.sweep.anchor,
            **({"stable_fallback": fell} if settled.unstable_at else {})}  # fmt: skip


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
