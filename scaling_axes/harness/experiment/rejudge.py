"""A scale's committed tables judged again by today's rules from their files alone (`results/<scale>/*.csv` and the
per-seed files beside them), where the runs are not at hand: each claim's evidence is read back from its per-seed
file, what kept it from a test from its row, and it is settled again (`claims.verdicts.settle`, with the spread of the
table's paired margins), then the scale's family is judged (`family.judge_family`) and its REPORT.md written.

    python -m scaling_axes report --scale cpu
"""

from __future__ import annotations

import collections
import dataclasses
import re
import time
from pathlib import Path

from scaling_axes.harness.claims.margins import paired_noise
from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS
from scaling_axes.harness.claims.verdicts import settle
from scaling_axes.harness.experiment.family import Table, judge_family, read_seeds, read_table, statement_of
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.experiment.seeds import SEED_COLUMNS, evidence_rows
from scaling_axes.harness.results import COLUMNS, RESULTS_DIR, Evidence, Row, csv_row
from scaling_axes.harness.runs import source_commit
from scaling_axes.harness.scales import Scale
from scaling_axes.io import write_csv
from scaling_axes.significance import pooled_spread

NOTHING = "decides nothing: "
NOT_MATCHED = f"{NOTHING}the arms are not matched on what the claim is stated at: "
UNTUNED = "an arm's lr is not tuned: "
Blocked = tuple[list[str], list[str], list[str]]  # why (not learning, untuned, unstable), as `settle` takes them


def rejudge_scale(scale: Scale, results_dir: Path = RESULTS_DIR) -> Path:
    """Every table of `results/<scale>/` with a per-seed file judged again by today's rules; then the family, then
    the scale's REPORT.md (keeping the line that says where its runs were trained, and saying when and by which
    commit's rules they were judged again) and results/REPORT.md. Returns the scale's report."""
    scale_dir = Path(results_dir) / scale.name
    for path in sorted(scale_dir.glob("*.csv")):
        if seeds := read_seeds(scale_dir, path.stem):
            rows, seeds = rejudge_table(path.stem, scale, read_table(path), seeds)
            write_csv(scale_dir / "seeds" / path.name, SEED_COLUMNS, seeds)
            write_csv(path, COLUMNS, rows)
    judge_family(scale_dir)
    write_report(results_dir)
    report = scale_dir / "REPORT.md"
    lines = report.read_text().splitlines() if report.exists() else []
    trained = [line for line in lines if line.startswith("Machine: ")][:1]
    judged = (
        f"Judged again from the committed CSVs and per-seed files by the rules of commit {source_commit()}, "
        f"{time.strftime('%Y-%m-%d')} (`python -m scaling_axes report --scale {scale.name}`)."
    )
    return write_report(results_dir, scale, header=(*trained, "", judged, ""))


def rejudge_table(name: str, scale: Scale, rows: Table, seeds: Table) -> tuple[Table, Table]:
    """(rows, per-seed rows) of one table with each claim that has evidence settled again."""
    noise = measured_noise(seeds)
    moved = {r["run"] for r in seeds if r["kind"] == "trained" and "abandoned" in r["flag"].split()}
    read = {i: read_claim(r, seeds) for i, r in enumerate(rows) if r["metric"] == "claim"}
    read = {i: each for i, each in read.items() if each is not None}
    learned = [claim for claim, blocked, _ in read.values() if not (blocked[0] or blocked[2])]
    paired = paired_noise(learned)
    # the other tuning policy (its arms at the sweep's choice, kept as they trained): its own margins, pooled apart
    others = {i: _with_margins(claim, other) for i, (claim, _, other) in read.items() if other}
    paired_others = paired_noise([claim for i, claim in others.items() if not read[i][1][0]])
    settled, at_choice = {}, []
    for i, (claim, blocked, _) in read.items():
        settled[i] = settle(claim, scale, noise, *blocked, paired)
        if i in others:
            at_choice.append(settle(others[i], scale, noise, blocked[0], blocked[1], (), paired_others))
    out = list(rows)
    for i, row in settled.items():
        data = rows[i]["note"].partition(DATA_NOTE)
        out[i] = {**csv_row(name, scale, row), "note": row.note + data[1] + data[2]}
    evidence = evidence_rows(list(settled.values()), moved, at_choice)
    kept = [r for r in seeds if r["kind"] not in ("evidence", "claim_arm")]
    return out, kept + evidence + [r for r in seeds if r["kind"] == "claim_arm"]


def measured_noise(seeds: Table) -> dict[str, tuple[float, int]]:
    """metric -> the pooled spread of one run's final metric over the trained runs' seeds, the unstable left out
    (as `table.measured_noise` measured it from the runs)."""
    by_run = collections.defaultdict(list)
    for r in seeds:
        if r["kind"] == "trained" and "unstable" not in r["flag"].split():
            by_run[(r["metric"], r["run"])].append(float(r["value"]))
    metrics = {metric for metric, _ in by_run}
    spread = {m: pooled_spread([v for (each, _), v in by_run.items() if each == m]) for m in metrics}
    return {metric: value for metric, value in spread.items() if value[1]}


def read_claim(row: dict[str, str], seeds: Table) -> tuple[Row, Blocked, dict[int, float]] | None:
    """A claim row as `settle` takes it: its evidence from the per-seed file, why its row says it was kept from a
    test, and its margins under the other tuning policy (empty: one policy, or not measured there). None: the row
    has no evidence (never reached, out of reach)."""
    mine = [r for r in seeds if (r["table"], r["row"]) == (row["table"], row["row"])]
    fields = {r["metric"]: r["value"] for r in mine if r["kind"] == "evidence"}
    if not fields or row["status"] in ("memorisation", "stale"):
        return None
    margins = {int(r["seed"]): float(r["value"]) for r in mine if r["kind"] == "claim"}
    other = {int(r["seed"]): float(r["value"]) for r in mine if r["kind"] == "claim_at_choice"}
    arms = collections.defaultdict(list)
    for r in mine:
        if r["kind"] == "claim_arm":
            arms[r["metric"]].append(float(r["value"]))
    statement, status = statement_of(row), row["status"]
    why = NOTE_PARTS.join(row["note"].partition(DATA_NOTE)[0].split(NOTE_PARTS)[2:3])
    why = "" if why.startswith(("multiplicity:", "family:", "the other tuning policy:")) else why
    within = re.search(r"\(within ([\d.]+) [^)]*\)$", statement)  # an older file's tolerance: its statement's
    tolerance = fields.get("tolerance") or (within and within[1])
    evidence = Evidence(
        statement,
        tuple(margins.values()),
        tuple(margins),
        float(fields["noise_floor"]),
        int(fields["runs_per_margin"]),
        why if status == "claim_fails" and why else None,
        fields["noise_metric"] or None,
        float(fields["noise_scale"]),
        why.removeprefix(NOT_MATCHED) if status == "unmatched" else None,
        own_values=tuple(map(tuple, arms.values())) or None,
        tolerance=float(tolerance) if tolerance else None,
        paired=fields.get("paired", "True") == "True",
    )
    blocked = (
        [why.removeprefix(NOTHING)] if status == "not_learning" else [],
        [why.removeprefix(UNTUNED)] if why.startswith(UNTUNED) else [],
        [why.removeprefix(NOTHING)] if status == "unstable" else [],
    )
    claim = Row(table=row["table"], row=row["row"], metric="claim", unit=row["unit"], run=row["run"], evidence=evidence)
    return claim, blocked, other


def _with_margins(claim: Row, margins: dict[int, float]) -> Row:
    evidence = dataclasses.replace(claim.evidence, margins=tuple(margins.values()), seeds=tuple(margins))
    return dataclasses.replace(claim, evidence=evidence)
