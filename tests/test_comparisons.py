"""One recipe per comparison (issue 83): every experiment's comparisons, read from the registry, hold their arms to one
recipe at every scale but in the fields they name; below paper scale, where claims are judged, every arm's recipe is
sound; the optimiser options a recipe names reach the optimiser; REPORT.md prints the recipes from a verified file."""

import dataclasses
import math

import pytest
import torch

from scaling_axes.experiments import all_experiments
from scaling_axes.experiments.cross_architecture.recipes import recipe_at
from scaling_axes.harness.claims.observed import read_experiments
from scaling_axes.harness.experiment.comparisons import (
    Comparison,
    mismatches,
    recipe_of,
    short_of_tokens,
    unsound,
    write_recipes,
)
from scaling_axes.harness.experiment.report_recipes import recipe_lines
from scaling_axes.harness.runs import Budget, Run
from scaling_axes.harness.scales import CPU, SCALES
from scaling_axes.io import CorruptFileError
from scaling_axes.modules.tasks.lm import LanguageModel

COMPARING = [e for e in all_experiments() if e.comparisons is not None]
JUDGING_BELOW_PAPER = [s for s in SCALES.values() if s.judges_claims and not s.paper_configs]


def test_the_comparing_experiments_are_the_from_scratch_ones():
    names = {e.name for e in COMPARING}
    assert {"cross_architecture", "rmt_fig2_scaling_laws", "rmt_table3_4_resources", "mot_results_tables"} <= names


@pytest.mark.parametrize("scale", list(SCALES.values()), ids=str)
@pytest.mark.parametrize("experiment", COMPARING, ids=lambda e: e.name)
def test_every_comparison_holds_its_arms_to_one_recipe_but_what_it_names(experiment, scale):
    runs = {run.name: run for run in experiment.runs(scale)}
    found = [m for c in experiment.comparisons(scale) for m in mismatches(c, runs)]
    assert found == []


@pytest.mark.parametrize("scale", JUDGING_BELOW_PAPER, ids=str)
@pytest.mark.parametrize("experiment", COMPARING, ids=lambda e: e.name)
def test_below_paper_scale_every_arm_warms_up_and_averages_soundly(experiment, scale):
    runs = {run.name: run for run in experiment.runs(scale)}
    arms = {arm for c in experiment.comparisons(scale) for arm in c.arms}
    assert [u for arm in sorted(arms) for u in unsound(runs[arm])] == []


@pytest.mark.parametrize("scale", JUDGING_BELOW_PAPER, ids=str)
@pytest.mark.parametrize("experiment", COMPARING, ids=lambda e: e.name)
def test_every_arm_trains_the_tokens_per_parameter_its_comparison_declares(experiment, scale):
    """Issue 83: a from-scratch comparison's floor (about 20 tokens per non-embedding parameter) holds at every arm."""
    runs = {run.name: run for run in experiment.runs(scale)}
    assert [s for c in experiment.comparisons(scale) for s in short_of_tokens(c, runs)] == []


def test_the_cross_architecture_comparisons_train_every_arm_twenty_tokens_per_parameter_at_cpu():
    experiment = next(e for e in COMPARING if e.name == "cross_architecture")
    assert {c.min_tokens_per_parameter for c in experiment.comparisons(CPU)} == {20.0}


def test_the_cross_architecture_mot_trains_on_muon_with_bytes_of_eight_dimensions():
    runs = {run.name: run for run in next(e for e in COMPARING if e.name == "cross_architecture").runs(CPU)}
    for name in ("mot_125m", "mot_backbone_125m"):
        assert runs[name].lm["optimizer"] == "muon" and runs[name].sweep.rate_option == "group_lr_scale"
    assert runs["mot_125m"].config.d_byte >= 8
    assert runs["transformer_125m"].lm["betas"] == recipe_at(CPU).betas == (0.9, 0.99)


def _run(name: str, **lm) -> Run:
    budget = Budget(steps=100, batch_size=4, seq_len=32, lr=1e-3, warmup_steps=20)
    return Run(name, "transformer_rmt_49m", budget, {"vocab_size": 256, "max_seq_len": 32}, lm=lm)


def test_a_comparison_names_each_field_its_arms_differ_in():
    runs = {"a": _run("a"), "b": _run("b", betas=(0.9, 0.99)), "c": _run("c", decay_per_step=1e-4)}
    runs["d"] = dataclasses.replace(runs["a"], name="d", budget=dataclasses.replace(runs["a"].budget, warmup_steps=5))
    assert mismatches(Comparison("ab", ("a", "b")), runs) == [
        "ab: optimiser differs, a AdamW (betas 0.9, 0.95; eps 1e-08); b AdamW (betas 0.9, 0.99; eps 1e-08)"
    ]
    assert [m.split(",")[0] for m in mismatches(Comparison("ac", ("a", "c")), runs)] == ["ac: weight_decay differs"]
    assert [m.split(",")[0] for m in mismatches(Comparison("ad", ("a", "d")), runs)] == ["ad: warmup differs"]
    assert mismatches(Comparison("ad", ("a", "d"), ("warmup",), "the claim is about warmup"), runs) == []
    assert mismatches(Comparison("ax", ("a", "x")), runs) == ["ax: arms ['x'] are not runs of the experiment"]


def test_a_comparison_refuses_a_field_it_does_not_know_or_a_difference_without_a_reason():
    with pytest.raises(ValueError, match="differs names \\['learning_rate'\\]; allowed: parametrisation"):
        Comparison("x", ("a", "b"), ("learning_rate",), "why")
    with pytest.raises(ValueError, match="differ in \\('warmup',\\); say why"):
        Comparison("x", ("a", "b"), ("warmup",))


def test_unsound_names_a_short_warmup_a_small_batch_beta2_and_a_long_momentum_warmup():
    run = _run("a")
    assert unsound(run) == ["a: AdamW beta2 0.95 at 128 tokens a step"]
    short = dataclasses.replace(run, budget=dataclasses.replace(run.budget, warmup_steps=9), lm={"betas": (0.9, 0.99)})
    assert unsound(short) == ["a: warmup 9 of 100 steps, below 10%"]
    assert unsound(_run("m", optimizer="muon")) == ["m: Muon's momentum warms up over 300 of 100 steps"]
    assert unsound(_run("m", optimizer="muon", momentum_warmup=0.1)) == []


def _optimizer(**options) -> torch.optim.Optimizer:
    model = LanguageModel(
        "transformer_rmt_49m",
        {"vocab_size": 64, "max_seq_len": 16, "n_layer": 1, "d_model": 64, "n_head": 2, "mup_base_width": 32},
        lr=3e-3,
        schedule_steps=200,
        **options,
    )
    return model.configure_optimizers()["optimizer"]


def test_decay_per_step_is_the_same_decay_a_step_whatever_the_rate_and_its_mup_scale():
    optimizer = _optimizer(decay_per_step=1e-4, lr_scaled_decay=False)
    decayed = [g for g in optimizer.param_groups if g["weight_decay"] > 0]
    assert len({g["initial_lr"] for g in decayed}) == 3  # muP's per-matrix rates: the decay a step must not follow
    for group in decayed:
        assert math.isclose(group["initial_lr"] * group["weight_decay"], 1e-4, rel_tol=1e-12)
    coupled = _optimizer(weight_decay=0.1)
    assert {g["weight_decay"] for g in coupled.param_groups if g["weight_decay"] > 0} == {0.1}


@pytest.mark.parametrize(("warmup", "steps"), [(300, 300), (0.1, 20), (0.05, 10)])
def test_muon_momentum_warms_up_over_the_steps_or_fraction_given(warmup, steps):
    shape = {"vocab_size": 64, "max_seq_len": 16, "n_layer": 6, "d_model": 32, "n_head": 2, "head_dim": 16}
    shape |= {"attention_free_layers": (2,), "d_token": 32, "d_byte": 32}
    model = LanguageModel("mot_noop_noop_1024", shape, optimizer="muon", schedule_steps=200, momentum_warmup=warmup)
    assert model.configure_optimizers()["optimizer"].momentum_warmup == steps


def test_report_prints_each_comparison_from_its_verified_recipes_file(tmp_path):
    runs = {"a": _run("a"), "b": _run("b")}
    comparison = Comparison("ab", ("a", "b"), ("warmup",), "the claim is about warmup")
    path = write_recipes("toy", [comparison], runs, {"a": 2e-3}, tmp_path)
    lines = recipe_lines(tmp_path)
    assert "### toy: ab" in lines and "Arms differ in: warmup." in lines and "Why: the claim is about warmup" in lines
    row = next(line for line in lines if line.startswith("| a |"))
    assert "| 0.002 | 20% |" in row and "| 100 |" in row
    assert recipe_of(runs["b"])["lr"] == "0.001"
    subset = {k: dataclasses.replace(r, budget=dataclasses.replace(r.budget, val_windows=4)) for k, r in runs.items()}
    whole = write_recipes("whole", [comparison], subset, {}, tmp_path / "whole", whole_final=True).read_text()
    evaluated = recipe_of(subset["a"])["evaluation_tokens"]
    assert f"{evaluated}; the final figures the whole validation and test splits" in whole
    assert evaluated == f"{4 * runs['a'].budget.seq_len} a curve point" and "final figures" not in path.read_text()
    path.write_text(path.read_text().replace("0.002", "0.02"))
    with pytest.raises(CorruptFileError, match="does not match the checksum"):
        recipe_lines(tmp_path)


def test_a_recipe_table_under_a_plan_shows_what_each_arm_trained(tmp_path):
    """Issue 83's review: the tuning column gave the declared grid (5 rates x 2 draws) where an edge-extended sweep
    trained more, an arm the plan never trains showed a rate it never trained at, and a grown arm's row read as if it
    had trained its last stage alone. Under a plan, each is said from the committed files."""
    from scaling_axes.harness.claims.observed import SEED_COLUMNS
    from scaling_axes.harness.results import COLUMNS
    from scaling_axes.io import write_csv
    from tests.test_plan_decisions import _scale

    _, plan = _scale(tmp_path / "s", {4: 0.3, 5: 0.2, 6: 0.25})
    runs = {"a": _run("a"), "b": _run("b")}
    write_recipes("toy", [Comparison("ab", ("a", "b"), ("warmup",), "the claim is about warmup")], runs, {}, tmp_path)
    pilot = tmp_path / "pilot"
    write_csv(pilot / "toy.csv", COLUMNS, [])
    sweep = [(1e-3, 1, "4.1"), (1e-3, 2, "4.2"), (2e-3, 1, "4.0")]
    rows = [{"kind": "sweep", "run": "a", "seed": d, "metric": lr, "value": v} for lr, d, v in sweep]
    write_csv(pilot / "seeds" / "toy.csv", SEED_COLUMNS, rows, checksum=True)
    planned = dataclasses.replace(plan.experiments["e"], name="toy", arms={"a": 2e-3})
    plan = dataclasses.replace(plan, pilot=str(pilot), experiments={"toy": planned})
    lines = recipe_lines(tmp_path, plan, read_experiments(plan.pilot_dir, plan.experiments))
    assert next(line for line in lines if line.startswith("| a |")).endswith(
        "| 3 runs at 2 rates (the pilot's sweep) |"
    )
    assert "(declared; the plan trains it at none of its seeds)" in next(
        line for line in lines if line.startswith("| b |")
    )
    assert not any("(the pilot's sweep)" in line or "none of its seeds" in line for line in recipe_lines(tmp_path))
    grown = [("", "why", "grown: a chain's last stage"), ("g", "rate_from", "carried from h: one lr at every stage")]
    grown += [("g", "tuning", "none of its own"), ("s", "tuning", "10 runs")]
    table = [{"comparison": "gs", "arm": arm, "field": f, "value": v} for arm, f, v in grown]
    write_csv(
        tmp_path / "grown" / "recipes" / "chain.csv", ("comparison", "arm", "field", "value"), table, checksum=True
    )
    lines = recipe_lines(tmp_path / "grown")
    assert "| none of its own: carried from h: one lr at every stage |" in next(
        x for x in lines if x.startswith("| g |")
    )
    assert [x for x in lines if x.startswith("Grown: ")] == [next(x for x in lines if x.startswith("Grown: g's"))]
