"""REPORT.md as a researcher reads it: one line per claim grouped by verdict (duplicates merged), its margin,
interval and seeds, a forest plot, the scale's caveats once, the tables' bulk left in their CSVs; and the per-seed
file from which any verdict can be recomputed by hand."""

import csv
import statistics

from scaling_axes.harness.claims import judge, settle, significance_bound
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.experiment.table import write_seeds
from scaling_axes.harness.results import Row, write_rows
from scaling_axes.harness.scales import CPU

HOLDS, FAILS, UNDECIDED = [0.30, 0.25, 0.28], [-0.30, -0.25, -0.28], [0.01, -0.02, 0.015]


def _claims(experiment: str) -> list[Row]:
    not_learning = settle(judge("t", "d_vs_e", "d beats e", CPU, HOLDS, 0.02, "nats/token", runs=("d", "e")), CPU,
                          not_learning=["d ends at 7.0 nats/token, not 0.5 below the unigram floor 6.5"])  # fmt: skip
    return [
        judge("t", "c_vs_b", "c beats b", CPU, UNDECIDED, 0.02, "nats/token", runs=("c", "b")),
        judge("t", "a_vs_b", "a beats b", CPU, HOLDS, 0.02, "nats/token", runs=("a", "b")),
        not_learning,
        judge("t", "b_vs_a", "b beats a", CPU, FAILS, 0.02, "nats/token", runs=("b", "a")),
        judge("t", "shared", f"a claim only {experiment} states", CPU, HOLDS, 0.02, "points", runs=("x", "y")),
    ]


def test_the_report_lists_each_claim_once_by_verdict_within_its_length(tmp_path):
    bulk = [Row(table="counts", row=f"r{i}", metric="params", ours=i, note=CPU.note) for i in range(400)]
    for experiment in ("exp_a", "exp_b"):  # the same four claims of the same runs in both
        write_rows(experiment, CPU, [*bulk, *_claims(experiment)], tmp_path)
    text = write_report(tmp_path, scale=CPU).read_text()
    lines = text.splitlines()
    headings = [text.index(f"### {h}") for h in ("Holds (3)", "Fails (1)", "Insufficient (1)", "Not learning (1)")]
    assert headings == sorted(headings)
    (holds,) = [line for line in lines if line.startswith("- a beats b")]
    low = statistics.mean(HOLDS) - significance_bound(HOLDS, 0.02)[0]
    assert f"**+{statistics.mean(HOLDS):.3g} [{low:.3g}, " in holds and "3 seeds" in holds
    assert "exp_a: a_vs_b; exp_b: a_vs_b" in holds  # merged, both places named
    assert sum(line.startswith("- ") and " seeds**" in line for line in lines) == 6  # 4 shared + 2 own
    assert "minimum detectable effect" in next(line for line in lines if line.startswith("- c beats b"))
    assert "decides nothing: d ends at 7.0" in next(line for line in lines if line.startswith("- d beats e"))
    assert text.count(CPU.note) == 1 and "r399" not in text  # the caveat once; the bulk stays in the CSVs
    assert len(lines) < 400 and (tmp_path / "cpu" / "claims_forest.png").stat().st_size > 10_000
    assert text.index("## Claims") < text.index("## What every number") < text.index("## Tables")


def test_a_verdict_can_be_recomputed_from_the_per_seed_file(tmp_path):
    claim = judge("t", "a_vs_b", "a beats b", CPU, {1: 0.30, 2: 0.25, 4: 0.28}, 0.02, "nats/token", runs=("a", "b"))
    results = {"a": {"val_loss": 4.0, "steps": 10, "seed_runs": {2: {"val_loss": 4.1, "steps": 10}}}}
    path = write_seeds("exp", CPU, [claim], results, tmp_path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    margins = {int(r["seed"]): float(r["value"]) for r in rows if r["kind"] == "claim"}
    assert margins == {1: 0.30, 2: 0.25, 4: 0.28}  # each margin at its own seed (3 did not finish)
    bound, _ = significance_bound(list(margins.values()), 0.02)
    assert claim.low == statistics.mean(margins.values()) - bound and claim.status == "claim_holds"
    runs = {(r["run"], r["seed"], r["metric"]): float(r["value"]) for r in rows if r["kind"] == "run"}
    assert runs == {("a", "1", "val_loss"): 4.0, ("a", "1", "steps"): 10, ("a", "2", "val_loss"): 4.1,
                    ("a", "2", "steps"): 10}  # fmt: skip


def test_a_results_csv_from_before_the_interval_columns_still_reports(tmp_path):
    """A committed CSV of the earlier format (no low, high, seeds) is read, its claims shown with their mean."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "old.csv").write_text(
        "experiment,table,row,metric,paper,ours,unit,scale,run,status,note\n"
        'old,t,a_vs_b,claim,,0.3,nats/token,cpu,"a,b",claim_holds,a beats b | margin +0.3 nats/token\n')  # fmt: skip
    text = write_report(tmp_path).read_text() + write_report(tmp_path, scale=CPU).read_text()
    assert "- a beats b: **+0.3 [?, ?] nats/token, 0 seeds** (old: a_vs_b)" in text


def test_smoke_results_stay_out_of_the_committed_report(tmp_path):
    """`make smoke` writes results/smoke/ (ignored): the report of every scale leaves it out, so a fresh clone's
    `git status` stays clean after it."""
    from scaling_axes.harness.scales import SMOKE

    write_rows("exp_a", CPU, _claims("exp_a"), tmp_path)
    before = write_report(tmp_path).read_text()
    write_rows("exp_a", SMOKE, _claims("exp_a"), tmp_path)
    assert write_report(tmp_path).read_text() == before and "smoke scale" not in before
    assert write_report(tmp_path, scale=SMOKE).parent == tmp_path / "smoke"
