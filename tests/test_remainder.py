"""After the pilot, `power` hands out seeds within what the pilot leaves of the registered budget (issue 83,
`experiment.remainder`): each confirmatory run priced at its arm's pilot seconds, a shared run paid once, experiments
kept whole in priority order, and an experiment the remainder cannot pay for out of the families before they are
sized again."""

import dataclasses

import pytest

from scaling_axes.harness.claims.plan import PlannedExperiment
from scaling_axes.harness.experiment.remainder import Remainder, pilot_seconds


def test_an_arms_pilot_seconds_are_the_median_of_its_seeds_spans(tmp_path):
    """A resumed seed's span counts its gap: the median keeps one such seed from setting the price."""
    from scaling_axes.harness.claims.observed import SEED_COLUMNS
    from scaling_axes.harness.results import COLUMNS
    from scaling_axes.io import write_csv

    spans = {1: (1000.0, 1100.0), 2: (2000.0, 2120.0), 3: (3000.0, 9000.0)}  # seed 3 waited 100 minutes
    rows = [
        {"kind": "run", "run": "a", "seed": k, "metric": m, "value": f"{v:.9g}"}
        for k, (start, end) in spans.items()
        for m, v in (("started_at", start), ("ended_at", end), ("val_loss", 4.0))
    ]
    write_csv(tmp_path / "e.csv", COLUMNS, [])
    write_csv(tmp_path / "seeds" / "e.csv", SEED_COLUMNS, rows, checksum=True)
    assert pilot_seconds(tmp_path, "e") == {"a": pytest.approx(120.0)}
    assert pilot_seconds(tmp_path, "absent") == {}


def _remainder(hours: float) -> Remainder:
    seconds = {("g", "x"): 3600.0, ("g", "y"): 1800.0, ("c", "z"): 360.0}
    return Remainder(hours, seconds, {"a": "g", "b": "g", "c": "c"}, ("a", "b", "c"))


def _planned(name: str, arms: tuple[str, ...], seeds: range) -> PlannedExperiment:
    return PlannedExperiment(name, tuple(seeds), "own_spread", "", dict.fromkeys(arms))


def test_seeds_are_priced_in_priority_order_a_shared_run_once_and_kept_whole_while_the_remainder_pays():
    planned = {
        "a": _planned("a", ("x",), range(4, 7)),  # 3 runs of x: 3 hours
        "b": _planned("b", ("x", "y"), range(4, 10)),  # x at 4-6 paid by a: x at 7-9 (3 h) and y at 4-9 (3 h)
        "c": _planned("c", ("z",), range(4, 14)),  # 10 runs of 6 minutes: 1 hour
    }
    assert _remainder(10).hours_of(planned) == pytest.approx({"a": 3.0, "b": 6.0, "c": 1.0})
    assert _remainder(10).out_of_budget(planned) == {}
    out = _remainder(8).out_of_budget(planned)  # a (3) fits, b (6) does not, c (1) still does
    assert set(out) == {"b"} and out["b"].startswith("its 6 seeds cost 6.00 core-hours, more than the 8.00")
    unmeasured = dataclasses.replace(_remainder(100), seconds={**_remainder(100).seconds, ("c", "z"): float("inf")})
    assert set(unmeasured.out_of_budget(planned)) == {"c"}  # an arm nothing priced never fits


def test_the_power_analysis_takes_out_whole_what_the_budget_cannot_pay_for_and_sizes_the_rest_again(monkeypatch):
    """The committed cpu plan and pilot, given a budget: generous, the draft is the plan's own; one that pays for
    nothing past the first experiment in priority, that one stays (sized again against the family that remains,
    whose thresholds loosen as claims leave it: never more seeds than alone) and every later experiment's claims are
    `out of budget`, none of their seeds handed out."""
    from scaling_axes.experiments import all_experiments
    from scaling_axes.harness.claims.plan import plan_path, read_plan
    from scaling_axes.harness.claims.plan_fields import CostModel
    from scaling_axes.harness.experiment import power_table
    from scaling_axes.harness.scales import CPU

    experiments = {e.name: e for e in all_experiments()}
    plan = read_plan(plan_path(CPU), draft=True)
    alone = power_table.draft(plan, experiments, CPU)
    priority = tuple(alone.experiments)
    costed = dataclasses.replace(plan, cost=CostModel(16.0, priority, "t.csv"))
    groups = {name: experiments[name].run_group or name for name in priority}
    seconds = {(groups[n], arm): 60.0 for n, e in alone.experiments.items() for arm in e.arms}
    first = sum(len(alone.experiments[priority[0]].seeds) * 60.0 for _ in alone.experiments[priority[0]].arms) / 3600
    for hours, kept in ((1000.0, set(priority)), (first * 1.01, {priority[0]})):
        remainder = Remainder(hours, seconds, groups, priority)
        monkeypatch.setattr(power_table.Remainder, "of", classmethod(lambda cls, *args, r=remainder: r))
        found = power_table.draft(costed, experiments, CPU)
        assert set(found.experiments) == kept and set(found.out_of_budget) == set(priority) - kept
        first_found, first_alone = found.experiments[priority[0]], alone.experiments[priority[0]]
        assert first_found.arms == first_alone.arms and set(first_found.seeds) <= set(first_alone.seeds)
        sized_alone = {s.claim.id for s in alone.sized if s.seeds is not None}
        later = [s for s in found.sized if s.claim.experiment in found.out_of_budget and s.claim.id in sized_alone]
        assert all(s.seeds is None and s.claim.excluded.startswith("out of budget: its ") for s in later)
        assert len(later) >= len(found.out_of_budget)
    assert "out_of_budget:" in power_table.draft_yaml(found)
