"""A plan's records of its claims and experiments (`plan.AnalysisPlan` holds them): each claim as the plan tests it,
each experiment's confirmatory runs, and how each is read from the plan file, field by field (one line naming the
field and what is allowed)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from scaling_axes.harness.claims.plan_fields import (
    PlanError,
    _choice,
    _flag,
    _list,
    _mapping,
    _number,
    _seeds,
    _text,
    checked_role,
)

Kind = Literal["superiority", "non_inferiority", "equivalence"]
Combine = Literal["each", "average", "one"]
Role = Literal["primary", "secondary", "control"]
Test = Literal["model", "own_spread"]
PAPERS = ("rmt", "tokenformer", "mot")


@dataclasses.dataclass(frozen=True)
class PlannedClaim:
    """One of a paper's claims as the plan tests it: its `rows` (`table/row` of `experiment`'s CSV) combined as
    `combine` says, of `kind`, within `tolerance`, sized for `effect` (the smallest effect of interest at this scale,
    in the rows' unit; its `effect_source` in the paper). `same_measurement`: rows that are one of `rows` measured
    again (shown with its verdict, never tested apart). `excluded`: why it is outside the family (out of reach, or
    unmatched by the scale's design), declared before its claim seeds trained. `fail_below_effect`: it fails where
    its upper bound is below `effect`, not only below zero."""

    id: str
    paper: str
    role: Role
    statement: str
    experiment: str
    rows: tuple[str, ...]
    combine: Combine
    kind: Kind
    effect: float
    effect_source: str
    tolerance: float = 0.0
    fail_below_effect: bool = False
    same_measurement: dict[str, str] = dataclasses.field(default_factory=dict)
    excluded: str = ""
    effect_rule: tuple[float, str] | None = None  # (fraction, run): the effect as that fraction of the run's mean
    # final loss in the pilot, fixed before the pilot (issue 83); `power --draft` computes the number a second
    # registration writes as `effect` (0 until then)

    @property
    def in_family(self) -> bool:
        return not self.excluded


@dataclasses.dataclass(frozen=True)
class PlannedExperiment:
    """An experiment's confirmatory runs: each arm (run name -> its fixed rate; None: the rate it declares) at each
    of `seeds` (new seed numbers, after the pilot's), its rows tested by `test` (`model`: the additive arm x seed
    model; `own_spread`: each row's paired t on its own margins), chosen from the pilot as `test_source` says."""

    name: str
    seeds: tuple[int, ...]
    test: Test
    test_source: str
    arms: dict[str, float | None]


CLAIM_FIELDS = (
    "id",
    "role",
    "statement",
    "experiment",
    "rows",
    "combine",
    "kind",
    "effect",
    "effect_source",
    "tolerance",
    "fail_below_effect",
    "same_measurement",
    "excluded",
    "effect_rule",
)


def read_claim(paper: str, data: Any, where: str) -> PlannedClaim:
    fields = _mapping(data, where, CLAIM_FIELDS, required=tuple(f for f in CLAIM_FIELDS[:9] if f != "effect"))
    rule = _effect_rule(fields.get("effect_rule"), f"{where}.effect_rule")
    if "effect" not in fields and rule is None:
        raise PlanError(f"{where}: missing field 'effect' (or an effect_rule: {{fraction, of}} fixed before the pilot)")
    kind = _choice(fields["kind"], f"{where}.kind", Kind)
    tolerance = _number(fields.get("tolerance", 0.0), f"{where}.tolerance", 0, math.inf)
    if (kind == "superiority") != (tolerance == 0):
        raise PlanError(f"{where}.tolerance: {tolerance:g} for a {kind} claim; superiority has none, the others one")
    rows = tuple(_text(r, f"{where}.rows") for r in _list(fields["rows"], f"{where}.rows"))
    combine = _choice(fields["combine"], f"{where}.combine", Combine)
    if not rows or (combine == "one" and len(rows) != 1):
        raise PlanError(f"{where}.rows: {len(rows)} rows for combine {combine!r} (one: exactly one, else one or more)")
    same = _mapping(fields.get("same_measurement", {}), f"{where}.same_measurement")
    role = checked_role(_choice(fields["role"], f"{where}.role", Role), kind, paper, f"{where}.role")
    return PlannedClaim(
        id=_text(fields["id"], f"{where}.id"),
        paper=paper,
        role=role,
        statement=_text(fields["statement"], f"{where}.statement"),
        experiment=_text(fields["experiment"], f"{where}.experiment"),
        rows=rows,
        combine=combine,
        kind=kind,
        effect=_number(fields.get("effect", 0.0), f"{where}.effect", 0, math.inf),
        effect_source=_text(fields.get("effect_source"), f"{where}.effect_source"),
        tolerance=tolerance,
        fail_below_effect=_flag(fields.get("fail_below_effect", False), f"{where}.fail_below_effect"),
        same_measurement={_text(k, where): _choice(v, f"{where}.same_measurement.{k}", rows) for k, v in same.items()},
        excluded=str(fields.get("excluded") or ""),
        effect_rule=rule,
    )


def _effect_rule(data: Any, where: str) -> tuple[float, str] | None:
    if data is None:
        return None
    fields = _mapping(data, where, ("fraction", "of"), required=("fraction", "of"))
    return _number(fields["fraction"], f"{where}.fraction", 0, 1, open_="low"), _text(fields["of"], f"{where}.of")


def read_planned_experiment(name: str, data: Any, where: str) -> PlannedExperiment:
    fields = _mapping(data, where, ("seeds", "test", "test_source", "arms"), required=("seeds", "test", "arms"))
    arms = _mapping(fields["arms"], f"{where}.arms")
    if not arms:
        raise PlanError(f"{where}.arms: no arm; name each run the claims compare, with its rate")
    return PlannedExperiment(
        name=name,
        seeds=_seeds(fields["seeds"], f"{where}.seeds"),
        test=_choice(fields["test"], f"{where}.test", Test),
        test_source=str(fields.get("test_source") or ""),
        arms={
            _text(arm, f"{where}.arms"): None if lr is None else _number(lr, f"{where}.arms.{arm}", 0, math.inf)
            for arm, lr in arms.items()
        },
    )


OUT_OF_REACH = "out of reach"  # how the plan words a claim its power analysis excluded
EXCLUSIONS = {  # plan field -> (what it names, how a claim's `excluded` begins, the status it takes)
    "out_of_reach": ("claim", OUT_OF_REACH, "out_of_reach"),  # written by `power --draft`
    "not_planned": ("claim", "not planned at this scale", "not_planned"),  # not retrained: its history only
    "out_of_budget": ("experiment", "out of budget", "out_of_budget"),  # the cost model's remainder cannot pay for it
}


def with_exclusions(claims: tuple[PlannedClaim, ...], fields: dict, where: str) -> tuple[PlannedClaim, ...]:
    """`claims` with each exclusion the plan declares (`EXCLUSIONS`: claim or experiment -> why) in its `excluded`."""
    out = list(claims)
    for field, (names, prefix, _) in EXCLUSIONS.items():
        declared = _mapping(fields.get(field, {}), f"{where}: {field}")
        known = {c.id for c in claims} if names == "claim" else {c.experiment for c in claims}
        if unknown := sorted(set(declared) - known):
            raise PlanError(f"{where}: {field} names {unknown[0]!r}, no {names} of the plan's claims")
        for i, claim in enumerate(out):
            key = claim.id if names == "claim" else claim.experiment
            if key in declared and not claim.excluded:
                out[i] = dataclasses.replace(
                    claim, excluded=f"{prefix}: {_text(declared[key], f'{where}: {field}.{key}')}"
                )
    return tuple(out)


def excluded_status(claim: PlannedClaim) -> str:
    """The status of a claim outside the family: unmatched, or as the plan field that excluded it says."""
    if claim.excluded.startswith("unmatched"):
        return "unmatched"
    return next(
        (status for _, prefix, status in EXCLUSIONS.values() if claim.excluded.startswith(prefix)), "out_of_reach"
    )
