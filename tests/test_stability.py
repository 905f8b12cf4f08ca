"""A run that trained unstably decides nothing: a spike of its training loss (caught at every step, kept across a
resume), a rise of its validation loss, or a final loss that is an outlier among its seeds marks it `unstable`; its
seeds are left out of the measured noise; and a swept arm whose claim seeds end worse than its sweep said is
flagged, so that no claim holds or fails on it."""

import dataclasses
import json
import math
import statistics
import types
from pathlib import Path

import pytest

from scaling_axes.harness.claims.blocks import unstable as unstable_arm
from scaling_axes.harness.claims.verdicts import judge
from scaling_axes.harness.experiment.arms import sweep_check, tuning_rows
from scaling_axes.harness.experiment.noise import measured_noise, trained_runs
from scaling_axes.harness.experiment.seeds import held_by
from scaling_axes.harness.experiment.table import held_untuned
from scaling_axes.harness.scales import CPU
from scaling_axes.harness.stability import (
    SMOOTHING,
    SPIKE_NATS,
    VAL_RISE_NATS,
    Thresholds,
    instability,
    outliers,
    validation_rise,
)
from scaling_axes.harness.sweeps import Choice, Point
from scaling_axes.harness.training.callbacks import LossSpikes
from scaling_axes.significance import pooled_spread
from tests.test_verdicts import TINY, _experiment, _finish

ONE_PROCESS = types.SimpleNamespace(reduce=lambda loss, reduce_op: loss)  # a strategy's mean over one process
STEP_LOSSES = json.loads((Path(__file__).parent / "data" / "step_losses.json").read_text())  # measured: each
# step's training loss of four cpu claim runs, retrained with the suite's runner and logged at every step (issue 46)


def _feed(losses: list[float], accumulate: int = 1) -> dict:
    """LossSpikes' record after micro-batch `losses` (as Lightning hands them: each divided by the accumulation)."""
    spikes, trainer = (
        LossSpikes(),
        types.SimpleNamespace(strategy=ONE_PROCESS, accumulate_grad_batches=accumulate, global_step=0),
    )
    for i, loss in enumerate(losses):
        trainer.global_step = i // accumulate + 1
        spikes.on_train_batch_end(trainer, None, {"loss": loss / accumulate}, None, i)
    return spikes.record()["train_loss_spike"]


def _reference_spike(steps: list[float]) -> tuple[float, int]:
    """The largest step loss minus the moving average of the steps before it, in float64 by hand."""
    ema, best = None, (-math.inf, 0)
    for step, loss in enumerate(steps, 1):
        if ema is not None and loss - ema > best[0]:
            best = (loss - ema, step)
        ema = loss if ema is None else SMOOTHING * ema + (1 - SMOOTHING) * loss
    return best


def test_a_training_spike_is_measured_against_the_moving_average_before_it():
    steps = [7.6, 7.2, 6.9, 6.7, 6.6, 9.7, 6.5, 6.4, 6.3, 6.35, 6.2]  # the cpu Transformer at 9e-3, seed 1's shape
    record = _feed(steps)
    nats, step = _reference_spike(steps)
    assert record["step"] == step == 6 and record["nats"] == pytest.approx(nats) and record["loss"] == 9.7
    assert record["nats"] > SPIKE_NATS
    micro = [value for loss in steps for value in (loss - 0.1, loss + 0.1)]  # two micro-batches a step
    assert _feed(micro, accumulate=2)["nats"] == pytest.approx(nats) and _feed(micro, accumulate=2)["step"] == 6
    steady = [6.0 - 0.01 * i + (0.2 if i % 2 else -0.2) for i in range(60)]  # batch noise of +-0.2 around a trend
    assert _feed(steady)["nats"] < SPIKE_NATS


def test_measured_spikes_are_caught_and_a_hard_batch_after_a_restart_is_not():
    """Fig. 3's 1.4B stage (seed 1) rises 0.3 nats over its restart to the peak rate, then meets a hard batch of its
    data order at step 131 (0.75 above the smoothed running minimum, the old measure: `unstable`); Table 10's
    Transformer at 1e-2 spikes at step 30 (seed 1, 2.67 nats) and 31 (seed 3, 0.99), RMT D_k 12 seed 2 at step 32."""
    expected = {
        "fig3_tokenformer_1_4b_short_seed1": (131, False),
        "fig6_rmt_residual_dk12_seed2": (32, True),
        "table10_transformer_rmt_160m_seed1": (30, True),
        "table10_transformer_rmt_160m_seed3": (31, True),
    }
    for name, (step, spiked) in expected.items():
        record = _feed(STEP_LOSSES[name])
        nats, at = _reference_spike(STEP_LOSSES[name])
        assert (record["step"], at) == (step, step) and record["nats"] == pytest.approx(nats), name
        assert (record["nats"] > SPIKE_NATS) == spiked, (name, record)


def test_the_spike_record_survives_a_checkpoint():
    first, resumed = LossSpikes(), LossSpikes()
    trainer = types.SimpleNamespace(strategy=ONE_PROCESS, accumulate_grad_batches=1, global_step=0)
    steps = [7.0, 6.0, 5.5, 8.0, 5.0]
    for i, loss in enumerate(steps[:3]):
        trainer.global_step = i + 1
        first.on_train_batch_end(trainer, None, {"loss": loss}, None, i)
    resumed.load_state_dict(first.state_dict())
    for i, loss in enumerate(steps[3:], 3):
        trainer.global_step = i + 1
        resumed.on_train_batch_end(trainer, None, {"loss": loss}, None, i)
    assert resumed.record()["train_loss_spike"] == _feed(steps)


def test_instability_names_the_step_of_a_spike_or_a_validation_rise():
    spiked = {"run": "r", "train_loss_spike": {"nats": SPIKE_NATS + 0.1, "step": 11, "loss": 9.7}}
    assert "r's training loss spiked at step 11 to 9.700" in instability(spiked)
    assert instability({"run": "r", "train_loss_spike": {"nats": SPIKE_NATS - 0.1, "step": 11, "loss": 7.0}}) is None
    curve = [(40, 6.0), (80, 5.5), (120, 5.5 + VAL_RISE_NATS + 0.05), (160, 5.4)]
    assert validation_rise(curve) == (pytest.approx(VAL_RISE_NATS + 0.05), 120)
    assert "rose 0.15 nats above its running minimum at step 120" in instability({"run": "r", "val_loss_curve": curve})
    assert instability({"run": "r", "val_loss_curve": [(40, 6.0), (80, 5.5), (120, 5.45)]}) is None
    grown = [(0, 4.5), (50, 4.8), (100, 4.6), (150, 4.45)]  # a stage's restart rises above the model it grew from
    assert instability({"run": "r", "val_loss_curve": grown}) is None


def test_an_outlier_seed_is_named_and_a_wide_but_even_spread_is_not():
    assert list(outliers({1: 4.828, 2: 4.767, 3: 5.710})) == [3]  # RMT Fig. 6 D_k=64 at cpu (issue 46)
    assert outliers({1: 4.534, 2: 4.886, 3: 5.039}) == {}  # spread evenly: the noise, not one seed
    assert outliers({1: 4.8, 2: 5.7}) == {}  # two seeds cannot say which is the outlier
    assert outliers({1: 5.0, 2: 5.01, 3: 5.1}) == {}  # within OUTLIER_NATS


def test_a_claim_on_an_unstable_run_decides_nothing():
    """The judge reads each arm's seeds from the per-seed file: a spike, or a seed whose final loss is an outlier
    among the arm's seeds, keeps its claims from a verdict, saying which; a stable arm does not."""
    t = Thresholds()
    spiked = {1: {"val_loss": 4.0}, 2: {"val_loss": 4.05, "spike_nats": 2.4}}
    assert "a seed 2 spiked 2.40 nats above its moving average" in unstable_arm("a", spiked, t)
    outlier = {1: {"val_loss": 4.0}, 2: {"val_loss": 4.02}, 3: {"val_loss": 5.0}}
    assert "seed 3's final loss 5.000 is an outlier" in unstable_arm("a", outlier, t)
    assert unstable_arm("a", {1: {"val_loss": 4.0}, 2: {"val_loss": 4.02}, 3: {"val_loss": 4.03}}, t) == ""
    risen = {1: {"val_loss": 4.0, "val_rise_nats": 0.3}}
    assert "validation loss rose 0.30 nats" in unstable_arm("a", risen, t)


def test_unstable_seeds_are_left_out_of_the_measured_noise(tmp_path):
    from scaling_axes.harness.runs import Budget, Run

    runs = [
        Run(name, "transformer_124m", Budget(3, 4, 64), TINY, corpus="embedded_news", tokenizer="bytes")
        for name in "ab"
    ]
    experiment = _experiment(runs)
    spike = {"nats": 2.4, "step": 11, "loss": 9.7}
    for name, losses in {"a": [4.0, 4.02, 4.04, 4.6], "b": [4.3, 4.31, 4.33]}.items():
        for k, loss in enumerate(losses, 1):
            _finish(
                tmp_path,
                experiment,
                name + ("" if k == 1 else f"_seed{k}"),
                val_loss=loss,
                **({"train_loss_spike": spike} if (name, k) == ("b", 3) else {}),
            )
    noise, rows = measured_noise(trained_runs(tmp_path / "runs" / "verdict_test" / "cpu"))
    stable = [[4.0, 4.02, 4.04], [4.3, 4.31]]  # a's 4th seed an outlier, b's 3rd spiked
    dof = sum(len(v) - 1 for v in stable)
    expected = math.sqrt(sum((len(v) - 1) * statistics.variance(v) for v in stable) / dof)
    assert noise["val_loss"] == pytest.approx((expected, dof))
    assert "2 unstable seeds left out" in rows[0].note


def test_train_loss_claims_measure_the_train_loss_and_its_noise_is_its_own(tmp_path):
    """Table 10 judges the smoothed final train loss: its claims' contrasts are of that measure, and its measured
    noise is its own spread over seeds (here 0.1, ten times the validation loss's)."""
    from scaling_axes.experiments.rmt import table10_variants as table10
    from scaling_axes.harness.runs import Budget, Run
    from scaling_axes.harness.training.curves import final_train_loss

    runs = [
        Run(name, "transformer_124m", Budget(3, 4, 64), TINY, corpus="embedded_news", tokenizer="bytes")
        for name in "ab"
    ]
    experiment = _experiment(runs)
    train = {"a": [3.0, 3.1, 3.2], "b": [3.5, 3.6, 3.7]}
    for name, finals in train.items():
        for k, final in enumerate(finals, 1):
            curve = [[step, final + 1.0 - step / 20] for step in range(1, 21)]  # its smoothed end: final + 0.0
            _finish(
                tmp_path,
                experiment,
                name + ("" if k == 1 else f"_seed{k}"),
                val_loss=4.0 + 0.01 * k,
                train_loss_curve=curve,
            )
    trained = trained_runs(tmp_path / "runs" / "verdict_test" / "cpu")
    noise, _ = measured_noise(trained)
    ends = [[final_train_loss(done) for done in seeds.values()] for seeds in trained.by_run.values()]
    assert (
        noise["train_loss"] == pytest.approx(pooled_spread(ends)) and noise["train_loss"][0] > 5 * noise["val_loss"][0]
    )
    claims = table10.claim_rows(CPU, {})
    assert claims and {claim.evidence.measure for claim in claims} == {"train_loss"}  # their contrast's measure


def _swept(sweep_draws: list[float], claim_seeds: list[float]) -> dict:
    lr = 3e-3
    points = {lr: {k: Point(loss) for k, loss in enumerate(sweep_draws, 1)}, 1e-3: {1: Point(6.0)}}
    seeds = {k: {"run": "a", "val_loss": loss} for k, loss in enumerate(claim_seeds[1:], 2)}
    return {"run": "a", "val_loss": claim_seeds[0], "seed_runs": seeds, "tuning": Choice(lr, None, points)}


def test_an_arm_whose_claim_seeds_end_worse_than_its_sweep_is_flagged_and_decides_nothing():
    """The cross-architecture Transformer at cpu before issue 46: its sweep 4.946 at 9e-3 (one draw), its five claim
    seeds 5.171-5.543 there."""
    claim = judge("t", "a_vs_b", "a beats b", CPU, [0.3, 0.25, 0.28], runs=("a", "b"))
    results = {"a": _swept([4.946], [5.171, 5.402, 5.543, 5.467, 5.328]), "b": {}}
    difference, bound = sweep_check(results["a"])
    assert difference == pytest.approx(statistics.fmean([5.171, 5.402, 5.543, 5.467, 5.328]) - 4.946)
    assert difference > bound
    held = held_untuned(claim, results)
    assert held.status == "insufficient" and "a's claim seeds end +0.436 nats/token from its sweep" in held.note
    assert held_by(held)[1].startswith("an arm's lr is not tuned")  # what the per-seed file holds it to
    row = next(r for r in tuning_rows(results) if r.metric == "claim_seeds_minus_sweep")
    assert row.status == "differs" and row.ours == pytest.approx(difference)
    agreeing = {"a": _swept([5.151, 5.166], [5.189, 5.154, 5.17]), "b": {}}  # the same arm at 3e-3
    assert held_untuned(claim, agreeing) == claim
    assert next(r for r in tuning_rows(agreeing) if r.metric == "claim_seeds_minus_sweep").status == "match"
    assert sweep_check({**agreeing["a"], "tuning_anchor": "other"}) is None  # a carried rate: checked where swept


def test_a_trained_run_keeps_its_largest_spike_in_done_json(tmp_path):
    from scaling_axes.harness.experiment.schedule import Schedule
    from scaling_axes.harness.runs import Budget, Run

    run = Run(
        "a",
        "transformer_124m",
        Budget(steps=6, batch_size=2, seq_len=32, val_windows=2, log_every=1),
        TINY,
        corpus="embedded_news",
        tokenizer="bytes",
        lm={"z_loss": 0.0},
    )
    done = Schedule.of(_experiment([run]), CPU, tmp_path / "runs").train(run)
    logged = [loss for _, loss in done["train_loss_curve"]]  # every step's loss, as Lightning logged it
    nats, step = _reference_spike(logged)
    spike = done["train_loss_spike"]
    assert spike["step"] == step and spike["nats"] == pytest.approx(nats, rel=1e-5)


def test_a_claim_measured_before_training_stands_whatever_training_did_later():
    """Growth preserving the function is measured at the growth, before the stage trains: a spike of that stage's
    training does not bear on it (a claim on its final loss it does)."""
    from scaling_axes.harness.claims.blocks import blocked
    from scaling_axes.harness.claims.observed import Experiment, Observed

    runs = {"g": {k: {"val_loss": 4.0, "spike_nats": 1.4 * (k == 2)} for k in (1, 2, 3)}}
    experiment = Experiment("fig3", [], [], [], runs, {})
    row = Observed("fig3", "fig3/g_growth", 0, "s", "nats/token", ("g",), {1: 0.0, 2: 0.0, 3: 0.0}, {}, "", {})
    at_growth = dataclasses.replace(row, before_training=True)
    assert blocked(at_growth, experiment, [1, 2, 3], None, Thresholds()) == ("", "")
    assert blocked(row, experiment, [1, 2, 3], None, Thresholds())[0] == "unstable"
