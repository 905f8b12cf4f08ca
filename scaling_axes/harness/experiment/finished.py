"""An experiment's finished runs at one scale as the reports read them (`FinishedRuns`, the read side of
`schedule.Schedule`): their done.json at every seed, whether each still matches its declaration (`staleness`), where
each swept run's sweep stands, and the rate its claim seeds settled at (`settled_rate`).

    results = FinishedRuns(experiment, CPU, runs_dir).results()   # name -> done.json, as the table reads them
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from pathlib import Path

from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedExperiment
from scaling_axes.harness.experiment.tuning import fallback, tune
from scaling_axes.harness.names import parse_seed, parse_sweep, seed_glob, sweep_glob
from scaling_axes.harness.runs import (
    RUNS_DIR,
    Experiment,
    Run,
    at_plan_rate,
    check_sweep_point,
    find_run,
    run_dir,
    seed_run,
)
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.stability import instability, unstable_seeds
from scaling_axes.harness.sweeps import Choice, Point, Points, stable_run, sweep_point, tuned
from scaling_axes.harness.training.launch import LAUNCH_FIELDS, fingerprint_fields
from scaling_axes.harness.training.rundir import data_changed, read_done
from scaling_axes.harness.training.settings import read_config, recorded_differences
from scaling_axes.io import CorruptFileError

SweepDone = dict[tuple[float, int], dict]  # (rate, draw) -> the done.json of a finished sweep point


def as_points(finished: SweepDone) -> Points:
    """A sweep's finished points as it compares them: each draw's final loss and whether it was unstable, a spike
    the data order makes (`data_spikes`) not counted."""
    points: Points = {}
    shared = data_spikes(finished)
    for (lr, draw), done in sorted(finished.items()):
        why = instability({**done, "train_loss_spike": None} if (lr, draw) in shared else done)
        points.setdefault(lr, {})[draw] = Point(done.get("val_loss"), why)
    return points


def data_spikes(finished: SweepDone, within: int = 2) -> set[tuple[float, int]]:
    """The points whose largest training-loss spike the same draw (the same data order) also has, within `within`
    steps, at a lower rate: a batch of that order is hard, whatever the rate (issue 83's pilot: every second draw of
    one sweep peaked at step 1348, 0.70-0.82 nats, at each of six rates), so the spike says nothing of stability. The
    witness is a lower rate, so two rates unstable at one hard batch cannot excuse each other (nor the lowest)."""
    steps = {key: (done.get("train_loss_spike") or {}).get("step") for key, done in finished.items()}
    return {
        (lr, draw)
        for (lr, draw), step in steps.items()
        if step is not None
        and any(o < lr and d == draw and s is not None and abs(s - step) <= within for (o, d), s in steps.items())
    }


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


@dataclasses.dataclass(frozen=True)
class FinishedRuns:
    """`experiment`'s finished runs at `scale` in `runs_dir`. With `train` (a launch of one run), `tuning` and
    `settled_rate` train what they still need; without, they go as far as the finished runs on disk. `points_read`
    keeps each sweep's points once read (where nothing trains meanwhile: `results`)."""

    experiment: Experiment
    scale: Scale
    runs_dir: Path = RUNS_DIR
    points_read: dict[str, SweepDone] | None = dataclasses.field(default=None, compare=False, repr=False)
    fresh: frozenset[int] = frozenset()  # a plan's fresh seeds: its confirmatory runs', never read as the pilot's
    fall_back: bool = True  # claim seeds that trained unstably move below the sweep's choice (`fallback_for`)

    def run_dir(self, run: Run) -> Path:
        return run_dir(self.experiment, self.scale, run, self.runs_dir)

    def sweep_points(self, run: Run) -> SweepDone:
        """(rate, draw) -> done.json of `run`'s finished sweep points."""
        if self.points_read is not None and run.name in self.points_read:
            return self.points_read[run.name]
        points = {}
        for path in self.run_dir(run).parent.glob(f"{sweep_glob(run.name)}/done.json"):
            point = parse_sweep(path.parent.name)
            if not point or point[0] != run.name or not self.declared_point(run, *point[1:]):
                continue
            if (done := _read_finished(path, path.parent.name)) is not None:
                points[point[1:]] = done
        if self.points_read is not None:
            self.points_read[run.name] = points
        return points

    def declared_point(self, run: Run, lr: float, draw: int) -> bool:
        """Whether `run`'s sweep can train this point; a directory it cannot (made by hand, planted) is never read:
        it would move the sweep off its grid, or stop it."""
        try:
            check_sweep_point(self.experiment, self.scale, run, lr, draw)
        except KeyError as error:
            print(f"ignored: {error.args[0]}")
            return False
        return True

    def tuning(self, run: Run, train: Callable[[Run], None] | None = None) -> Choice:
        """Where `run`'s sweep stands, training its next points with `train` until it has chosen."""
        return tune(
            run,
            lambda r: as_points(self.sweep_points(r)),
            lambda name: find_run(self.experiment, self.scale, name),
            train,
        )

    def settled_rate(self, run: Run, seeds: int = 1, train: Callable[[Run], None] | None = None) -> Settled | None:
        """`run` (as declared, with its sweep) where its claim seeds settle: at the sweep's choice unless one of them
        trained unstably there (`stability.unstable_seeds`), then at each `fallback` rate below in turn (a grown
        stage stays at its chain's rate, which its head's sweep chose: its spikes are flagged). With `train`, trains
        its `seeds` claim seeds at each rate and the points a fallback needs; without `self.fall_back`, its claim
        seeds at the sweep's choice however they trained. None: the sweep has not chosen."""
        choice = self.tuning(run, train)
        if choice.lr is None:
            return None
        settled = Settled(tuned(run, choice.lr), choice.lr, {}, choice)
        while True:
            by_seed = self.seeds(settled.run)
            if train is not None and (missing := [k for k in range(1, seeds + 1) if k not in by_seed]):
                for k in missing:  # the finished ones are read once, not trained (and their weights hashed) again
                    train(seed_run(settled.run, k))
                by_seed = self.seeds(settled.run)
            settled = dataclasses.replace(settled, seeds=by_seed)
            if not self.fall_back or run.grow_from is not None or not (why := unstable_seeds(settled.seeds)):
                return settled  # (a grown stage keeps its chain's rate, which its head's sweep chose)
            unstable_at = {**settled.unstable_at, settled.lr: list(why.values())}
            lower = fallback(run.sweep, as_points(self.sweep_points(run)), unstable_at)
            while lower.next is not None and train is not None:
                train(sweep_point(run, lower.next))
                lower = fallback(run.sweep, as_points(self.sweep_points(run)), unstable_at)
            if lower.lr is None:
                return settled
            following = stable_run(run, lower.lr)
            if train is None and not self.seeds(following):
                return settled
            settled = Settled(following, lower.lr, {}, choice, unstable_at, lower.at_edge)

    def seeds(self, run: Run, only: Collection[int] | None = None) -> dict[int, dict]:
        """k -> done.json of `run`'s finished claim seeds (1: the run itself, k: `<run>_seed<k>`), each marked
        `stale` where it no longer matches its declaration; `only`: those seeds, else every one but a plan's fresh
        seeds (`fresh`), which belong to its confirmatory runs."""
        if only is None:
            found = {
                parse_seed(path.parent.name)
                for path in self.run_dir(run).parent.glob(f"{seed_glob(run.name)}/done.json")
            }
            only = {1} | {k for base, k in found if base == run.name and k >= 2} - set(self.fresh)
        out = {}
        for k in sorted(only):
            where = self.run_dir(seed_run(run, k))
            if (done := _read_finished(where / "done.json", where.name)) is not None:
                out[k] = _with_staleness(done, seed_run(run, k), where)
        return out

    def results(self, planned: PlannedExperiment | None = None) -> dict[str, dict]:
        """name -> done.json of the finished runs, each with `seed_runs` {k: done.json} of its finished repeats at
        further seeds (`--seeds`); a broken done.json is skipped with a line saying why. A swept run is read where
        its claim seeds settled (`settled_rate`), with its sweep's `Choice` (`tuning`) and any fallback below it
        (`stable_fallback`); its finished sweep points are results of their own. With `planned` (a plan's
        experiment): its arms alone, at its fresh seeds and its fixed rates (`confirmatory`)."""
        if planned is not None:
            return self.confirmatory(planned)
        if self.points_read is None:  # each sweep's points read once, an anchor's too
            return dataclasses.replace(self, points_read={}).results()
        results = {}
        for run in self.experiment.runs(self.scale):
            settled = None
            if run.sweep is not None:
                swept = self.sweep_points(run)
                results |= {sweep_point(run, lr, draw).name: done for (lr, draw), done in swept.items()}
                if (settled := self.settled_rate(run)) is None:
                    continue
            by_seed = settled.seeds if settled else self.seeds(run)
            if 1 not in by_seed:
                continue
            repeats = {k: done for k, done in by_seed.items() if k > 1}
            results[run.name] = {**by_seed[1], "seed_runs": repeats} if repeats else by_seed[1]
            if settled is not None:
                results[run.name] = {**results[run.name], **_tuning(run, settled)}
        return with_refuted_transfers(results)

    def confirmatory(self, planned: PlannedExperiment) -> dict[str, dict]:
        """name -> done.json of each planned arm at its first finished fresh seed (`seed_index`), with `seed_runs`
        {k: done.json} of the others; each at the plan's fixed rate, marked `stale` where it trained otherwise."""
        results = {}
        for name, lr in planned.arms.items():
            run = at_plan_rate(find_run(self.experiment, self.scale, name), lr)
            found = self.seeds(run, planned.seeds)
            if found:
                first, *others = found
                results[name] = {**found[first], "seed_index": first, "seed_runs": {k: found[k] for k in others}}
        return results


def _tuning(run: Run, settled: Settled) -> dict:
    """What a swept run's results say of its rate: the sweep's choice (`tuning`), the rule it was carried by, and
    where its claim seeds fell back below it."""
    rule = f"the lr of {run.sweep.anchor}'s sweep ({run.sweep.rule})" if run.sweep.anchor else ""
    fell = {"lr": settled.lr, "unstable_at": settled.unstable_at, "at_edge": settled.at_edge}
    return {
        "tuning": settled.choice,
        "tuning_rule": rule,
        "tuning_anchor": run.sweep.anchor,
        **({"stable_fallback": fell} if settled.unstable_at else {}),
    }


def with_refuted_transfers(results: dict[str, dict]) -> dict[str, dict]:
    """Each run whose lr was carried from an anchor that a checked size of the same family refutes (there the
    one of its neighbours beats the carried lr beyond one draw's noise) names that size as `transfer_refuted`."""
    refuted = {
        done["tuning_anchor"]: name
        for name, done in results.items()
        if done.get("tuning_anchor") and done["tuning"].carried_best is False
    }
    return {
        name: {**done, "transfer_refuted": refuted[done["tuning_anchor"]]}
        if done.get("tuning_anchor") in refuted
        else done
        for name, done in results.items()
    }


def _with_staleness(done: dict, run: Run, out: Path) -> dict:
    """`done` with `stale` (what changed) when the run in `out` was trained with other settings than `run` declares
    now, or on other data than its corpus holds now: a changed preset, budget or corpus makes its numbers someone
    else's."""
    stale = "; ".join(
        filter(None, (staleness(run, out), data_changed(out) if (out / "config.json").exists() else None))
    )
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


def fallback_for(plan: AnalysisPlan | None) -> bool:
    """Whether claim seeds that trained unstably move below their sweep's choice: under a plan that vetoes on
    stability (issue 73's), as before; under one that keeps every seed (issue 83's `stability_veto: false`) never,
    for its rate is the sweep's choice and a spike a reported property of the arm (one batch that spikes at every
    rate, a property of the data order, would walk a fallback down the grid)."""
    return plan is None or plan.rules.stability_veto
