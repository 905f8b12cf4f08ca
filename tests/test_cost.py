"""The cost model a registration fixes (issue 83, `experiment.cost`): each arm's throughput measured over a probe of
its own model and batch, every planned run priced from it (the pilot exactly, the confirmatory stage at the seed
ceiling), and the experiments trained in priority order while the budget's remainder pays for each whole."""

import dataclasses

import pytest

from scaling_axes.harness.claims.plan_fields import PlanError, read_cost
from scaling_axes.harness.experiment.cost import (
    Priced,
    Throughput,
    arm_key,
    in_budget,
    measure,
    measure_into,
    price,
    read_throughput,
)
from scaling_axes.harness.runs import Experiment
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.sweeps import Sweep
from tests.test_run_safety import tiny


def _experiment(steps: int = 12, val_every: int | None = None) -> Experiment:
    run = tiny(steps)
    run = dataclasses.replace(run, budget=dataclasses.replace(run.budget, val_every=val_every, val_windows=6))
    swept = dataclasses.replace(run, name="swept", sweep=Sweep((1e-3, 3e-3, 1e-2)))
    wider = dataclasses.replace(run, name="wider", overrides={**run.overrides, "d_model": 64})
    return Experiment("costed", "test", lambda scale: [swept, wider], lambda scale, results: [])


def test_the_pilot_is_priced_exactly_and_the_confirmatory_stage_at_the_ceiling():
    experiment = _experiment()
    swept, wider = experiment.runs(SMOKE)
    measured = {arm_key(swept): Throughput(0.5, 10.0), arm_key(wider): Throughput(2.0, 20.0)}
    found = price(experiment, SMOKE, measured, pilot_seeds=3, ceiling=20)
    from scaling_axes.harness.sweeps import planned_points

    points = len(planned_points(swept.sweep))
    one = {"swept": 10.0 + 12 * 0.5, "wider": 20.0 + 12 * 2.0}
    assert found.pilot_seconds == pytest.approx(points * one["swept"] + 3 * (one["swept"] + one["wider"]))
    assert found.confirmatory_seconds == pytest.approx(20 * (one["swept"] + one["wider"]))
    assert found.unmeasured == () and found.runs == {"costed/swept", "costed/wider"}
    shared = price(experiment, SMOKE, measured, 3, 20, paid=frozenset({"costed/wider"}))  # priced by another
    assert shared.confirmatory_seconds == pytest.approx(20 * one["swept"])
    assert price(experiment, SMOKE, {arm_key(swept): Throughput(0.5, 10.0)}, 3, 20).unmeasured == ("wider",)
    assert arm_key(swept) == arm_key(dataclasses.replace(swept, seed=9, budget=dataclasses.replace(swept.budget, lr=1)))
    validated = _experiment(val_every=4).runs(SMOKE)[0]  # 3 validations of 6 windows: a third of a step's work each
    per_validation = 6 / (3 * validated.budget.batch_size) * 0.5
    assert Throughput(0.5, 10.0).run_seconds(validated) == pytest.approx(one["swept"] + 3 * per_validation)


def test_an_experiment_the_remainder_cannot_pay_for_is_out_whole_and_a_smaller_one_after_it_may_fit():
    a, b, c = (Priced(n, h * 3600, 0.0) for n, h in (("a", 5), ("b", 12), ("c", 3)))
    kept, out = in_budget([a, b, c], 10)
    assert kept == [a, c] and out == [b]
    assert in_budget([Priced("d", 0.0, 0.0, ("arm",))], 10) == ([], [Priced("d", 0.0, 0.0, ("arm",))])


def test_each_arm_is_measured_once_over_a_probe_of_its_own_shape(tmp_path):
    rows = measure(_experiment(), SMOKE, steps=4)
    assert [r["model"] for r in rows] == ["transformer_124m"] * 2 and len({r["arm"] for r in rows}) == 2
    assert all(float(r["seconds_per_step"]) > 0 and float(r["fixed_seconds"]) >= 0 and r["steps"] == 4 for r in rows)
    path = tmp_path / "cost" / "throughput.csv"
    assert measure_into(path, [_experiment()], SMOKE, steps=4) == 2 and set(read_throughput(path)) == {
        r["arm"] for r in rows
    }


def test_a_plans_cost_model_is_read_or_refused_in_one_line():
    found = read_cost({"budget_core_hours": 16, "priority": ["a", "b"], "throughput": "t.csv"}, "p: cost")
    assert (found.budget_core_hours, found.priority, found.throughput) == (16.0, ("a", "b"), "t.csv")
    assert read_cost(None, "p: cost") is None
    with pytest.raises(PlanError, match=r"^p: cost.priority: a list of experiments, each once"):
        read_cost({"budget_core_hours": 16, "priority": ["a", "a"], "throughput": "t.csv"}, "p: cost")
    with pytest.raises(PlanError, match=r"^p: cost.budget_core_hours: 0 is outside"):
        read_cost({"budget_core_hours": 0, "priority": ["a"], "throughput": "t.csv"}, "p: cost")


def test_the_registration_declares_out_of_budget_exactly_what_its_priced_plan_cannot_pay_for(tmp_path, monkeypatch):
    """The committed throughput, the recipes at this commit and the cpu plan's priority and budget price the plan
    again; the experiments it declares `out_of_budget` are those the remainder cannot pay for, and a pilot of one
    (the plan read as the pending registration it was) is refused before anything trains."""
    from pathlib import Path

    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.claims import plan as plan_module
    from scaling_axes.harness.experiment.command import main
    from scaling_axes.harness.experiment.cost import price_in_order
    from scaling_axes.harness.scales import CPU
    from scaling_axes.io import SuiteError

    monkeypatch.setattr(plan_module, "pending_path", plan_module.plan_path)
    plan, by_name = plan_module.pilot_plan(CPU), {e.name: e for e in all_experiments()}
    assert plan is not None and plan.path == str(plan_module.plan_path(CPU))
    measured = read_throughput(Path(plan.cost.throughput))
    ordered = [by_name[n] for n in plan.cost.priority]
    priced = price_in_order(ordered, CPU, measured, len(plan.pilot_seeds), plan.max_seeds)
    _, out = in_budget(priced, plan.cost.budget_core_hours)
    assert [p.experiment for p in out] == [n for n in plan.cost.priority if plan.out_of_budget(n)] != []
    with pytest.raises(SuiteError, match=r"trains none of its runs \(out of budget: the cost model"):
        main(by_name[out[0].experiment], ["--scale", "cpu", "--pilot", "--out-dir", str(tmp_path)])
    assert not any(tmp_path.iterdir())


def test_adamws_betas_change_no_steps_cost_in_a_measured_row_or_a_run(tmp_path):
    """A run's AdamW betas are no part of what its step costs (`cost.COST_FREE`): a run and a row measured before its
    betas changed (Tokenformer Fig. 3's 0.95 -> 0.99, issue 83) price alike; its optimiser does not."""
    import json

    from scaling_axes.harness.experiment.cost import COLUMNS
    from scaling_axes.io import write_csv

    run = _experiment().runs(SMOKE)[0]
    moved = dataclasses.replace(run, lm={**run.lm, "betas": (0.9, 0.99)})
    assert arm_key(moved) == arm_key(run) != arm_key(dataclasses.replace(run, lm={**run.lm, "optimizer": "muon"}))
    model, overrides, batch, seq_len, lm = json.loads(arm_key(run))
    stored = json.dumps([model, overrides, batch, seq_len, {**lm, "betas": [0.9, 0.95]}], sort_keys=True)
    path = tmp_path / "cpu" / "cost" / "throughput.csv"
    row = dict(zip(COLUMNS, ("e", stored, run.model, 50, 0.5, 3.0, "x86_64"), strict=True))
    write_csv(path, COLUMNS, [row], checksum=True)
    assert read_throughput(path) == {arm_key(moved): Throughput(0.5, 3.0)}
