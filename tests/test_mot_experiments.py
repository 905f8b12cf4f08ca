"""The MoT experiments: the mislabelled statistics reproduced and corrected, the published numbers' consistency,
the report's rows, and a MoT run (Muon + Adam, epoch order, two validation sets, byte targets) that resumes
exactly."""

import dataclasses
import math

import pytest

from experiments import mot_mixout_comparison, mot_results_tables, mot_setup
from experiments.results import published
from experiments.runner import Budget
from experiments.training import train_run
from tests.test_runner import Crash

FINEWEB = [(s, 5.0 - s / 100) for s in range(0, 100, 10)]  # 5.0 ... 4.1
FINEMATH = [(s, 9.0 - s / 50) for s in range(0, 100, 10)]  # 9.0 ... 7.2


def test_the_original_script_puts_finemath_under_the_fineweb_label() -> None:
    """plot_results.py lines 104-109: with a fraction, "fw" is FineMath's tail and "fm" FineMath's whole curve."""
    assert mot_setup.as_published(FINEWEB, FINEMATH, 1.0)["fw"] == mot_setup.tail_stats(FINEWEB, 1.0)
    tenth = mot_setup.as_published(FINEWEB, FINEMATH, 0.1)
    assert tenth["fw"] == mot_setup.tail_stats(FINEMATH, 0.1) == (pytest.approx(7.2), 0.0)
    assert tenth["fm"] == mot_setup.tail_stats(FINEMATH, 1.0)
    assert mot_setup.tail_stats(FINEWEB, 0.5)[0] == pytest.approx(sum(5.0 - s / 100 for s in range(50, 100, 10)) / 5)


def test_published_numbers_carry_the_mislabel() -> None:
    """The article's 10% 'fw' equals FineMath's last-10% mean from the run's JSON, not FineWeb's (reference 6.1)."""
    paper = published("mot")
    row = ("results_10k", "mot_noop_noop_1024")
    assert paper[(*row, "published_mean_fw_last_10")] == pytest.approx(
        paper[(*row, "finemath_mean_last_10")], abs=0.005
    )
    assert abs(paper[(*row, "published_mean_fw_last_10")] - paper[(*row, "fineweb_mean_last_10")]) > 0.25
    assert paper[(*row, "published_std_fw_last_10")] == pytest.approx(paper[(*row, "finemath_std_last_10")], abs=0.005)


def test_report_labels_each_statistic_by_the_data_it_comes_from() -> None:
    run = mot_results_tables.runs("smoke")[0]
    fineweb, finemath = run.corpus, run.data["extra_corpora"][0]
    done = {"val_loss_curves": {fineweb: FINEWEB, finemath: FINEMATH}, "step_ms": 12.5}
    rows = {r.metric: r for r in mot_results_tables.EXPERIMENT.report("smoke", {run.name: done}) if r.row == run.name}
    assert rows["fineweb_mean_last_10"].ours == pytest.approx(4.1)
    assert rows["finemath_mean_last_10"].ours == pytest.approx(7.2)
    assert rows["published_mean_fw_last_10"].ours == pytest.approx(7.2)  # as the original printed it
    assert (
        rows["published_mean_fw_last_10"].paper == 3.0 and "really FineMath" in rows["published_mean_fw_last_10"].note
    )
    assert rows["fineweb_mean_last_10"].paper == 3.296 and rows["step_ms"].ours == 12.5
    assert all(r.status in ("measured", "analytic") for r in rows.values())
    assert all("not a reproduction" in r.note for r in rows.values() if r.status == "measured")


def test_paper_scale_counts_match_and_plans_run_the_published_budget() -> None:
    for experiment, steps in ((mot_results_tables, 10_000), (mot_mixout_comparison, 100_000)):
        for run in experiment.runs("paper"):
            assert run.budget.steps == steps and run.budget.batch_size * run.budget.seq_len == 512 * 1024
            assert run.corpus == "fineweb_100bt" and run.data == {"extra_corpora": ("finemath",), "order": "epoch"}
    rows = mot_results_tables.EXPERIMENT.report("paper", {})
    params = [r for r in rows if r.metric == "params"]
    assert [r.status for r in params] == ["match"] * 3 and [r.ours for r in params] == [454_496_326, 430_366_918,
                                                                                        416_969_510]  # fmt: skip


def test_a_mot_run_with_muon_and_byte_targets_resumes_to_the_same_result(tmp_path) -> None:
    run = mot_mixout_comparison.runs("smoke")[0]
    run = dataclasses.replace(run, budget=Budget(steps=12, batch_size=4, seq_len=16, val_every=4, val_windows=2,
                                                 checkpoint_every=5))  # fmt: skip
    run = dataclasses.replace(run, overrides={**run.overrides, "max_seq_len": 16})
    straight = train_run(run, tmp_path / "straight", accelerator="cpu")
    with pytest.raises(RuntimeError, match="simulated crash"):
        train_run(run, tmp_path / "resumed", extra_callbacks=[Crash()], accelerator="cpu")
    resumed = train_run(run, tmp_path / "resumed", accelerator="cpu")
    assert resumed["val_loss"] == straight["val_loss"] and resumed["val_bpb"] is None  # byte slots: no bits per byte
    assert resumed["val_loss_curves"] == straight["val_loss_curves"] and len(straight["val_loss_curves"]) == 2
    # learning: from uniform over the 512 byte classes (ln 512 = 6.24, the zero-initialised head) to well below
    assert straight["val_loss"] < math.log(512) - 0.5
