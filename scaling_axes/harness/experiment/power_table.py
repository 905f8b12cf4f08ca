"""A scale's power table, from its plan's claims and its pilot's committed files: per experiment the test the pilot
supports (`choose_test`), per claim the seeds it needs (`claims.power`), and the experiments' part of the plan
those give (`draft`: the fresh seeds, the test, each arm and its rate), with what the seeds cost on this CPU and in
GPU-hours at the small and paper scales.

    python -m scaling_axes power --scale cpu            # the table; --draft prints the plan's `experiments:`
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import math
import statistics
from collections.abc import Mapping
from pathlib import Path

from scaling_axes.harness.claims.plan import AnalysisPlan, PlannedExperiment
from scaling_axes.harness.claims.plan_records import EXCLUSIONS, OUT_OF_REACH
from scaling_axes.harness.claims.power import BLOCKED, PilotRow, read_pilot, resolved_effects
from scaling_axes.harness.claims.sizing import Sized, size_claims
from scaling_axes.harness.experiment.plan import dry_run, evaluation_hours, evaluation_tokens
from scaling_axes.harness.experiment.remainder import Remainder
from scaling_axes.harness.runs import Experiment, default_runs, growth_chain
from scaling_axes.harness.scales import PAPER, SMALL, Scale
from scaling_axes.harness.training.hardware import GPUS, MEASURED_MFU, CpuRun
from scaling_axes.modules.flops import non_embedding_params

SPHERICITY_RATIO = 2.0  # the pooled model where the pilot's paired margins' variances lie within this factor,
SPHERICITY_SEEDS = 10  # each measured on at least this many seeds


def choose_test(experiment: str, pilot: Mapping[tuple[str, str], PilotRow]) -> tuple[str, str]:
    """(test, why) for `experiment` from its pilot rows: each row's own spread (valid for any covariance) unless the
    pilot can show sphericity, which the pooled arm x seed model needs: every row a contrast of two arms, measured
    on at least SPHERICITY_SEEDS seeds, their variances within SPHERICITY_RATIO of each other. Three seeds cannot: a
    variance on 2 degrees of freedom puts two equal ones within a factor 2 a third of the time, four a thirtieth."""
    rows = {r.margins: r for (name, _), r in sorted(pilot.items()) if name == experiment}
    usable = [r for r in rows.values() if len(r.margins) >= 2 and r.status not in BLOCKED]
    if len(usable) < 2:
        return "own_spread", "one contrast in the pilot: the model is its paired t"
    if wider := [r.row for r in usable if len(r.runs) != 2 or r.unit not in ("nats/token", "nats", "points")]:
        return "own_spread", f"{wider[0]}'s margin is not a contrast of two arms' values"
    if (fewest := min(len(r.margins) for r in usable)) < SPHERICITY_SEEDS:
        return "own_spread", f"the pilot's {fewest} seeds cannot show sphericity: each row on its own spread"
    variances = sorted(statistics.variance(r.margins) for r in usable)
    ratio = variances[-1] / variances[0] if variances[0] else math.inf
    words = f"the pilot's {len(usable)} paired margins' variances span a factor {ratio:.2g}"
    if ratio <= SPHERICITY_RATIO:
        return "model", f"{words}, within {SPHERICITY_RATIO:g}: pooled"
    return "own_spread", f"{words}, beyond {SPHERICITY_RATIO:g}: each row on its own spread"


def pilot_rates(pilot_dir: Path, experiment: str) -> dict[str, float]:
    """run -> the rate its pilot claim seeds settled at (a stable fallback's, else the sweep's choice)."""
    path = Path(pilot_dir) / f"{experiment}.csv"
    rates: dict[str, float] = {}
    if path.exists():
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r["table"] == "lr_sweep" and r["metric"] in ("chosen_lr", "stable_fallback_lr"):
                    if r["metric"] == "stable_fallback_lr" or r["row"] not in rates:
                        rates[r["row"]] = float(r["ours"])
    return rates


@dataclasses.dataclass(frozen=True)
class Draft:
    """What the power analysis gives a plan: every claim sized, each experiment's fresh seeds, test and arms, and
    the experiments the budget's remainder cannot pay for (experiment -> why) with what it leaves (core-hours)."""

    sized: list[Sized]
    experiments: dict[str, PlannedExperiment]
    out_of_budget: dict[str, str] = dataclasses.field(default_factory=dict)
    remainder: Remainder | None = None


def draft(plan: AnalysisPlan, experiments: Mapping[str, Experiment], scale: Scale) -> Draft:
    """The plan's experiments part, computed from its claims and its pilot: each experiment's test, its in-family
    claims' arms (their rows' runs, with every run they grow from) at the rates their pilot seeds settled at, and as
    many fresh seeds (numbered on from the pilot's) as its neediest in-family claim. Where the plan registered a
    cost model, a claim is readmitted only while every experiment's seeds fit what the pilot leaves of the budget
    (`remainder.Remainder`), and an experiment that the remainder cannot pay for after those before it in priority
    order leaves whole, its claims `out_of_budget`, the families sized again without them."""
    plan = resolved_effects(plan)
    pilot = read_pilot(plan)
    tests = {name: choose_test(name, pilot) for name in sorted({c.experiment for c in plan.claims})}
    stub = {name: PlannedExperiment(name, (), test, why, {}) for name, (test, why) in tests.items()}
    plan = dataclasses.replace(plan, experiments=stub)
    remainder = Remainder.of(plan, experiments, scale)
    planned_of = functools.partial(_planned, plan, experiments, scale, pilot, tests)
    fits = (lambda sized: not remainder.out_of_budget(planned_of(sized))) if remainder else (lambda _: True)
    over: dict[str, str] = {}
    while True:
        sized = size_claims(plan, pilot, fits)
        planned = planned_of(sized)
        if not (out := remainder.out_of_budget(planned) if remainder else {}):
            return Draft(sized, planned, over, remainder)
        over |= out
        prefix = EXCLUSIONS["out_of_budget"][1]
        excluded = [
            dataclasses.replace(c, excluded=f"{prefix}: {out[c.experiment]}")
            if c.experiment in out and not c.excluded
            else c
            for c in plan.claims
        ]
        plan = dataclasses.replace(plan, claims=tuple(excluded))


def _planned(
    plan: AnalysisPlan,
    experiments: Mapping[str, Experiment],
    scale: Scale,
    pilot: Mapping[tuple[str, str], PilotRow],
    tests: Mapping[str, tuple[str, str]],
    sized: list[Sized],
) -> dict[str, PlannedExperiment]:
    """experiment -> its fresh seeds (as many as its neediest sized claim), test and arms at their pilot rates."""
    planned = {}
    for name, (test, why) in tests.items():
        mine = [s for s in sized if s.claim.experiment == name and s.seeds is not None]
        if not mine:
            continue
        first = max(plan.pilot_seeds) + 1
        by_name = {run.name: run for run in experiments[name].runs(scale)}
        arms = sorted(
            {
                run.name
                for s in mine
                for row in s.claim.rows
                for arm in pilot[(name, row)].runs
                for run in growth_chain(by_name[arm], by_name)
            }
        )
        rates = pilot_rates(plan.pilot_dir, name)
        seeds = tuple(range(first, first + max(s.seeds for s in mine)))
        planned[name] = PlannedExperiment(name, seeds, test, why, {a: rates.get(a) for a in arms})
    return planned


def draft_yaml(found: Draft) -> str:
    """The plan's parts the power analysis writes: `out_of_reach:` (each excluded claim and why) and
    `experiments:`."""
    resolved = [s.claim for s in found.sized if s.claim.effect_rule and s.claim.effect]
    lines = ["# each claim's effect_rule on the pilot, to write as its effect:"] if resolved else []
    lines += [f"#   {c.id}: effect: {c.effect:.4g}  ({c.effect_rule[0]:g} x {c.effect_rule[1]})" for c in resolved]
    if found.out_of_budget:
        lines += ["out_of_budget:  # what the pilot leaves of the budget cannot pay for (`power --draft`)"]
        lines += [f"  {name}: {json.dumps(why)}" for name, why in found.out_of_budget.items()]
    lines += ["out_of_reach:  # written by `power --draft` from the pilot, before any fresh seed trained"]
    lines += [
        f"  {s.claim.id}: {json.dumps(s.why_out.removeprefix(OUT_OF_REACH + ': '))}"
        for s in found.sized
        if s.why_out.startswith(OUT_OF_REACH)
    ]
    lines += ["experiments:"]
    planned = found.experiments
    for name, each in planned.items():
        lines += [
            f"  {name}:",
            f"    seeds: [{', '.join(map(str, each.seeds))}]",
            f"    test: {each.test}",
            f"    test_source: {json.dumps(each.test_source)}",
            "    arms:",
            *(f"      {arm}: {'null' if lr is None else f'{lr:g}'}" for arm, lr in each.arms.items()),
        ]
    return "\n".join(lines)


def costs(planned: Mapping[str, PlannedExperiment], experiments: Mapping[str, Experiment], scale: Scale) -> dict:
    """experiment -> the cost of its arms at its fresh seeds (a run that experiments share, trained once, priced
    once): `cpu_hours` (one thread of this machine), `small_gpu_hours` and `paper_gpu_hours` (an H100 at the
    measured MFU; at small scale the evaluations' `small_eval_gpu_hours` included, forwards over its
    `small_eval_tokens`), and the small runs' training `tokens_per_parameter` (non-embedding; lowest, highest)."""
    seen: set[tuple[str, str]] = set()
    out = {}
    for name, each in planned.items():
        group = experiments[name].run_group or name
        arms = [a for a in each.arms if (group, a) not in seen]
        seen |= {(group, a) for a in arms}
        flops = {run.name: run.train_flops() for run in experiments[name].runs(scale)}
        seeds = len(each.seeds)
        out[name] = {"cpu_hours": seeds * sum(CpuRun.seconds(flops[a]) for a in arms) / 3600}
        for at in (SMALL, PAPER):  # a run named otherwise at that scale (the paper's token budgets) is not priced
            hours = _gpu_hours(experiments[name], at)
            out[name][f"{at.name}_gpu_hours"] = seeds * sum(hours.get(a, math.nan) for a in arms)
        out[name] |= _small_evaluation(experiments[name], arms, seeds)
        out[name]["small_gpu_hours"] += out[name]["small_eval_gpu_hours"]
    return out


def _small_evaluation(experiment: Experiment, arms: list[str], seeds: int) -> dict:
    """The evaluation tokens and hours of `arms` at small scale over `seeds`, and their training tokens per
    non-embedding parameter (an image run's evaluation is not counted)."""
    small = {run.name: run for run in default_runs(experiment, SMALL)}
    runs = [small[a] for a in arms if a in small]
    tokens = {run.name: evaluation_tokens(run, SMALL) for run in runs}
    hours = [evaluation_hours(run, tokens[run.name], MEASURED_MFU, GPUS["h100"]) for run in runs]
    ratios = [run.budget.tokens / non_embedding_params(run.config) for run in runs]
    return {
        "small_eval_tokens": seeds * sum(t or 0 for t in tokens.values()),
        "small_eval_gpu_hours": seeds * math.fsum(h for h in hours if not math.isnan(h)),
        "tokens_per_parameter": (min(ratios), max(ratios)) if ratios else (math.nan, math.nan),
    }


def _gpu_hours(experiment: Experiment, scale: Scale) -> dict[str, float]:
    """run -> its GPU-hours on one H100 at the measured MFU (`plan.dry_run`)."""
    return {p["run"]: p["gpu_hours"] for p in dry_run(experiment, scale, MEASURED_MFU, GPUS["h100"], 1)}


def print_power(plan: AnalysisPlan, found: Draft, spent: Mapping[str, Mapping[str, float]]) -> None:
    """The power table: per claim its noise, effect and source, threshold, seeds and power (or why it is out of
    reach); per experiment its seeds, test and cost; per paper its total."""
    print(
        f"power analysis of {plan.path} (digest {plan.digest}): one-sided alpha {plan.alpha:g}, power {plan.power:g},"
    )
    print(
        f"sigma at its {plan.sigma_confidence:.0%} upper limit from the pilot {plan.pilot}, "
        f"at most {plan.max_seeds} seeds"
    )
    for paper in sorted({c.paper for c in plan.claims}):
        print(f"\n== {paper}")
        for s in (s for s in found.sized if s.claim.paper == paper):
            c = s.claim
            kind = c.kind + (f" within {c.tolerance:g}" if c.tolerance else "")
            head = f"{c.id} ({c.role}, {kind}, {c.combine} of {len(c.rows)}): effect {c.effect:g} ({c.effect_source})"
            print(f"- {head}")
            if s.noise is not None:
                print(
                    f"    sigma {s.noise.sigma:.3g} on {s.noise.df:.3g} df, upper limit {s.noise.upper:.3g}; "
                    f"threshold {s.threshold:.3g}"
                )
            print(f"    {f'{s.seeds} seeds, power {s.power:.2f}' if s.seeds else s.why_out}")
    print("\nexperiment                          seeds  test        CPU-h   small GPU-h   paper GPU-h")
    for name, each in found.experiments.items():
        cost = spent[name]
        print(
            f"{name:35s} {len(each.seeds):5d}  {each.test:10s} {cost['cpu_hours']:6.2f} "
            f"{cost['small_gpu_hours']:13.3g} {cost['paper_gpu_hours']:13.4g}"
        )
    if found.remainder is not None:
        hours = found.remainder.hours_of(found.experiments)
        print(
            f"the pilot leaves {found.remainder.hours:.2f} core-hours of the budget; its seeds take "
            f"{sum(hours.values()):.2f} (each run at its arm's pilot seconds): "
            + ", ".join(f"{name} {h:.2f}" for name, h in hours.items())
        )
        for name, why in found.out_of_budget.items():
            print(f"out of budget: {name}: {why}")
    for paper, total in paper_costs(plan, found, spent).items():
        print(
            f"{paper}: {total['cpu_hours']:.2f} CPU-hours here (one thread), {total['small_gpu_hours']:.3g} H100-hours "
            f"at small scale, {total['paper_gpu_hours']:.4g} at paper scale (experiments shared between papers: each)"
        )


def paper_costs(plan: AnalysisPlan, found: Draft, spent: Mapping[str, Mapping[str, float]]) -> dict[str, dict]:
    """paper -> its experiments' costs summed (`costs`): what its plan's seeds take here, at small and paper
    scale, the evaluation tokens at small scale, and the range of its small runs' tokens per parameter."""
    out = {}
    for paper in sorted({c.paper for c in plan.claims}):
        names = {c.experiment for c in plan.of_paper(paper)} & set(found.experiments)
        keys = ("cpu_hours", "small_gpu_hours", "paper_gpu_hours", "small_eval_tokens", "small_eval_gpu_hours")
        out[paper] = {k: sum(spent[n][k] for n in names) for k in keys}
        ratios = [r for n in names for r in spent[n]["tokens_per_parameter"] if not math.isnan(r)]
        out[paper]["tokens_per_parameter"] = (min(ratios), max(ratios)) if ratios else (math.nan, math.nan)
    return out
