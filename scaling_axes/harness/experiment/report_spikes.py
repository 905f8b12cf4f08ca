"""REPORT.md's "Spikes among the confirmatory seeds" (issue 83: the target is none): every planned arm's run at
every planned seed whose training loss spiked past SPIKE_NATS or that diverged, from the per-seed files, each named
with the rate the plan fixed for it."""

from __future__ import annotations

from scaling_axes.harness.claims.observed import Experiment
from scaling_axes.harness.claims.plan import AnalysisPlan
from scaling_axes.harness.stability import SPIKE_NATS


def spike_lines(experiments: dict[str, Experiment], plan: AnalysisPlan) -> list[str]:
    """The section: how many of the plan's confirmatory runs spiked or diverged, and each by name (`experiments`:
    the scale's files as `judge.read_scale` read them)."""
    found, total = [], 0
    for name, planned in sorted(plan.experiments.items()):
        runs = experiments[name].runs if name in experiments else {}
        for arm in planned.arms:
            for seed in planned.seeds:
                measures = runs.get(arm, {}).get(seed)
                if measures is None:
                    continue
                total += 1
                if measures.get("diverged"):
                    found.append(f"- {name}: {arm} seed {seed} diverged (at {_rate(planned.arms[arm])})")
                elif (spike := measures.get("spike_nats", 0.0)) > SPIKE_NATS:
                    found.append(f"- {name}: {arm} seed {seed} spiked {spike:.2f} nats (at {_rate(planned.arms[arm])})")
    head = f"## Spikes among the confirmatory seeds: {len(found)} of {total} runs (the target is none)"
    why = f"A run spikes where a step's training loss rises {SPIKE_NATS:g} nats above its moving average, or diverges."
    return [head, "", why, "", *(found or ["- none."]), ""]


def _rate(lr: float | None) -> str:
    return "its declared rate" if lr is None else f"the plan's rate {lr:g}"
