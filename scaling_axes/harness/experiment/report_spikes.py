"""REPORT.md's "Spikes among the confirmatory seeds" (issue 83: the target is none): every planned arm's run at
every planned seed whose training loss spiked past SPIKE_NATS or that diverged, from the per-seed files, each named
with the rate the plan fixed for it and that rate's neighbours in the pilot's sweep (how each draw there ended), and
the seeds they share: a batch every arm of a seed meets spikes on that seed's data order, not on one arm's rate."""

from __future__ import annotations

import collections

from scaling_axes.harness.claims.observed import Experiment
from scaling_axes.harness.claims.plan import AnalysisPlan
from scaling_axes.harness.stability import SPIKE_NATS

SweepPoints = list[tuple[float, int, float | None, str]]  # (rate, draw, final loss or None: diverged, flag)


def spike_lines(experiments: dict[str, Experiment], plan: AnalysisPlan, pilot: dict[str, Experiment]) -> list[str]:
    """The section: how many of the plan's confirmatory runs spiked or diverged, and each by name (`experiments`:
    the scale's files as `judge.read_scale` read them; `pilot`: the plan's pilot's, whose sweeps it reads)."""
    found, seeds, total = [], collections.Counter(), 0
    for name, planned in sorted(plan.experiments.items()):
        runs = experiments[name].runs if name in experiments else {}
        sweeps = pilot[name].sweeps or None if name in pilot else None  # None: no sweep recorded there
        for arm in planned.arms:
            for seed in planned.seeds:
                measures = runs.get(arm, {}).get(seed)
                if measures is None:
                    continue
                total += 1
                if measures.get("diverged"):
                    what = "diverged"
                elif (spike := measures.get("spike_nats", 0.0)) > SPIKE_NATS:
                    what = f"spiked {spike:.2f} nats"
                else:
                    continue
                seeds[(name, seed)] += 1
                rate = planned.arms[arm]
                found.append(f"- {name}: {arm} seed {seed} {what} (at {_rate(rate)}{_neighbours(sweeps, arm, rate)})")
    head = f"## Spikes among the confirmatory seeds: {len(found)} of {total} runs (the target is none)"
    why = (
        f"A run spikes where a step's training loss rises {SPIKE_NATS:g} nats above its moving average, or diverges. "
        "Each is named with its rate's neighbours in the pilot's sweep: each rate's draws, stable or not, and their "
        "final losses, a draw unmarked where it stayed stable."
    )
    shared = [
        f"- {name} seed {seed}: {n} of {len(plan.experiments[name].arms)} arms spiked"
        for (name, seed), n in sorted(seeds.items())
        if n > 1
    ]
    if shared:
        shared = [
            "",
            "Seeds on which more than one arm spiked (every arm of a seed reads the same data order):",
            *shared,
        ]
    return [head, "", why, "", *(found or ["- none."]), *shared, ""]


def _neighbours(sweeps: dict[str, SweepPoints] | None, arm: str, rate: float | None) -> str:
    """The plan's rate and the swept rates either side of it, each with its draws: `0.006 (4.19, 4.20)`, an
    unstable or diverged draw marked."""
    if rate is None:
        return ""  # the experiment's declared rate: no sweep chose it
    if sweeps is None:
        return "; the pilot's file records no sweep"
    if not (points := sweeps.get(arm)):
        return "; no sweep of its own in the pilot"
    rates = sorted({lr for lr, *_ in points})
    if rate not in rates:
        return "; not a rate of the pilot's sweep"
    at = rates.index(rate)
    described = []
    for lr in rates[max(at - 1, 0) : at + 2]:
        draws = sorted((draw, loss, flag) for each, draw, loss, flag in points if each == lr)
        ended = ", ".join(
            "diverged" if loss is None else f"{loss:.3f}{' ' + flag if flag else ''}" for _, loss, flag in draws
        )
        described.append(f"{lr:g} ({ended})")
    return "; the pilot's sweep: " + ", ".join(described)


def _rate(lr: float | None) -> str:
    return "its declared rate" if lr is None else f"the plan's rate {lr:g}"
