"""Issue 83's evaluation: claims judged on the test split (`claims.test_split`), each margin's shift between the
splits, the per-seed file's validation curves and test windows (`experiment.seeds.series_rows`, read back by
`claims.observed`), and the seed x window-block bootstrap (`claims.bootstrap`) against independent references."""

import math

import numpy as np
import pytest

from scaling_axes.harness.claims.bootstrap import block_bootstrap
from scaling_axes.harness.claims.observed import SEED_COLUMNS, DamagedSeeds, Experiment, Observed, read_experiment
from scaling_axes.harness.claims.test_split import TEST, VALIDATION, on_test_split, shifts
from scaling_axes.harness.experiment.seeds import series_rows
from scaling_axes.harness.results import COLUMNS
from scaling_axes.io import write_csv


def _experiment() -> Experiment:
    runs = {
        "a": {4: {VALIDATION: 4.0, TEST: 4.1}, 5: {VALIDATION: 4.2, TEST: 4.4}},
        "b": {4: {VALIDATION: 4.3, TEST: 4.3}, 5: {VALIDATION: 4.5}},  # seed 5: no test loss
    }
    row = Observed(
        experiment="e",
        where="t/a_vs_b",
        index=0,
        statement="a beats b",
        unit="nats/token",
        runs=("a", "b"),
        margins={4: 0.3, 5: 0.3},
        contrast={"b": 1.0, "a": -1.0},
        measure=VALIDATION,
        arm_values={"a": {4: 4.0, 5: 4.2}, "b": {4: 4.3, 5: 4.5}},
    )
    accuracy = Observed("e", "t/top1", 1, "s", "points", ("a", "b"), {4: 1.0}, {}, "val_top1", {})
    return Experiment("e", [], [], [row, accuracy], runs, {})


def test_a_validation_contrast_is_judged_on_the_test_losses_of_the_same_runs():
    moved = on_test_split(_experiment())
    row, accuracy = moved.claims
    assert row.measure == TEST and row.margins == {4: pytest.approx(4.3 - 4.1)}  # seed 5 lacks b's test loss
    assert row.arm_values == {"a": {4: 4.1, 5: 4.4}, "b": {4: 4.3}}
    assert accuracy == _experiment().claims[1]  # not a final-loss contrast: as it was
    (shift,) = shifts(_experiment(), [4, 5])
    assert (shift.seeds, shift.validation, shift.test) == (1, pytest.approx(0.3), pytest.approx(0.2))
    assert shift.shift == pytest.approx(-0.1) and shifts(moved, [4]) == [shift]


def test_the_per_seed_file_keeps_each_runs_curve_and_test_windows_and_refuses_them_damaged(tmp_path):
    done = {"val_loss_curve": [[0, 9.1], [10, 5.25]], "test_window_losses": [4.5, 4.25, 4.75]}
    rows = series_rows("a", 4, done)
    write_csv(tmp_path / "e.csv", COLUMNS, [])
    write_csv(tmp_path / "seeds" / "e.csv", SEED_COLUMNS, rows, checksum=True)
    ex = read_experiment(tmp_path, "e")
    assert ex.windows == {"a": {4: (4.5, 4.25, 4.75)}} and ex.curves == {"a": {4: ((0, 9.1), (10, 5.25))}}
    rows[1]["value"] = "4.5 nan 4.75"
    write_csv(tmp_path / "seeds" / "e.csv", SEED_COLUMNS, rows, checksum=True)
    with pytest.raises(DamagedSeeds, match="windows of a seed 4 is not finite numbers"):
        read_experiment(tmp_path, "e")


def _windows(rng, seeds, n, seed_sd, window_sd, shared_sd=0.0):
    """Two arms' per-window losses: b above a by 0.1 plus a seed effect and window noise; `shared_sd`, a window
    difficulty both arms share (what pairing cancels)."""
    shared = rng.normal(0, shared_sd, n)
    out = {"a": {}, "b": {}}
    for k in seeds:
        out["a"][k] = 4.0 + shared + rng.normal(0, window_sd, n)
        out["b"][k] = 4.1 + shared + rng.normal(0, seed_sd) + rng.normal(0, window_sd, n)
    return out


CONTRAST = {"b": 1.0, "a": -1.0}


def test_the_bootstrap_estimate_is_the_mean_margin_and_without_window_noise_a_seed_bootstrap():
    rng = np.random.default_rng(1)
    seeds = list(range(4, 14))
    windows = _windows(rng, seeds, 200, 0.05, 0.0)
    found = block_bootstrap(windows, CONTRAST, seeds, 0.025)
    margins = np.array([np.mean(windows["b"][k] - windows["a"][k]) for k in seeds])
    assert found.estimate == pytest.approx(margins.mean(), rel=1e-12)
    other = np.random.default_rng(99).choice(margins, size=(20000, len(seeds))).mean(axis=1)
    low, high = np.quantile(other, [0.025, 0.975])
    assert found.low == pytest.approx(low, abs=0.004) and found.high == pytest.approx(high, abs=0.004)


def test_one_seeds_interval_is_its_windows_standard_error_and_a_shared_window_difficulty_cancels():
    rng = np.random.default_rng(2)
    windows = _windows(rng, [4], 2000, 0.0, 0.3)
    found = block_bootstrap(windows, CONTRAST, [4], 0.025)
    se = np.std(windows["b"][4] - windows["a"][4], ddof=1) / math.sqrt(2000)
    assert (found.high - found.low) / 2 == pytest.approx(1.96 * se, rel=0.15)
    shared = _windows(np.random.default_rng(2), [4], 2000, 0.0, 0.3, shared_sd=1.0)
    with_shared = block_bootstrap(shared, CONTRAST, [4], 0.025)
    assert with_shared.high - with_shared.low == pytest.approx(found.high - found.low, rel=0.15)
    assert with_shared.p_hold < 0.025 and found.p_hold < 0.025  # 0.1 nats above, se about 0.01


def test_the_bootstrap_refuses_what_it_cannot_pair():
    windows = {"a": {4: [1.0] * 40}, "b": {4: [1.0] * 39}}
    assert block_bootstrap(windows, CONTRAST, [4], 0.025) is None
    assert block_bootstrap({"a": {4: [1.0] * 40}}, CONTRAST, [4], 0.025) is None
