"""The cost model a registration fixes (issue 83): each arm's throughput measured on this machine, one thread, over
`MEASURED_STEPS` steps of its own model, batch and optimiser with its scale's final evaluation
(`results/<scale>/cost/throughput.csv`, checksummed), and every planned run priced from it: the pilot exactly (its
sweeps' planned points and the claim runs at the pilot's seeds), the confirmatory stage at the plan's seed ceiling.
Experiments are priced in the plan's priority order against its budget; one the remainder cannot pay for is
`out_of_budget` as a whole, never trained in part.

    python -m scaling_axes cost --scale cpu --measure   # train each arm's probe, write throughput.csv
    python -m scaling_axes cost --scale cpu             # the priced plan, from the committed throughput

Both take the plan's `cost:` (its priority and budget); before a plan names one, `--experiments a,b` (in priority
order) and `--budget-hours` stand in for them.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from scaling_axes.harness.results import RESULTS_DIR
from scaling_axes.harness.runs import Experiment, Run, default_runs
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import planned_points, sweep_point

MEASURED_STEPS = 50
COLUMNS = ("experiment", "arm", "model", "steps", "seconds_per_step", "fixed_seconds", "machine")


COST_FREE = ("lr", "group_lr_scale", "betas")  # settings of a run's optimiser that change no step's work


def arm_key(run: Run) -> str:
    """What a run's step costs: its model and overrides, batch, sequence and optimiser settings (never its rate,
    seed or AdamW's betas: `COST_FREE`)."""
    return _key(run.model, run.overrides, run.budget.batch_size, run.budget.seq_len, run.lm)


def _key(model: str, overrides: dict, batch: int, seq_len: int, lm: dict) -> str:
    lm = {k: v for k, v in lm.items() if k not in COST_FREE}
    return json.dumps([model, overrides, batch, seq_len, lm], sort_keys=True)


@dataclasses.dataclass(frozen=True)
class Throughput:
    """One arm as measured: seconds a training step, and seconds a run spends outside its steps (start-up and the
    final evaluation on the scale's splits). A run's curve validations are priced as forward passes over their
    windows, a third of a training step's work per token."""

    seconds_per_step: float
    fixed_seconds: float

    def run_seconds(self, run: Run) -> float:
        b = run.budget
        validations = b.steps // b.val_every if b.val_every else 0
        per_validation = (b.val_windows or 0) / (3 * b.batch_size) * self.seconds_per_step
        return self.fixed_seconds + b.steps * self.seconds_per_step + validations * per_validation


def measure(experiment: Experiment, scale: Scale, steps: int = MEASURED_STEPS) -> list[dict]:
    """Each distinct arm of `experiment` at `scale` trained `steps` steps, one thread, into a temporary folder."""
    import torch

    from scaling_axes.harness.experiment.schedule import Schedule

    torch.set_num_threads(1)
    rows, seen = [], set()
    with tempfile.TemporaryDirectory() as folder:
        for run in default_runs(experiment, scale):
            if (key := arm_key(run)) in seen:
                continue
            seen.add(key)
            warmup = min(run.budget.warmup_steps, steps // 5)
            budget = dataclasses.replace(
                run.budget, steps=steps, warmup_steps=warmup, val_every=None, checkpoint_every=steps
            )
            probe = dataclasses.replace(run, budget=budget, sweep=None, grow_from=None, grow_options={})
            done = Schedule.of(experiment, scale, Path(folder), accelerator="cpu").train(probe)
            per_step = done["train_seconds"] / done["steps"]
            rows.append(
                {
                    "experiment": experiment.name,
                    "arm": key,
                    "model": run.model,
                    "steps": steps,
                    "seconds_per_step": f"{per_step:.6g}",
                    "fixed_seconds": f"{done['wall_seconds_last_session'] - done['train_seconds']:.6g}",
                    "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, torch {torch.__version__}",
                }
            )
    return rows


def throughput_path(scale: Scale, results_dir: Path = RESULTS_DIR) -> Path:
    return Path(results_dir) / scale.name / "cost" / "throughput.csv"


def read_throughput(path: Path) -> dict[str, Throughput]:
    """arm key -> its measured throughput, from a committed file verified against its checksum (each row's key as
    `arm_key` writes it now: a setting found cost-free since it was measured dropped)."""
    import csv

    from scaling_axes.io import verify_checksum

    verify_checksum(path, f"measure again: python -m scaling_axes cost --scale {path.parent.parent.name} --measure")
    with open(path, newline="") as f:
        return {
            _key(*json.loads(r["arm"])): Throughput(float(r["seconds_per_step"]), float(r["fixed_seconds"]))
            for r in csv.DictReader(f)
        }


@dataclasses.dataclass(frozen=True)
class Priced:
    """An experiment's price in core-seconds: its pilot (sweep points and claim runs at the pilot's seeds) and its
    confirmatory stage (the claim runs at the seed ceiling), and the arms no measurement covers."""

    experiment: str
    pilot_seconds: float
    confirmatory_seconds: float
    unmeasured: tuple[str, ...] = ()
    runs: frozenset[str] = frozenset()  # group/run of each run it pays for (a run experiments share, priced once)

    @property
    def core_hours(self) -> float:
        return (self.pilot_seconds + self.confirmatory_seconds) / 3600


def price(
    experiment: Experiment,
    scale: Scale,
    measured: Mapping[str, Throughput],
    pilot_seeds: int,
    ceiling: int,
    paid: frozenset[str] = frozenset(),
) -> Priced:
    """`experiment` priced from `measured`: each sweep's planned points, each run at `pilot_seeds` seeds, then at
    `ceiling` seeds more (the confirmatory stage before the power analysis sets its seeds); a run an experiment
    priced before it shares (`paid`: group/run) is not paid again."""
    group = experiment.run_group or experiment.name
    runs = [r for r in default_runs(experiment, scale) if f"{group}/{r.name}" not in paid]
    points = [sweep_point(r, lr, draw) for r in runs if r.sweep for lr, draw in planned_points(r.sweep)]
    unmeasured = tuple(sorted({r.name for r in runs if arm_key(r) not in measured}))

    def cost(each: Sequence[Run], seeds: int = 1) -> float:
        return seeds * sum(measured[arm_key(r)].run_seconds(r) for r in each if arm_key(r) in measured)

    keys = frozenset(f"{group}/{r.name}" for r in runs)
    return Priced(experiment.name, cost(points) + cost(runs, pilot_seeds), cost(runs, ceiling), unmeasured, keys)


def price_in_order(
    experiments: Sequence[Experiment], scale: Scale, measured: Mapping[str, Throughput], pilot_seeds: int, ceiling: int
) -> list[Priced]:
    """Each of `experiments`, in priority order, priced (`price`); a run an earlier one shares is paid once."""
    priced, paid = [], frozenset()
    for experiment in experiments:
        priced.append(price(experiment, scale, measured, pilot_seeds, ceiling, paid))
        paid |= priced[-1].runs
    return priced


def in_budget(priced: Sequence[Priced], budget_hours: float) -> tuple[list[Priced], list[Priced]]:
    """(trained, out_of_budget): experiments in priority order, each kept while the budget's remainder pays for
    all of it; an experiment that does not fit is out as a whole, and the next, smaller one may still fit."""
    kept, out, left = [], [], budget_hours
    for each in priced:
        if each.core_hours <= left and not each.unmeasured:
            kept.append(each)
            left -= each.core_hours
        else:
            out.append(each)
    return kept, out


def measure_into(path: Path, experiments: Sequence[Experiment], scale: Scale, steps: int = MEASURED_STEPS) -> int:
    """Measure `experiments`' arms (`measure`) into the throughput file at `path`, keeping other experiments' rows
    as they were measured; returns how many arms it holds."""
    import csv

    from scaling_axes.io import write_csv

    names = {e.name for e in experiments}
    kept = []
    if path.exists():
        read_throughput(path)  # verified before a row of it is kept
        with open(path, newline="") as f:
            kept = [r for r in csv.DictReader(f) if r["experiment"] not in names]
    rows = kept + [row for experiment in experiments for row in measure(experiment, scale, steps)]
    write_csv(path, COLUMNS, rows, checksum=True)
    return len(rows)


def print_priced(priced: Sequence[Priced], budget_hours: float, pilot_seeds: int, ceiling: int) -> None:
    """The priced plan: per experiment in priority order its pilot and confirmatory core-hours, the running total,
    and whether the budget trains it."""
    kept, _ = in_budget(priced, budget_hours)
    print(
        f"core-hours (one thread each) of the pilot ({pilot_seeds} seeds and the sweeps' planned points) and the "
        f"confirmatory stage at its ceiling ({ceiling} seeds), against a budget of {budget_hours:g}:"
    )
    print(f"{'experiment':40s} {'pilot':>7s} {'confirm':>8s} {'total':>7s} {'running':>8s}  status")
    running = 0.0
    for each in priced:
        status = "trained" if each in kept else "out_of_budget"
        if each in kept:
            running += each.core_hours
        if each.unmeasured:
            status = f"unmeasured arms: {', '.join(each.unmeasured)} (cost --measure)"
        print(
            f"{each.experiment:40s} {each.pilot_seconds / 3600:7.2f} {each.confirmatory_seconds / 3600:8.2f} "
            f"{each.core_hours:7.2f} {running:8.2f}  {status}"
        )
