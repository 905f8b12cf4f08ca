"""The checks of a plan file and its fields: a committed file of bounded size (`check_plan_file`), each value's type
and range, a mapping's known and required names, a list of seed numbers; each refusal one line naming the field and
what is allowed (`plan.parse_plan`)."""

from __future__ import annotations

import dataclasses
import importlib.resources
from pathlib import Path
from typing import Any, Literal, get_args

from scaling_axes.io import SuiteError


class PlanError(SuiteError, ValueError):
    """A plan file that does not say what a plan must, or says it wrongly."""


def _mapping(value: Any, where: str, allowed: tuple[str, ...] = (), required: tuple[str, ...] = ()) -> dict:
    if not isinstance(value, dict):
        raise PlanError(f"{where}: a mapping of names to values, not {type(value).__name__}")
    if allowed and (unknown := [k for k in value if k not in allowed]):
        raise PlanError(f"{where}: no field {unknown[0]!r}; fields: {', '.join(allowed)}")
    if missing := [k for k in required if k not in value]:
        raise PlanError(f"{where}: missing field {missing[0]!r}")
    return value


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise PlanError(f"{where}: a list, not {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"{where}: a text, not {value!r}")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{where}: true or false, not {value!r}")
    return value


def _number(value: Any, where: str, low: float, high: float, integer: bool = False, open_: str = "") -> float:
    """`value`, a number in [low, high]; `open_` names the ends left out ("low", "high", "both"): a level or a
    probability that is 0 or 1 sizes and decides nothing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise PlanError(f"{where}: a number{' (whole)' if integer else ''}, not {value!r}")
    low_out, high_out = open_ in ("low", "both"), open_ in ("high", "both")
    if value != value or value < low or value > high or (low_out and value == low) or (high_out and value == high):
        interval = f"{'(' if low_out else '['}{low:g}, {high:g}{')' if high_out else ']'}"
        raise PlanError(f"{where}: {value!r} is outside {interval}")
    return float(value)


def _choice(value: Any, where: str, allowed: Any) -> Any:
    options = get_args(allowed) or tuple(allowed)
    if value not in options:
        raise PlanError(f"{where}: {value!r}; allowed: {', '.join(map(str, options))}")
    return value


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    seeds = _list(value, where)
    if not seeds or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in seeds):
        raise PlanError(f"{where}: a list of seed numbers (whole, from 1), not {value!r}")
    if len(set(seeds)) != len(seeds):
        raise PlanError(f"{where}: seed {next(k for k in seeds if seeds.count(k) > 1)} is listed twice")
    return tuple(seeds)


MAX_PLAN_BYTES = 1 << 20  # a plan is a page of YAML: anything larger is not one (a device, a wrong file)


def check_plan_file(path: Path) -> None:
    """A plan is a committed file: a regular file of at most `MAX_PLAN_BYTES`, never a link out of the checkout (the
    folder that holds the package), checked before a byte of it is read."""
    checkout = Path(str(importlib.resources.files("scaling_axes"))).resolve().parent
    target = path.resolve()
    if target != path.absolute() and not target.is_relative_to(checkout):  # a link, or a linked folder above it
        raise PlanError(f"{path}: a link out of the checkout (to {target}); put the plan itself there and commit it")
    if not target.is_file():
        raise PlanError(f"{path}: not a regular file (it leads to {target}); a plan is a committed YAML file")
    if (size := target.stat().st_size) > MAX_PLAN_BYTES:
        raise PlanError(f"{path}: {size:,} bytes, over the {MAX_PLAN_BYTES:,} a plan may have; is it the plan?")


@dataclasses.dataclass(frozen=True)
class DecisionRules:
    """How a plan's tests decide: with `sign_flip`, each one-sided p is the larger of Student-t's and the exact
    sign-flip test's on the seeds' margins (valid without normality; `significance.sign_flip_p`); `each_steps`, how an
    `each` claim's steps show it fails: "holm", or "simes" where the steps share an arm (positive dependence);
    `exclusions`, how the power analysis drops claims it cannot power: "all_at_once" (every such claim of a pass,
    the plan of issue 73) or "one_at_a_time" (the least powered first, the family's thresholds recomputed after each,
    then each dropped claim readmitted while it and the family stay powered: `sizing.size_claims`)."""

    sign_flip: bool = False
    each_steps: Literal["holm", "simes"] = "holm"
    stability_veto: bool = True  # False: every seed analysed, the stability filter a sensitivity beside the verdict
    exclusions: Literal["all_at_once", "one_at_a_time"] = "all_at_once"
    verdict_split: Literal["val", "test"] = "val"  # "test": a claim on the final validation loss is judged on the
    # whole test split's loss of the same runs instead (`claims.test_split`); the validation margin shown beside it
    divergence_rate: float = 0.0  # the share of runs the power analysis assumes diverge (entering at ln(vocabulary),
    # far from the rest: `power.claim_power`), each arm's alike; 0: none
    sizing: Literal["pooled", "own_rows"] = "pooled"  # a claim's planning noise: its experiment's rows pooled
    # (`power.planning_noise`), or each of its rows on its own spread (`power.own_spread_noise`), as the test runs


def read_rules(data: Any, where: str) -> DecisionRules:
    fields = _mapping(data, where, tuple(f.name for f in dataclasses.fields(DecisionRules)))
    sign_flip, veto = (
        _flag(fields.get(k, d), f"{where}.{k}") for k, d in (("sign_flip", False), ("stability_veto", True))
    )
    each_steps = _choice(fields.get("each_steps", "holm"), f"{where}.each_steps", ("holm", "simes"))
    exclusions = _choice(
        fields.get("exclusions", "all_at_once"), f"{where}.exclusions", ("all_at_once", "one_at_a_time")
    )
    split = _choice(fields.get("verdict_split", "val"), f"{where}.verdict_split", ("val", "test"))
    diverging = _number(fields.get("divergence_rate", 0.0), f"{where}.divergence_rate", 0, 0.5)
    sizing = _choice(fields.get("sizing", "pooled"), f"{where}.sizing", ("pooled", "own_rows"))
    return DecisionRules(sign_flip, each_steps, veto, exclusions, split, diverging, sizing)


CONTROLS = "controls"  # positive controls (`role: control`) listed under `papers:`: decided alone at alpha, in no
# paper's family; an experiment whose control does not hold judges nothing (`judge.judge_plan`)


def checked_role(role: str, kind: str, paper: str, where: str) -> str:
    """A claim's role where it is listed: a positive control is a superiority claim, under `papers.controls` only."""
    if (role == "control") != (paper == CONTROLS) or (role == "control" and kind != "superiority"):
        raise PlanError(
            f"{where}: {role!r} ({kind}); a positive control is a superiority claim with role 'control', listed under "
            f"papers.{CONTROLS}, and only there"
        )
    return role


@dataclasses.dataclass(frozen=True)
class CostModel:
    """What a registration fixes of its price (issue 83): the budget in core-hours (one thread each), the order in
    which experiments are trained and priced (`experiment.cost.in_budget`), and the committed throughput file they
    are priced from."""

    budget_core_hours: float
    priority: tuple[str, ...]
    throughput: str


def read_cost(data: Any, where: str) -> CostModel | None:
    if data is None:
        return None
    fields = _mapping(
        data,
        where,
        ("budget_core_hours", "priority", "throughput"),
        required=("budget_core_hours", "priority", "throughput"),
    )
    priority = tuple(_text(name, f"{where}.priority") for name in _list(fields["priority"], f"{where}.priority"))
    if len(set(priority)) != len(priority) or not priority:
        raise PlanError(f"{where}.priority: a list of experiments, each once, not {list(priority)!r}")
    return CostModel(
        _number(fields["budget_core_hours"], f"{where}.budget_core_hours", 0, 1e6, open_="low"),
        priority,
        _text(fields["throughput"], f"{where}.throughput"),
    )


def read_thresholds(data: Any, where: str) -> dict[str, float]:
    """The thresholds a registration fixes (name -> value, as the code names them: SPIKE_NATS, ...); their names and
    values are checked against the code's (`experiment.plan_checks`)."""
    fields = _mapping(data if data is not None else {}, where)
    return {_text(name, where): _number(value, f"{where}.{name}", -1e9, 1e9) for name, value in fields.items()}
