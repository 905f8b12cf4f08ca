"""REPORT.md's recipe tables: each comparison's arms, one row an arm, from `recipes/<experiment>.csv` (written by
`comparisons.write_recipes` when the experiment's table is rebuilt, its checksum verified here), then a model that two
experiments train (`report_shared`). Under a plan, each arm's tuning is what its pilot's sweep trained (its sweep
points in the pilot's per-seed file: a grid extended at its edge trains more than it declares), and an arm the plan
trains at none of its seeds says so beside its declared rate."""

from __future__ import annotations

import csv
from pathlib import Path

from scaling_axes.harness.claims.observed import Experiment
from scaling_axes.harness.claims.plan import AnalysisPlan
from scaling_axes.harness.experiment.report_shared import shared_lines
from scaling_axes.io import verify_checksum

COLUMNS = (
    ("parametrisation", "parametrisation"),
    ("optimiser", "optimiser"),
    ("lr", "rate"),
    ("warmup", "warmup"),
    ("weight_decay", "weight decay"),
    ("steps", "steps"),
    ("tokens_per_parameter", "tokens / non-emb. parameter"),
    ("passes", "passes"),
    ("evaluation_tokens", "evaluation tokens"),
    ("tuning", "tuning"),
)


def recipe_lines(
    scale_dir: Path, plan: AnalysisPlan | None = None, pilot: dict[str, Experiment] | None = None
) -> list[str]:
    """A table per comparison of every experiment with a recipes file, with what its arms may differ in and why
    (under `plan`, each arm as `pilot`, its pilot's experiments, says it was tuned)."""
    files = sorted((Path(scale_dir) / "recipes").glob("*.csv"))
    if not files:
        return []
    lines, recipes = ["## Recipes: each comparison's arms", ""], {}
    for path in files:
        verify_checksum(path, "rebuild the experiment's table (run <experiment> --report)")
        with open(path, newline="") as f:
            rows = recipes[path.stem] = list(csv.DictReader(f))
        planned = plan.experiments.get(path.stem) if plan else None
        tuned = _tuning(pilot[path.stem]) if planned and pilot and path.stem in pilot else {}
        for comparison in dict.fromkeys(r["comparison"] for r in rows):
            each = [r for r in rows if r["comparison"] == comparison]
            lines += _comparison(path.stem, each, tuned, set(planned.arms) if planned else None)
    return lines + shared_lines(Path(scale_dir), recipes)


def _tuning(pilot: Experiment) -> dict[str, str]:
    """arm -> its tuning as the pilot's sweep trained it (its sweep points, however far the grid was extended)."""
    return {
        arm: f"{len(points)} runs at {len({lr for lr, *_ in points})} rates (the pilot's sweep)"
        for arm, points in pilot.sweeps.items()
    }


def _comparison(
    experiment: str, rows: list[dict[str, str]], tuned: dict[str, str], planned: set[str] | None
) -> list[str]:
    notes = {r["field"]: r["value"] for r in rows if not r["arm"]}
    arms: dict[str, dict[str, str]] = {}
    for r in rows:
        if r["arm"]:
            arms.setdefault(r["arm"], {})[r["field"]] = r["value"]
    for arm, fields in arms.items():
        if arm in tuned:
            fields["tuning"] = tuned[arm]
        if planned is not None and arm not in planned:
            fields["lr"] = f"{fields.get('lr', '')} (declared; the plan trains it at none of its seeds)"
        if fields.get("tuning", "").startswith("none of its own") and fields.get("rate_from"):
            fields["tuning"] += f": {fields['rate_from']}"
    grown = [
        arm for arm in arms if notes.get("why", "").startswith("grown") and "carried" in arms[arm].get("rate_from", "")
    ]
    shared = {field: value for field, value in next(iter(arms.values())).items() if _same(arms, field)}
    differs = notes.get("differs") or "nothing but the architecture"
    lines = [f"### {experiment}: {rows[0]['comparison']}", "", f"Arms differ in: {differs}."]
    lines += [f"Why: {notes['why']}"] if notes.get("why") else []
    lines += [f"Token rule across sizes: {notes['token_rule']}."] if notes.get("token_rule") else []
    lines += ["", "| arm | " + " | ".join(title for _, title in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {arm} | " + " | ".join(fields.get(f, "") for f, _ in COLUMNS) + " |" for arm, fields in arms.items()]
    common = ("batch", "seq_len", "corpus", "tokenizer", "data_order", "schedule", "clipping", "z_loss")
    lines += ["", "Shared: " + "; ".join(f"{f.replace('_', ' ')} {shared[f]}" for f in common if f in shared) + "."]
    lines += [
        f"Grown: {arm}'s steps, tokens and passes are its last stage's. Its chain trained every stage before it, each "
        "stage a run of its own (its own warmup and schedule, its seed's data order restarted at the first batch), "
        "so the chain's tokens are the sum of its stages' and its distinct windows those of its longest stage."
        for arm in grown
    ]
    return [*lines, ""]


def _same(arms: dict[str, dict[str, str]], field: str) -> bool:
    return len({fields.get(field) for fields in arms.values()}) == 1
