"""REPORT.md's recipe tables: each comparison's arms, one row an arm, from `recipes/<experiment>.csv` (written by
`comparisons.write_recipes` when the experiment's table is rebuilt, its checksum verified here), then a model that two
experiments train (`report_shared`)."""

from __future__ import annotations

import csv
from pathlib import Path

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


def recipe_lines(scale_dir: Path) -> list[str]:
    """A table per comparison of every experiment with a recipes file, with what its arms may differ in and why."""
    files = sorted((Path(scale_dir) / "recipes").glob("*.csv"))
    if not files:
        return []
    lines, recipes = ["## Recipes: each comparison's arms", ""], {}
    for path in files:
        verify_checksum(path, "rebuild the experiment's table (run <experiment> --report)")
        with open(path, newline="") as f:
            rows = recipes[path.stem] = list(csv.DictReader(f))
        for comparison in dict.fromkeys(r["comparison"] for r in rows):
            lines += _comparison(path.stem, [r for r in rows if r["comparison"] == comparison])
    return lines + shared_lines(Path(scale_dir), recipes)


def _comparison(experiment: str, rows: list[dict[str, str]]) -> list[str]:
    notes = {r["field"]: r["value"] for r in rows if not r["arm"]}
    arms: dict[str, dict[str, str]] = {}
    for r in rows:
        if r["arm"]:
            arms.setdefault(r["arm"], {})[r["field"]] = r["value"]
    shared = {field: value for field, value in next(iter(arms.values())).items() if _same(arms, field)}
    differs = notes.get("differs") or "nothing but the architecture"
    lines = [f"### {experiment}: {rows[0]['comparison']}", "", f"Arms differ in: {differs}."]
    lines += [f"Why: {notes['why']}"] if notes.get("why") else []
    lines += [f"Token rule across sizes: {notes['token_rule']}."] if notes.get("token_rule") else []
    lines += ["", "| arm | " + " | ".join(title for _, title in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    lines += [f"| {arm} | " + " | ".join(fields.get(f, "") for f, _ in COLUMNS) + " |" for arm, fields in arms.items()]
    common = ("batch", "seq_len", "corpus", "tokenizer", "data_order", "schedule", "clipping", "z_loss")
    lines += ["", "Shared: " + "; ".join(f"{f.replace('_', ' ')} {shared[f]}" for f in common if f in shared) + ".", ""]
    return lines


def _same(arms: dict[str, dict[str, str]], field: str) -> bool:
    return len({fields.get(field) for fields in arms.values()}) == 1
