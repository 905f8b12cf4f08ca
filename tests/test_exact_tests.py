"""Issue 83's decision rules against independent references: the exact sign-flip p by brute force over every sign
pattern, its seed floor, Simes' global p by its rejection rule, and both as a plan's rules apply them."""

import dataclasses
import itertools
import math
import random

import pytest

from scaling_axes.harness.claims.contrasts import own_spread
from scaling_axes.harness.claims.decisions import combined, judged
from scaling_axes.harness.claims.plan import DecisionRules, plan_for
from scaling_axes.harness.claims.plan_fields import PlanError, read_rules
from scaling_axes.significance import holm_adjusted, sign_flip_floor, sign_flip_p, simes_p
from tests.committed_plans import issue73_plan
from tests.test_plan_decisions import _claim


def brute_force(margins: list[float], shift: float) -> float:
    d = [m - shift for m in margins]
    observed = math.fsum(d)
    flips = [
        math.fsum(s * abs(x) for s, x in zip(signs, d, strict=True))
        for signs in itertools.product((1, -1), repeat=len(d))
    ]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 11])
def test_the_sign_flip_p_is_the_share_of_sign_patterns_reaching_the_observed_sum(n):
    rng = random.Random(n)
    for _ in range(5):
        margins = [rng.gauss(0.05, 0.1) for _ in range(n)]
        shift = rng.choice([0.0, -0.03, 0.04])
        assert sign_flip_p(margins, shift) == pytest.approx(brute_force(margins, shift), abs=1e-12)
    assert sign_flip_p([0.2] * n) == 2.0**-n  # every seed in the direction: the smallest p n seeds can give


def test_the_seed_floor_is_the_fewest_seeds_whose_smallest_p_is_below_the_level():
    for level, seeds in ((0.025, 6), (0.0125, 7), (0.025 / 8, 9), (0.025 / 4, 8)):
        assert sign_flip_floor(level) == seeds
        assert 2.0**-seeds < level <= 2.0 ** -(seeds - 1)


def test_simes_p_rejects_exactly_where_some_ordered_p_is_below_its_step():
    rng = random.Random(0)
    for _ in range(200):
        k = rng.randint(1, 6)
        ps = [rng.random() ** 3 for _ in range(k)]
        for alpha in (0.01, 0.025, 0.05):
            rule = any(p <= i * alpha / k for i, p in enumerate(sorted(ps), 1))
            assert (simes_p(ps) <= alpha) == rule
        assert simes_p(ps) <= min(holm_adjusted(ps)) + 1e-15
    assert simes_p([0.02, 0.03]) == pytest.approx(0.03) and min(holm_adjusted([0.02, 0.03])) == pytest.approx(0.04)


def test_with_the_sign_flip_rule_five_seeds_cannot_decide_at_the_level():
    """Issue 83: at 3-5 seeds a verdict rested on normality alone; five margins all in the paper's direction give a
    t p far below 0.025, but no sign-flip test of five seeds can go below 1/32."""
    test = own_spread([0.30, 0.31, 0.29, 0.32, 0.30])
    t_only = judged(test, _claim(), 0.025)
    exact = judged(test, _claim(), 0.025, rules=DecisionRules(sign_flip=True))
    assert t_only.p_hold < 1e-6 and exact.p_hold == pytest.approx(1 / 32)
    both_ways = judged(
        own_spread([0.3, -0.2, 0.25, 0.1, 0.2, 0.3, 0.15]), _claim(kind="non_inferiority", tolerance=0.05), 0.025
    )
    assert (
        both_ways.p_hold
        <= judged(
            own_spread([0.3, -0.2, 0.25, 0.1, 0.2, 0.3, 0.15]),
            _claim(kind="non_inferiority", tolerance=0.05),
            0.025,
            rules=DecisionRules(sign_flip=True),
        ).p_hold
    )


def test_an_each_claim_fails_by_simes_where_the_plan_says_so_and_by_holm_otherwise():
    steps = [judged(own_spread(m), _claim(combine="each"), 0.025) for m in ([-0.2, -0.25, -0.1], [-0.3, -0.2, -0.35])]
    fails = [s.p_fail for s in steps]
    holm = combined(steps, _claim(combine="each"))
    simes = combined(steps, _claim(combine="each"), DecisionRules(each_steps="simes"))
    assert holm.p_fail == pytest.approx(min(holm_adjusted(fails))) and simes.p_fail == pytest.approx(simes_p(fails))
    assert simes.p_fail <= holm.p_fail and holm.p_hold == simes.p_hold == max(s.p_hold for s in steps)


def test_a_plan_names_its_rules_or_keeps_t_alone_and_refuses_others_in_one_line():
    assert issue73_plan().rules == DecisionRules()  # issue 73's plan predates them: its verdicts unchanged
    assert plan_for("cpu").rules == DecisionRules(True, "simes", False, "one_at_a_time", "test", 0.00561, "own_rows")
    assert read_rules({"sign_flip": True, "each_steps": "simes"}, "p: rules") == DecisionRules(True, "simes")
    assert read_rules({"exclusions": "one_at_a_time"}, "p: rules").exclusions == "one_at_a_time"
    with pytest.raises(PlanError, match=r"^p: rules.sign_flip: true or false, not 'yes'$"):
        read_rules({"sign_flip": "yes"}, "p: rules")
    with pytest.raises(PlanError, match=r"^p: rules.exclusions: 'greedy'; allowed: all_at_once, one_at_a_time$"):
        read_rules({"exclusions": "greedy"}, "p: rules")
    with pytest.raises(PlanError, match="p: rules"):
        read_rules({"bonferroni": True}, "p: rules")


def test_the_power_of_the_t_and_sign_flip_rule_against_a_brute_force_simulation():
    """`claim_power` under the sign-flip rule: 0 below the seed floor; above it, P(t and the exact test both reject)
    as an independent simulation (every sign pattern enumerated) gives it, within its Monte Carlo error."""
    import numpy as np

    from scaling_axes.harness.claims.power import Noise, claim_power
    from scaling_axes.significance import t_critical

    rules = DecisionRules(sign_flip=True)
    noise, claim, alpha = Noise(0.1, 20, 0.1, ((1.0,),)), _claim(), 0.0125
    assert claim_power(claim, noise, 6, 5, alpha, rules) == 0.0  # 2^-6 > 0.0125: no six seeds decide
    assert claim_power(claim, noise, 6, 5, alpha) > 0.3  # t alone claims it can
    rng = np.random.default_rng(1)
    draws = rng.normal(claim.effect, 0.1, size=(4000, 8))
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(8))
    patterns = np.array(list(itertools.product((1.0, -1.0), repeat=8)))
    exact = ((np.abs(draws) @ patterns.T) >= draws.sum(axis=1, keepdims=True) - 1e-12).mean(axis=1)
    reference = ((t > t_critical(7, alpha)) & (exact < alpha)).mean()
    assert claim_power(claim, noise, 8, 7, alpha, rules) == pytest.approx(reference, abs=0.04)
    assert claim_power(claim, noise, 8, 7, alpha, rules) < claim_power(claim, noise, 8, 7, alpha)


def test_the_power_with_diverging_runs_is_an_independent_simulations_at_their_real_size():
    """Issue 83: where the plan assumes a share of runs diverge (each arm's run at a seed, alike), a diverged run
    enters at ln(vocabulary), nats from the rest (360 pilot sigmas here: 3.6 nats against seeds 0.01 apart), for the
    claim or against it. An independent simulation of the t test on such margins gives `claim_power`: the power
    without divergence times the chance that no run diverges, for one row and for every step of an `each`."""
    import numpy as np

    from scaling_axes.harness.claims.power import Noise, claim_power
    from scaling_axes.significance import t_critical

    noise, claim, alpha, seeds = Noise(0.1, 20, 0.1, ((1.0,),)), _claim(), 0.0125, 10
    rules = DecisionRules(divergence_rate=0.05)
    rng = np.random.default_rng(5)
    draws = rng.normal(claim.effect, 0.1, size=(20000, seeds))
    winner, loser = (rng.random((2, 20000, seeds)) < 0.05).astype(float)
    draws += 360 * 0.1 * (loser - winner)
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(seeds))
    reference = (t > t_critical(seeds - 1, alpha)).mean()
    found, clean = (
        claim_power(claim, noise, seeds, seeds - 1, alpha, rules),
        claim_power(claim, noise, seeds, seeds - 1, alpha),
    )
    assert found == pytest.approx(reference, abs=0.02)
    assert found == pytest.approx(clean * 0.95**20, rel=1e-12)  # about 0.9 without, 0.32 with
    both = claim_power(claim, noise, seeds, seeds - 1, alpha, DecisionRules(sign_flip=True, divergence_rate=0.05))
    assert both <= found + 0.02
    ladder = dataclasses.replace(_claim(combine="each"), rows=("a", "b", "c"))
    three = Noise(0.1, 20, 0.1, ((1.0, 0.5, 0.0), (0.5, 1.0, 0.5), (0.0, 0.5, 1.0)), runs=4)  # a chain of 4 arms
    each = claim_power(ladder, three, seeds, seeds - 1, alpha, rules)
    assert each == pytest.approx(claim_power(ladder, three, seeds, seeds - 1, alpha) * 0.95**40, rel=1e-12)


def test_the_seed_floor_of_a_claim_follows_its_deciding_level():
    from scaling_axes.harness.claims.power import seed_floor

    plan = issue73_plan()
    signed = dataclasses.replace(plan, rules=DecisionRules(sign_flip=True))
    ladder = dataclasses.replace(_claim(combine="each"), rows=("a", "b", "c", "d"))
    assert seed_floor(_claim(), 0.0125, plan) == 2  # t alone: two seeds give a spread
    assert seed_floor(_claim(), 0.0125, signed) == 7  # Holm over two primaries
    assert seed_floor(ladder, 0.0125, signed) == 9  # and over Fig. 2's four steps
    assert seed_floor(ladder, 0.0125, dataclasses.replace(signed, rules=DecisionRules(True, "simes"))) == 7
