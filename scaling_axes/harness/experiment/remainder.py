"""The confirmatory stage within the registered budget (issue 83). After the pilot, `power` hands out seeds within
what the pilot leaves: the pilot costs what the registered cost model priced it at (`experiment.cost`: its sweeps'
points and claim seeds, one thread each), and each confirmatory run what its arm's pilot runs took, the median of
their seeds' wall seconds (`started_at` to `ended_at` in the pilot's per-seed file), or the registered throughput's
price where the pilot has none. Experiments keep their seeds in the plan's priority order while the remainder pays
for each whole; a run two experiments share, at a seed both train, is paid once.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping
from pathlib import Path

from scaling_axes.harness.claims.observed import read_experiment
from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedExperiment
from scaling_axes.harness.experiment.cost import arm_key, in_budget, price_in_order, read_throughput
from scaling_axes.harness.runs import Experiment
from scaling_axes.harness.scales import Scale


def pilot_seconds(pilot_dir: Path, experiment: str) -> dict[str, float]:
    """run -> the median over its pilot seeds of the seconds from its launch to its end (one thread)."""
    if not (Path(pilot_dir) / f"{experiment}.csv").exists():
        return {}
    spans = {
        run: [m["ended_at"] - m["started_at"] for m in seeds.values() if {"started_at", "ended_at"} <= set(m)]
        for run, seeds in read_experiment(Path(pilot_dir), experiment).runs.items()
    }
    return {run: statistics.median(each) for run, each in spans.items() if each}


@dataclasses.dataclass(frozen=True)
class Remainder:
    """What the pilot leaves of the plan's budget (`hours`), the seconds each (run group, arm) takes, each
    experiment's run group, and the plan's priority order."""

    hours: float
    seconds: Mapping[tuple[str, str], float]
    groups: Mapping[str, str]
    priority: tuple[str, ...]

    @classmethod
    def of(cls, plan: AnalysisPlan, experiments: Mapping[str, Experiment], scale: Scale) -> Remainder | None:
        """The plan's remainder after its pilot (None where it registered no cost model: nothing to fit)."""
        if plan.cost is None:
            return None
        priority = plan.cost.priority
        measured = read_throughput(Path(plan.root) / plan.cost.throughput)
        pilot = price_in_order([experiments[n] for n in priority], scale, measured, len(plan.pilot_seeds), 0)
        groups = {name: experiments[name].run_group or name for name in priority}
        seconds: dict[tuple[str, str], float] = {}
        for name in priority:
            timed = pilot_seconds(plan.pilot_dir, name)
            for run in experiments[name].runs(scale):
                priced = measured.get(arm_key(run))
                fallback = priced.run_seconds(run) if priced else math.inf  # unmeasured: never fits
                seconds.setdefault((groups[name], run.name), timed.get(run.name, fallback))
        spent = sum(p.pilot_seconds for p in pilot) / 3600
        return cls(plan.cost.budget_core_hours - spent, seconds, groups, priority)

    def hours_of(self, planned: Mapping[str, PlannedExperiment]) -> dict[str, float]:
        """experiment -> core-hours of its confirmatory runs, in priority order, a shared run at a seed paid once."""
        paid: set[tuple[str, str, int]] = set()
        out = {}
        for name in (n for n in self.priority if n in planned):
            each = planned[name]
            runs = {(self.groups[name], arm, k) for arm in each.arms for k in each.seeds} - paid
            paid |= runs
            out[name] = sum(self.seconds[(group, arm)] for group, arm, _ in runs) / 3600
        return out

    def out_of_budget(self, planned: Mapping[str, PlannedExperiment]) -> dict[str, str]:
        """experiment -> why the remainder cannot pay for its seeds whole, after those before it in priority."""
        hours = self.hours_of(planned)
        _, out = in_budget([_Hours(n, h) for n, h in hours.items()], self.hours)
        return {
            each.experiment: f"its {len(planned[each.experiment].seeds)} seeds cost {each.core_hours:.2f} core-hours, "
            f"more than the {self.hours:.2f} the pilot leaves of the budget pay for after those before it"
            for each in out
        }


@dataclasses.dataclass(frozen=True)
class _Hours:
    """An experiment's confirmatory core-hours, as `cost.in_budget` reads a priced one."""

    experiment: str
    core_hours: float
    unmeasured: tuple[str, ...] = ()
