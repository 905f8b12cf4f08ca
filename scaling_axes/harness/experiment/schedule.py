"""An experiment's runs trained in order at one scale (`Schedule`): each swept run's sweep first (on seeds of its
own), a grown run's source before it, every run checked against its data budget, then each launched into its run's
life (`training.lifecycle.train`).

    schedule = Schedule.of(experiment, CPU, accelerator="cpu")   # the Trainer settings checked once
    done = schedule.train(schedule.at_chosen_rate(run))
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from scaling_axes.datamodules.corpora import default_data_root
from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedExperiment
from scaling_axes.harness.experiment.finished import FinishedRuns, fallback_for
from scaling_axes.harness.names import parse_seed
from scaling_axes.harness.runs import RUNS_DIR, Experiment, Run, at_plan_rate, find_run, passes
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import tuned
from scaling_axes.harness.training.identical import identity, link_identical, record_identity
from scaling_axes.harness.training.launch import Launch, check_options, resolve
from scaling_axes.harness.training.settings import changes_or_unreadable
from scaling_axes.io import check_within


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One experiment at one scale, trained into `runs_dir` with one set of Trainer `options` (checked once, by
    `of`): `force_new` moves a run directory started with other settings aside (the runs named, never their sweeps
    or sources), `allow_repeats` trains runs past their data budget (their rows then marked)."""

    experiment: Experiment
    scale: Scale
    runs_dir: Path = RUNS_DIR
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    force_new: bool = False
    allow_repeats: bool = False
    planned: PlannedExperiment | None = None  # a plan's confirmatory runs: its arms at fixed rates, no sweep
    plan_digest: str = ""  # recorded by every run it trains
    fall_back: bool = True  # `finished.fallback_for` its plan

    @classmethod
    def of(
        cls,
        experiment: Experiment,
        scale: Scale,
        runs_dir: Path = RUNS_DIR,
        force_new: bool = False,
        allow_repeats: bool = False,
        plan: AnalysisPlan | None = None,
        **options: Any,
    ) -> Schedule:
        """The schedule with its Trainer `options` checked (a refused launch stops here, before any run); with
        `plan`, its confirmatory runs of this experiment (none planned: the pilot's)."""
        planned = plan.experiments.get(experiment.name) if plan else None
        digest = plan.digest if plan else ""
        options = check_options(options)
        return cls(
            experiment, scale, Path(runs_dir), options, force_new, allow_repeats, planned, digest, fallback_for(plan)
        )

    def train(self, run: Run) -> dict:
        """Train `run` to its budget (resuming if interrupted) and return its done.json record: past its data
        budget it stops first (`data_epochs`); grown, its source trains first, at the rate its sweep chooses."""
        check_within(self.run_dir(run), self.runs_dir.parent)  # the run's folder and those above it, to the out-dir
        epochs = data_epochs(self.experiment, self.scale, run, self.allow_repeats)
        past = epochs if epochs is not None and epochs > epoch_limit(self.experiment, self.scale) else None
        launch = resolve(
            run,
            self.run_dir(run),
            self.options,
            checked=True,
            experiment=self.experiment,
            scale=self.scale,
            force_new=self.force_new,
            data_epochs=past,
            labels={
                "experiment": self.experiment.name,
                "scale": self.scale.name,
                **({"plan": self.plan_digest} if self.plan_digest else {}),
            },
        )
        # here, not above: a plan reads schedules, needing no Trainer
        from scaling_axes.harness.training import lifecycle

        same = identity(launch)  # computed once: a grown run's walks its growth chain
        if (shared := link_identical(launch, same)) is not None:
            print(f"run {run.name}: declared identically by another experiment and trained once, in {shared}; linked")
        if run.grow_from is not None and not self.finished(launch):
            launch = dataclasses.replace(launch, source=self.trained_source(run))
        return record_identity(launch, same, lifecycle.train(launch))

    def finished(self, launch: Launch) -> bool:
        """Whether the launch's directory holds its finished run (and keeps it: --force-new moves one started with
        other settings aside)."""
        done = (launch.out / "done.json").exists()
        return done and not (launch.force_new and changes_or_unreadable(launch.out, launch.fingerprint))

    def trained_source(self, run: Run) -> tuple[Run, Path]:
        """The run `run` grows from, at the rate its sweep chooses, trained (never moved aside), and its final
        weights, verified."""
        from scaling_axes.harness.training.growth import source_weights

        source = self.at_chosen_rate(find_run(self.experiment, self.scale, run.grow_from))
        if not (self.run_dir(source) / "done.json").exists():
            dataclasses.replace(self, force_new=False).train(source)
        return source, source_weights(self.run_dir(source), run)

    def at_chosen_rate(self, run: Run) -> Run:
        """`run` at the rate its sweep chooses, training the sweep's points until it has; a run without a sweep as
        it is; a plan's arm (at any seed) at the rate the plan fixed, its sweep never trained."""
        base = parse_seed(run.name)[0]
        if self.planned is not None and base in self.planned.arms:
            return at_plan_rate(run, self.planned.arms[base])
        if run.sweep is None:
            return run
        points = dataclasses.replace(self, force_new=False)
        return tuned(run, self.finished_runs.tuning(run, points.train).lr)

    @property
    def finished_runs(self) -> FinishedRuns:
        """What of this schedule's runs its directory holds finished."""
        return FinishedRuns(self.experiment, self.scale, self.runs_dir, fall_back=self.fall_back)

    def run_dir(self, run: Run) -> Path:
        return self.finished_runs.run_dir(run)


def epoch_limit(experiment: Experiment, scale: Scale) -> float:
    """Passes a run may make: the experiment's own (the paper's repeats where it repeats data), at least the scale's
    `min_epoch_limit` (small: shrunk budgets on whatever corpus is there)."""
    return scale.epoch_limit(experiment.max_epochs)


def data_epochs(experiment: Experiment, scale: Scale, run: Run, allow_repeats: bool = False) -> float | None:
    """Passes `run` makes over its training data, its growth chain's passes over the same data included (a grown
    model has seen what its sources saw). Above `epoch_limit` it stops here with what to do, unless
    `allow_repeats`; a scale that does not check passes (smoke, a pipeline check) is exempt (None)."""
    if not scale.checks_epochs:
        return None
    try:
        epochs, what = chain_epochs(experiment, scale, run)
    except FileNotFoundError as unknown:  # a corpus downloaded on first use: its size is known once prepared
        print(f"run {run.name}: passes over its data not checked before the corpus is prepared ({unknown})")
        return None
    limit = epoch_limit(experiment, scale)
    if epochs > limit and not allow_repeats:
        raise SystemExit(
            f"run {run.name} would pass over {what} {epochs:.1f} times, above {experiment.name}'s limit of "
            f"{limit:g} at {scale} scale: its numbers would measure memorisation. Put the real corpus "
            f"under {default_data_root()}/ (see the README's Data section), shorten the run, or pass --allow-repeats "
            "to train it anyway (its result rows are then marked)"
        )
    return epochs


def chain_epochs(experiment: Experiment, scale: Scale, run: Run) -> tuple[float, str]:
    """(passes, what) of `run` and of every run it grows from that trained on the same data (corpus and
    tokenizer)."""
    epochs, what = passes(run)
    source, sources = run, []
    while source.grow_from:
        source = find_run(experiment, scale, source.grow_from)
        if (source.corpus, source.tokenizer, source.data) == (run.corpus, run.tokenizer, run.data):
            epochs += passes(source)[0]
            sources.append(source.name)
    return epochs, what + (f", cumulative over its growth chain ({', '.join(sources)})" if sources else "")
