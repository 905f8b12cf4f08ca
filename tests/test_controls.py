"""A positive control per experiment (issue 83): a difference its design must resolve, decided first and alone at
alpha, outside every paper's family; where it does not hold, the experiment's claims are `control_failed` and enter
their families at p = 1. The plan refuses a control anywhere but under `papers.controls`, or one that is not a
superiority claim."""

import csv
import dataclasses

import pytest

from scaling_axes.harness.claims.decisions import threshold
from scaling_axes.harness.claims.judge import judge_scale
from scaling_axes.harness.claims.observed import SEED_COLUMNS
from scaling_axes.harness.claims.plan import PlanError, parse_plan
from scaling_axes.harness.results import COLUMNS
from scaling_axes.harness.scales import CPU
from scaling_axes.io import write_csv

ROWS = {"t/a_vs_b": ("a", "b"), "control/wide_vs_narrow": ("wide", "narrow")}


def _claim(id_: str, role: str, row: str, kind: str = "superiority") -> dict:
    claim = {"id": id_, "role": role, "statement": id_, "experiment": "e", "rows": [row], "combine": "one"}
    return (
        claim
        | {"kind": kind, "effect": 0.1, "effect_source": "p"}
        | ({"tolerance": 0.05} if kind != "superiority" else {})
    )


def _plan(controls: list[dict] | None = None, papers: dict | None = None, **extra):
    data = {
        "scale": "cpu",
        "alpha": 0.025,
        "power": 0.8,
        "sigma_confidence": 0.8,
        "max_seeds": 20,
        "pilot": "nowhere",
        "pilot_seeds": [1, 2, 3],
        "policies": dict.fromkeys(
            ("learning_rate", "unstable", "not_learning", "missing", "pilot", "secondaries"), "x"
        ),
        "papers": papers or {"rmt": [_claim("c", "primary", "t/a_vs_b")], "controls": controls or []},
        "experiments": {
            "e": {"seeds": [4, 5, 6], "test": "own_spread", "arms": dict.fromkeys(["a", "b", "wide", "narrow"])}
        },
    }
    return parse_plan({**data, **extra}, "digest0000000000", "plan.yaml")


def _scale(tmp_path, margins: dict[str, list[float]], plan) -> dict[str, str]:
    """The experiment's table and per-seed file with each row's margins at seeds 4-6, judged: row -> status."""
    table, seeds = [], []
    for where, arms in ROWS.items():
        name, row = where.split("/")
        table.append(
            {
                "experiment": "e",
                "table": name,
                "row": row,
                "metric": "claim",
                "unit": "nats/token",
                "run": ",".join(arms),
                "status": "insufficient",
                "note": where,
            }
        )
        place = {"table": name, "row": row, "run": ",".join(arms)}
        seeds += [
            {"kind": "claim", **place, "seed": k, "metric": "nats/token", "value": m}
            for k, m in zip((4, 5, 6), margins[where], strict=True)
        ]
        seeds += [
            {"kind": "evidence", **place, "metric": f, "value": ""} for f in ("contrast", "measure", "held", "held_why")
        ]
    for arm in ("a", "b", "wide", "narrow"):
        for k in (4, 5, 6):
            seeds += [
                {"kind": "run", "run": arm, "seed": k, "metric": m, "value": v}
                for m, v in (("val_loss", 4.0), ("unigram_floor", 6.0))
            ]
            seeds.append({"kind": "plan", "run": arm, "seed": k, "value": plan.digest})
    write_csv(tmp_path / "e.csv", COLUMNS, table)
    write_csv(tmp_path / "seeds" / "e.csv", SEED_COLUMNS, seeds, checksum=True)
    judge_scale(tmp_path, CPU, plan)
    return {f"{r['table']}/{r['row']}": (r["status"], r["note"]) for r in csv.DictReader(open(tmp_path / "e.csv"))}


CLEAR, NOTHING = [0.30, 0.31, 0.29], [0.01, -0.02, 0.005]


def test_a_control_that_holds_lets_its_experiment_judge_and_costs_the_family_no_alpha(tmp_path):
    plan = _plan([_claim("wider", "control", "control/wide_vs_narrow")])
    found = _scale(tmp_path, {"t/a_vs_b": CLEAR, "control/wide_vs_narrow": CLEAR}, plan)
    assert (
        found["control/wide_vs_narrow"][0] == "claim_holds" and "alone at alpha" in found["control/wide_vs_narrow"][1]
    )
    assert found["t/a_vs_b"][0] == "claim_holds" and "Holm over the paper's primaries (1)" in found["t/a_vs_b"][1]
    control = next(c for c in plan.claims if c.role == "control")
    claims = (*plan.claims, dataclasses.replace(control, id="another"))  # a second control costs it nothing either
    assert threshold(control, claims, 0.025) == 0.025


def test_a_control_that_does_not_hold_leaves_its_experiment_judging_nothing(tmp_path):
    plan = _plan([_claim("wider", "control", "control/wide_vs_narrow")])
    found = _scale(tmp_path, {"t/a_vs_b": CLEAR, "control/wide_vs_narrow": NOTHING}, plan)
    assert found["control/wide_vs_narrow"][0] == "insufficient"
    status, note = found["t/a_vs_b"]
    assert status == "control_failed" and "its positive control wider did not hold: insufficient" in note


def test_without_a_control_the_experiment_judges_as_before(tmp_path):
    found = _scale(tmp_path, {"t/a_vs_b": CLEAR, "control/wide_vs_narrow": NOTHING}, _plan())
    assert found["t/a_vs_b"][0] == "claim_holds" and "not in the plan" in found["control/wide_vs_narrow"][1]


@pytest.mark.parametrize(
    ("papers", "words"),
    [
        ({"rmt": [_claim("c", "control", "t/a_vs_b")]}, "papers.rmt[0].role: 'control'"),
        ({"controls": [_claim("c", "primary", "t/a_vs_b")]}, "papers.controls[0].role: 'primary'"),
        ({"controls": [_claim("c", "control", "t/a_vs_b", "non_inferiority")]}, "a superiority claim"),
    ],
)
def test_a_control_out_of_place_is_refused_in_one_line(papers, words):
    with pytest.raises(PlanError) as refused:
        _plan(papers=papers)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_claim_not_planned_or_an_experiment_out_of_budget_is_outside_the_family_with_its_status(tmp_path):
    """Issue 83: the plan lists claims it does not retrain (`not_planned`) and experiments its cost model cannot pay
    for (`out_of_budget`, every claim of it); each is outside the family, with its own status and why."""
    from scaling_axes.harness.claims.judge import claim_status

    plan = _plan([_claim("wider", "control", "control/wide_vs_narrow")], not_planned={"c": "budget: history only"})
    c = next(x for x in plan.claims if x.id == "c")
    assert not c.in_family and claim_status(c, None, None) == (
        "not_planned",
        "not planned at this scale: budget: history only",
    )
    found = _scale(tmp_path / "a", {"t/a_vs_b": CLEAR, "control/wide_vs_narrow": CLEAR}, plan)
    assert found["t/a_vs_b"][0] == "not_planned"
    plan = _plan(out_of_budget={"e": "16 core-hours spent before it"})
    assert {claim_status(x, None, None)[0] for x in plan.claims} == {"out_of_budget"}
    with pytest.raises(PlanError, match=r"out_of_budget names 'f', no experiment of the plan's claims"):
        _plan(out_of_budget={"f": "x"})
    with pytest.raises(PlanError, match=r"not_planned names 'z', no claim of the plan's claims"):
        _plan(not_planned={"z": "x"})


def test_a_claim_not_planned_shows_the_replaced_plans_pilot_as_history_never_as_its_own(tmp_path):
    """Issue 83: a claim the plan does not retrain keeps its interval from the replaced plan's pilot (`history`),
    labelled as history; without `history` it shows none, and a claim the plan trains never reads the old pilot."""
    from scaling_axes.harness.experiment.report_claims import claim_line, claim_lines

    old = tmp_path / "old"
    plan = _plan(not_planned={"c": "budget: history only"}, history=str(old))
    _scale(old, {"t/a_vs_b": CLEAR, "control/wide_vs_narrow": CLEAR}, plan)
    line = next(c for c in claim_lines(old, plan) if c.claim.id == "c")
    assert line.history == str(old) and line.pilot.estimate == pytest.approx(0.30) and line.pilot_seeds == 3
    assert f"history, the replaced plan's pilot (`{old}/`, its older recipe; not evidence): +0.3 [" in claim_line(line)
    assert next(c for c in claim_lines(old, _plan(not_planned={"c": "x"}))).pilot is None
    trained = next(c for c in claim_lines(old, _plan(history=str(old))) if c.claim.id == "c")
    assert trained.pilot is None and not trained.history


def test_sizing_on_own_rows_gives_each_row_its_own_spread_at_its_own_upper_limit():
    """Issue 83's pilot: the cross-architecture control's margins spread about 0.005, the RMT row's about 0.064;
    pooled (0.034), the control fell out of reach at 20 seeds though its own spread needs the seed floor. A plan
    with `sizing: own_rows` sizes each row on its own spread, at its own upper limit, as its test will run."""
    import statistics

    from scaling_axes.harness.claims.plan import DecisionRules
    from scaling_axes.harness.claims.power import (
        PilotRow,
        own_spread_noise,
        planning_noise,
        sigma_upper_limit,
        sizing_noise,
    )
    from scaling_axes.harness.claims.sizing import size_claims

    quiet, loud = (0.050, 0.056, 0.046), (0.16, 0.04, 0.10)
    pilot = {
        ("e", "t/a_vs_b"): PilotRow("e", "t/a_vs_b", frozenset("ab"), "nats/token", "insufficient", loud),
        ("e", "control/wide_vs_narrow"): PilotRow(
            "e", "control/wide_vs_narrow", frozenset({"wide", "narrow"}), "nats/token", "insufficient", quiet
        ),
    }
    plan = _plan([_claim("wider", "control", "control/wide_vs_narrow")])
    control = next(c for c in plan.claims if c.role == "control")
    own = own_spread_noise(control, pilot, 0.8)
    assert own.sigma == pytest.approx(statistics.stdev(quiet)) and own.df == 2
    assert own.upper == pytest.approx(sigma_upper_limit(statistics.stdev(quiet), 2, 0.8))
    pooled = planning_noise(control, pilot, 0.8)
    assert pooled.sigma > 5 * own.sigma  # the loud row's noise, lent
    by_rows = dataclasses.replace(plan, rules=DecisionRules(sizing="own_rows"))
    assert sizing_noise(control, pilot, by_rows) == own and sizing_noise(control, pilot, plan) == pooled
    seeds = {s.claim.id: s.seeds for s in size_claims(by_rows, pilot)}
    assert (
        seeds["wider"] is not None
        and seeds["wider"] < {s.claim.id: s.seeds or 99 for s in size_claims(plan, pilot)}["wider"]
    )


@pytest.mark.parametrize("exclusions", ["all_at_once", "one_at_a_time"])
def test_an_experiment_whose_control_is_out_of_reach_judges_nothing_and_a_lone_control_trains_for_nothing(exclusions):
    """The review of issue 83's first draft: Fig. 2 kept its primary with its control out of reach, and RMT Table 4
    kept its control with no claim. Sized, the first leaves whole; in the second the control leaves too."""
    from scaling_axes.harness.claims.power import PilotRow
    from scaling_axes.harness.claims.sizing import size_claims

    def pilot(claim_margins, control_margins):
        rows = {"t/a_vs_b": ("ab", claim_margins), "control/wide_vs_narrow": ("wn", control_margins)}
        return {
            ("e", where): PilotRow("e", where, frozenset(runs), "nats/token", "insufficient", margins)
            for where, (runs, margins) in rows.items()
        }

    from scaling_axes.harness.claims.plan import DecisionRules

    plan = _plan([_claim("wider", "control", "control/wide_vs_narrow")])
    plan = dataclasses.replace(plan, rules=DecisionRules(sizing="own_rows", exclusions=exclusions))
    quiet, loud = (0.10, 0.11, 0.09), (0.9, -0.7, 0.1)
    sized = {s.claim.id: s for s in size_claims(plan, pilot(quiet, quiet))}
    assert sized["c"].seeds and sized["wider"].seeds  # both in reach: both sized
    sized = {s.claim.id: s for s in size_claims(plan, pilot(quiet, loud))}
    assert sized["c"].seeds is None and "positive control wider is out of reach" in sized["c"].why_out
    sized = {s.claim.id: s for s in size_claims(plan, pilot(loud, quiet))}
    assert sized["wider"].seeds is None and "the control would gate nothing" in sized["wider"].why_out
