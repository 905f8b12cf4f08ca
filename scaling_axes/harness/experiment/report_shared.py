"""REPORT.md's "One model in two experiments" (issue 83): a model (its architecture's config and non-embedding
parameters: one shape, whatever its preset's name) that two experiments train, its final loss in each over their
seeds, whether the two end within 2 of its larger seed SD, and the recipe fields in which the experiments train it
differently (its parametrisation among them), with each experiment's token rule: the same model under two recipes
once ended 0.75 nats apart, and only this section says so."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

from scaling_axes.harness.claims.observed import read_experiment

IDENTITY = ("architecture", "non_embedding")  # what makes two arms one model (recipes before it: the preset's name)
SKIPPED = ("model", "rate_from", "tuning")  # a preset's name; how a rate was found, not what the run trained with
WITHIN_SDS = 2.0


def shared_lines(scale_dir: Path, recipes: dict[str, list[dict[str, str]]]) -> list[str]:
    """The section, from each experiment's recipe rows (`recipes`: experiment -> rows) and its per-seed file."""
    arms: dict[tuple[str, ...], dict[tuple[str, str], dict[str, str]]] = {}
    rules: dict[str, str] = {}
    for experiment, rows in recipes.items():
        fields: dict[str, dict[str, str]] = {}
        for r in rows:
            if r["arm"]:
                fields.setdefault(r["arm"], {})[r["field"]] = r["value"]
            elif r["field"] == "token_rule" and r["value"]:
                rules.setdefault(experiment, r["value"])
        for arm, recipe in fields.items():
            key = (recipe.get("architecture") or recipe.get("model", ""), recipe.get("non_embedding", ""))
            arms.setdefault(key, {})[(experiment, arm)] = recipe
    pairs = [
        (key, a, b)
        for key, each in sorted(arms.items())
        for a, b in itertools.combinations(sorted(each), 2)
        if a[0] != b[0]
    ]
    if not pairs:
        return []
    out = [
        "## One model in two experiments",
        "",
        f"A model (its architecture and non-embedding parameters) that two experiments train: its final loss in each, "
        f"mean and seed SD, whether they end within {WITHIN_SDS:g} of the larger SD, and the recipe fields that "
        "differ (its parametrisation among them), with each experiment's token rule.",
        "",
    ]
    losses = _losses(scale_dir, {experiment for _, a, b in pairs for experiment in (a[0], b[0])})
    for key, a, b in pairs:
        out.append(_pair_line(key, a, b, arms[key], losses, rules))
    return [*out, ""]


def _losses(scale_dir: Path, experiments: set[str]) -> dict[tuple[str, str], tuple[str, list[float]]]:
    """(experiment, run) -> (measure, its final losses by seed): the test split's where each seed has one."""
    out = {}
    for name in sorted(experiments):
        if not (Path(scale_dir) / f"{name}.csv").exists():
            continue
        for run, seeds in read_experiment(Path(scale_dir), name).runs.items():
            measure = "test_loss" if all("test_loss" in m for m in seeds.values()) else "val_loss"
            values = [m[measure] for m in seeds.values() if measure in m]
            if values:
                out[(name, run)] = (measure, values)
    return out


Arm = tuple[str, str]  # (experiment, arm)


def _pair_line(
    key: tuple[str, ...],
    a: Arm,
    b: Arm,
    recipes: dict[Arm, dict[str, str]],
    losses: dict[Arm, tuple[str, list[float]]],
    rules: dict[str, str],
) -> str:
    architecture, non_embedding = key
    head = f"- {architecture} of {non_embedding} non-embedding parameters"
    said = []
    for experiment, arm in (a, b):
        measure, values = losses.get((experiment, arm), ("val_loss", []))
        mean = f"{statistics.fmean(values):.4f}" if values else "not trained"
        sd = f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else ""
        model = recipes[(experiment, arm)].get("model", "")
        said.append(f"{experiment} `{arm}` (`{model}`) {mean}{sd} {measure.replace('_', ' ')} ({len(values)} seeds)")
    line = f"{head}: {' against '.join(said)}"
    both = [losses.get(x, ("", []))[1] for x in (a, b)]
    if all(len(v) > 1 for v in both):
        gap = abs(statistics.fmean(both[0]) - statistics.fmean(both[1]))
        sd = max(statistics.stdev(v) for v in both)
        verdict = "within" if gap <= WITHIN_SDS * sd else "beyond"
        line += f"; {gap:.4f} apart, {verdict} {WITHIN_SDS:g} seed SDs ({WITHIN_SDS * sd:.4f})"
    first, second = recipes[a], recipes[b]
    fields = [f for f in first if f not in (*IDENTITY, *SKIPPED) and first.get(f) != second.get(f)]
    differs = ", ".join(f"{f.replace('_', ' ')} ({first.get(f)} / {second.get(f)})" for f in fields)
    line += f". Recipes differ in: {differs or 'nothing'}"
    named = [f"{e}: {rules[e]}" for e in (a[0], b[0]) if e in rules]
    return line + (f" (token rules: {'; '.join(named)})." if named else ".")
