"""The noise of one run's final metric, measured over the seeds of every run an experiment trained at a scale
(the unstable seeds left out): what an unpaired margin's floor rests on, and a `noise` row of each table."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path

from scaling_axes.harness.names import parse_seed
from scaling_axes.harness.results import Row
from scaling_axes.harness.stability import unstable_seeds
from scaling_axes.harness.training.curves import final_train_loss
from scaling_axes.harness.training.rundir import read_done
from scaling_axes.io import CorruptFileError
from scaling_axes.significance import pooled_spread

# The final metrics whose spread over seeds is measured, each as a finished run's done.json gives it: the claims
# judged on a metric take its noise (`Evidence.noise_metric`), a train-loss claim the smoothed train loss's
NOISE_METRICS: dict[str, Callable[[dict], float | None]] = {
    "val_loss": lambda done: done.get("val_loss"),
    "val_top1": lambda done: done.get("val_top1"),
    "train_loss": final_train_loss,
}


@dataclasses.dataclass(frozen=True)
class Trained:
    """Every run trained in one directory: base run name -> seed -> done.json, and base -> the seeds that trained
    unstably (`stability.unstable_seeds`: left out of the noise, flagged in the per-seed file)."""

    by_run: dict[str, dict[int, dict]]
    unsteady: dict[str, dict[int, str]]


def trained_runs(directory: Path) -> Trained:
    """Every finished run in `directory` (an experiment's runs at one scale, sweep points and seeds its claims left
    included) by its name without the seed, at each seed."""
    by_run: dict[str, dict[int, dict]] = {}
    for done_path in sorted(Path(directory).glob("*/done.json")):
        base, seed = parse_seed(done_path.parent.name)
        try:
            by_run.setdefault(base, {})[seed] = read_done(done_path)
        except (CorruptFileError, FileNotFoundError):
            continue
    return Trained(by_run, {base: unstable_seeds(seeds) for base, seeds in by_run.items()})


def metric_values(trained: Trained, metric: str) -> dict[str, dict[int, float]]:
    """base -> seed -> the final `metric` (a NOISE_METRICS key) of each trained run that has it."""
    value = NOISE_METRICS[metric]
    return {
        base: {k: float(v) for k, done in seeds.items() if isinstance(v := value(done), (int, float))}
        for base, seeds in trained.by_run.items()
    }


def measured_noise(trained: Trained) -> tuple[dict[str, tuple[float, int]], list[Row]]:
    """metric -> (the pooled spread over seeds of one run's final `metric`, its degrees of freedom), from the
    `trained` runs (`trained_runs`) at two seeds or more, leaving out the seeds that trained unstably (a spike, or an
    outlier among the run's seeds: `harness.stability`), whose spread is not the seeds' noise; and a row for each,
    its note giving the spread over every seed beside it."""
    noise, rows, unsteady = {}, [], trained.unsteady
    for metric in NOISE_METRICS:
        every = metric_values(trained, metric)
        stable = {base: {k: v for k, v in values.items() if k not in unsteady[base]} for base, values in every.items()}
        spread, dof = pooled_spread([list(values.values()) for values in stable.values()])
        if dof:
            noise[metric] = spread, dof
            rows.append(_noise_row(metric, spread, dof, every, stable))
    return noise, rows


def _noise_row(
    metric: str, spread: float, dof: int, every: dict[str, dict[int, float]], stable: dict[str, dict[int, float]]
) -> Row:
    """The measured noise of `metric`, with what it rests on: the runs and seeds pooled, the unstable seeds left out
    (and the spread with them), and the runs whose seeds spread widest (what keeps the noise up)."""
    left_out = sum(len(every[base]) - len(values) for base, values in stable.items() if len(every[base]) > 1)
    everything = pooled_spread([list(values.values()) for values in every.values()])[0]
    widest = sorted(((statistics.stdev(v.values()), base) for base, v in stable.items() if len(v) > 1), reverse=True)
    return Row(
        table="noise",
        row=metric,
        metric="seed_spread",
        ours=spread,
        status="measured",
        unit="fraction" if metric == "val_top1" else "nats/token",
        note=f"pooled over {sum(len(g) >= 2 for g in stable.values())} runs, {dof} degrees of freedom; "
        f"{left_out} unstable seed{'s' * (left_out != 1)} left out (over every seed: {everything:.3g}); "
        f"widest: {', '.join(f'{name} {sd:.3g}' for sd, name in widest[:3])}",
    )
