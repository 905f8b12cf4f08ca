"""How the power analysis drops claims it cannot power (issue 83, `claims.sizing`): one at a time, the least powered
first, the family's thresholds recomputed after each; then each dropped claim readmitted, the last dropped first,
while the family with it stays powered and within budget; each dropped claim's power at the final family stated."""

import dataclasses

import numpy as np
import pytest

from scaling_axes.harness.claims import sizing
from scaling_axes.harness.claims.plan import DecisionRules, PlannedExperiment, plan_for
from scaling_axes.harness.claims.power import PilotRow
from tests.test_plan_decisions import _claim


def _family(sds: tuple[float, ...], exclusions: str):
    """Primaries c0.. of one paper, each its own experiment whose pilot margins have exactly the SD given."""
    claims = tuple(_claim(id=f"c{i}", experiment=f"e{i}", rows=(f"t/r{i}",)) for i in range(len(sds)))
    z = np.array([-1.0, 0.0, 1.0])  # SD 1 on three seeds
    pilot = {
        (f"e{i}", f"t/r{i}"): PilotRow(
            f"e{i}", f"t/r{i}", frozenset({f"a{i}", f"b{i}"}), "nats/token", "x", tuple(sd * z)
        )
        for i, sd in enumerate(sds)
    }
    experiments = {f"e{i}": PlannedExperiment(f"e{i}", (4, 5, 6), "own_spread", "x", {}) for i in range(len(sds))}
    plan = dataclasses.replace(
        plan_for("cpu"), claims=claims, experiments=experiments, rules=DecisionRules(exclusions=exclusions)
    )
    return plan, pilot


def test_one_at_a_time_keeps_a_claim_that_dropping_all_at_once_loses_and_states_the_final_familys_power():
    """Four primaries under Holm: all at once, three fail at alpha/4 and leave together; one at a time, the
    hopeless one leaves first, then the next weakest, and c1 is powered at alpha/2. Each dropped claim's power
    against the final family is below 0.8, as the plan's check asks."""
    sds = (0.05, 0.06, 0.08, 0.3)
    at_once = {s.claim.id: s for s in sizing.size_claims(*_family(sds, "all_at_once"))}
    one = {s.claim.id: s for s in sizing.size_claims(*_family(sds, "one_at_a_time"))}
    assert [k for k, s in at_once.items() if s.seeds] == ["c0"]
    assert [k for k, s in one.items() if s.seeds] == ["c0", "c1"] and one["c1"].power >= 0.8
    assert "exclusion 1, one at a time" in one["c3"].why_out and "exclusion 2, one at a time" in one["c2"].why_out
    for dropped in ("c2", "c3"):
        assert one[dropped].seeds is None and one[dropped].power < 0.8
        assert f"against the final family {one[dropped].power:.0%}" in one[dropped].why_out
    alone_with_final = sizing.size_claims(*_family((0.05, 0.06, 0.08), "one_at_a_time"))  # c2 readmitted: c1 and c2
    assert alone_with_final[2].seeds is None  # cannot both be powered, so c2 stays out
    assert alone_with_final[2].power == pytest.approx(one["c2"].power, abs=0.02)  # (simulated sign-flip power)


def test_a_claim_dropped_early_is_readmitted_when_the_final_family_powers_it_and_the_budget_holds(monkeypatch):
    """Scripted powers by family size that cross: b is weakest among three (dropped first) but strong among two;
    c drops next; b alone with a is powered, so it is readmitted. A budget that refuses keeps it out."""
    powers = {"a": {3: 0.9, 2: 0.9, 1: 0.9}, "b": {3: 0.5, 2: 0.95}, "c": {3: 0.6, 2: 0.7}}

    def scripted(claim, claims, plan, pilot):
        if claim.excluded:
            return sizing.Sized(claim, None, 0.0, None, 0.0, claim.excluded)
        power = powers[claim.id][sum(c.in_family for c in claims)]
        if power >= 0.8:
            return sizing.Sized(claim, None, 0.0, 10, power)
        return sizing.Sized(claim, None, 0.0, None, power, f"out of reach: {power:.0%}")

    monkeypatch.setattr(sizing, "_size", scripted)
    plan, pilot = _family((0.1, 0.1, 0.1), "one_at_a_time")
    plan = dataclasses.replace(
        plan, claims=tuple(dataclasses.replace(c, id=k) for c, k in zip(plan.claims, "abc", strict=True))
    )
    found = {s.claim.id: s for s in sizing.size_claims(plan, pilot)}
    assert (found["a"].seeds, found["b"].seeds, found["c"].seeds) == (10, 10, None)
    assert "exclusion 2, one at a time, at 70% power" in found["c"].why_out  # b's drop undone
    refused = {s.claim.id: s for s in sizing.size_claims(plan, pilot, fits=lambda sized: False)}
    assert refused["b"].seeds is None and "against the final family 95%" in refused["b"].why_out


def test_a_claim_the_pilot_found_unmatched_is_out_of_reach_not_sized():
    """A row its scale's design leaves unmatched (Fig. 3's third of the cost where the grown chain costs 0.93x the
    scratch run's at cpu scale) decides nothing at any seed: no seeds are spent on it, whatever its spread."""
    plan, pilot = _family((0.05, 0.05), "one_at_a_time")
    pilot[("e1", "t/r1")] = dataclasses.replace(pilot[("e1", "t/r1")], status="unmatched")
    found = {s.claim.id: s for s in sizing.size_claims(plan, pilot)}
    assert found["c0"].seeds and found["c1"].seeds is None
    assert found["c1"].why_out.startswith("out of reach: the pilot found t/r1 unmatched by this scale's design")


def test_an_out_of_reach_claim_says_its_best_power_and_what_binds_it():
    """Under divergence power rises, then falls with seeds: a claim out of reach states its best power and where,
    and its power at the cap were no run to diverge (the review: "20 seeds give 74%" was the last count tried). A
    row no pilot seed reached says so, not "no margin"."""
    from scaling_axes.harness.claims.power import claim_power, test_df

    plan, pilot = _family((0.3,), "one_at_a_time")
    plan = dataclasses.replace(plan, rules=DecisionRules(divergence_rate=0.03))
    [found] = sizing.size_claims(plan, pilot)
    noise = sizing.sizing_noise(found.claim, pilot, plan)
    powers = {
        n: claim_power(found.claim, noise, n, test_df(found.claim, "own_spread", n, pilot), found.threshold, plan.rules)
        for n in range(2, 21)
    }
    peak = max(powers, key=powers.get)
    assert 2 < peak < 20 and powers[20] < powers[peak] < 0.8  # a peak inside the range, below the power asked
    assert found.seeds is None and f"at most {powers[peak]:.0%} power, at {peak} seeds (of at most 20)" in found.why_out
    clean = claim_power(found.claim, noise, 20, 19, found.threshold, DecisionRules())
    assert f"; {clean:.0%} at 20 were no run to diverge (each assumed to at 0.03)" in found.why_out
    pilot[("e0", "t/r0")] = dataclasses.replace(pilot[("e0", "t/r0")], status="never_reached")
    [held] = sizing.size_claims(plan, pilot)
    assert held.why_out.startswith("out of reach: the pilot found t/r0 never reached: no pilot seed reached")
