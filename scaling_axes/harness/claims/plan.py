"""A scale's pre-registered analysis plan: `scaling_axes/plans/<scale>.yaml`, written and committed before any of its
claim seeds trains, read here into typed records and checked field by field (one line naming the field and what is
allowed).

It names, per paper, its primary claims (Holm within the paper) and its secondary ones (a Benjamini-Yekutieli
family of their own, which the primaries do not protect); per claim, the rows of the experiment that state it, how
their margins combine (`each`: every step, an intersection-union test; `average`: one contrast; `one`: a row chosen
before the data, the rows that are the same measurement shown with it), its kind (superiority, non-inferiority,
equivalence), tolerance and smallest effect of interest with its source; per experiment, the fresh seeds, whether
its rows are tested on the arm x seed model or on their own spread, and the rate each arm trains at. Claims that the
power analysis (`claims.power`) puts out of reach are outside the family, with why. The plan's digest is recorded
by every claim run when it trains; a verdict whose runs recorded another decides nothing.

    plan = plan_for(CPU)          # None where the scale has no plan: its claims are exploratory, nothing decided
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.resources
from pathlib import Path
from typing import Any

import yaml

from scaling_axes.harness.claims.plan_fields import (
    CONTROLS,
    CostModel,
    DecisionRules,
    PlanError,
    _list,
    _mapping,
    _number,
    _seeds,
    _text,
    check_plan_file,
    read_cost,
    read_rules,
    read_thresholds,
)
from scaling_axes.harness.claims.plan_records import (
    EXCLUSIONS,
    PAPERS,
    PlannedClaim,
    PlannedExperiment,
    read_claim,
    read_planned_experiment,
    with_exclusions,
)
from scaling_axes.harness.scales import Scale


@dataclasses.dataclass(frozen=True)
class AnalysisPlan:
    """A scale's plan, as committed: its level, power, the pilot it was sized on, its policies (what the fresh
    seeds could otherwise decide, in words), its claims by paper and its experiments; `digest` of its file."""

    scale: str
    alpha: float
    power: float
    sigma_confidence: float
    max_seeds: int
    pilot: str
    pilot_seeds: tuple[int, ...]
    policies: dict[str, str]
    claims: tuple[PlannedClaim, ...]
    experiments: dict[str, PlannedExperiment]
    digest: str
    path: str
    root: str = "."  # the folder its `pilot` (a path in the checkout) is read under: `plan_for` sets it
    rules: DecisionRules = dataclasses.field(default_factory=DecisionRules)  # none named (before issue 83): t, Holm
    cost: CostModel | None = None  # its budget, priority order and throughput file (none before issue 83)
    thresholds: dict[str, float] = dataclasses.field(default_factory=dict)  # registered; the code's must equal them
    analysis_commit: str = ""  # the commit whose analysis code the registration fixes
    history: str = ""  # the pilot of the plan this one replaced: its not-retrained claims' intervals, history only

    @property
    def history_plan(self) -> AnalysisPlan | None:
        """This plan reading the replaced plan's pilot (`history`) in place of its own, else None."""
        return dataclasses.replace(self, pilot=self.history) if self.history else None

    @property
    def pilot_dir(self) -> Path:
        """The pilot under `root`, else under the working directory (the checkout, for a run with another
        --out-dir)."""
        under = Path(self.root) / self.pilot
        return under if under.is_dir() else Path(self.pilot)

    def out_of_budget(self, experiment: str) -> str:
        """Why the plan trains no run of `experiment` (its cost model's remainder cannot pay for it), else ""."""
        prefix = EXCLUSIONS["out_of_budget"][1]
        excluded = (c.excluded for c in self.claims if c.experiment == experiment)
        return next((why for why in excluded if why.startswith(prefix)), "")

    def of_paper(self, paper: str) -> list[PlannedClaim]:
        return [c for c in self.claims if c.paper == paper]

    def claim_of(self, experiment: str, row: str) -> PlannedClaim | None:
        """The claim whose rows (or same measurements) include `table/row` of `experiment`."""
        for claim in self.claims:
            if claim.experiment == experiment and (row in claim.rows or row in claim.same_measurement):
                return claim
        return None


PLAN_FIELDS = (
    "scale",
    "alpha",
    "power",
    "sigma_confidence",
    "max_seeds",
    "pilot",
    "pilot_seeds",
    "policies",
    "rules",
    "cost",
    "thresholds",
    "analysis_commit",
    "history",
)
POLICIES = ("learning_rate", "unstable", "not_learning", "missing", "pilot", "secondaries")
OPTIONAL_POLICIES = ("final_figure",)  # issue 83: which evaluations a run's final figures are


def plan_path(scale: Scale | str) -> Path:
    """Where a scale's plan is: package data, so an installed suite carries it."""
    return Path(str(importlib.resources.files("scaling_axes.plans") / f"{scale}.yaml"))


REGISTERED = "registered"  # results/<scale>/registered/: the tables of a second registration still training


def pending_path(scale: Scale | str) -> Path:
    """A registration not yet in force (issue 83): its first digest is committed before its pilot, which records
    that digest and trains into its `pilot:` folder; the second registration, its seeds and rates added, moves it to
    `plan_path`, where it judges."""
    return Path(str(importlib.resources.files("scaling_axes.plans") / "pending" / f"{scale}.yaml"))


def replaced_plans(scale: Scale | str) -> list[tuple[Path, str]]:
    """The plans a scale's plan in force replaced, oldest first, each with the folder its judged results moved to:
    `plans/history/<scale>_<name>.yaml` judged `results/<scale>/<name>/` (issue 83's swap moved issue 73's there)."""
    folder = importlib.resources.files("scaling_axes.plans") / "history"
    found = sorted(Path(str(folder)).glob(f"{scale}_*.yaml")) if folder.is_dir() else []
    return [(path, f"results/{scale}/{path.stem.removeprefix(f'{scale}_')}") for path in found]


def registering_path(scale: Scale | str) -> Path:
    """The plan a pilot, `power --draft` and `cost` read: the pending registration where there is one."""
    pending = pending_path(scale)
    return pending if pending.exists() else plan_path(scale)


def pilot_plan(scale: Scale | str, root: Path | str = ".") -> AnalysisPlan | None:
    """The pending registration a pilot trains under (its digest recorded by each run, its tables in its `pilot:`
    folder); None where none is pending (the pilot then records no plan, into results/<scale>/pilot/)."""
    return plan_for(scale, pending_path(scale), root, draft=True)


def confirming_plan(scale: Scale | str, root: Path | str = ".") -> AnalysisPlan | None:
    """The pending registration once its second part (`experiments:`) is written: its confirmatory seeds train
    under it, their tables beside the scale's (`REGISTERED`), while the plan in force goes on judging its own; both
    move at once when its last experiment finished. None where no registration is that far."""
    pending = pilot_plan(scale, root)
    return pending if pending is not None and pending.experiments else None


def training_plan(scale: Scale | str, root: Path | str = ".") -> AnalysisPlan | None:
    """The plan a confirmatory `run` trains under: the second registration while its seeds train, else the
    scale's."""
    return confirming_plan(scale, root) or plan_for(scale, root=root)


def plan_for(
    scale: Scale | str, path: Path | None = None, root: Path | str = ".", draft: bool = False
) -> AnalysisPlan | None:
    """The scale's plan, its pilot read under `root` (None where it has none: nothing at that scale is decided);
    `draft`: its experiments part may be missing still (`read_plan`)."""
    path = Path(path) if path is not None else plan_path(scale)
    if not path.exists() and not path.is_symlink():
        return None
    return dataclasses.replace(read_plan(path, draft=draft), root=str(root))


def digest_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@functools.cache
def _read(path: str, digest: str, draft: bool) -> AnalysisPlan:
    return parse_plan(yaml.safe_load(Path(path).read_text()), digest, path, draft)


def read_plan(path: Path, draft: bool = False) -> AnalysisPlan:
    """The plan at `path`, checked (a `PlanError` names the first field that is wrong); `draft`: its experiments
    part may be missing still (the power analysis is what writes it)."""
    check_plan_file(Path(path))
    try:
        return _read(str(path), digest_of(path), draft)
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise PlanError(f"{path}: not YAML ({str(error).splitlines()[0]})") from None


def parse_plan(data: Any, digest: str, path: str, draft: bool = False) -> AnalysisPlan:
    where = Path(path).name
    fields = _mapping(data, where, (*PLAN_FIELDS, *EXCLUSIONS, "papers", "experiments"))
    policies = _mapping(
        fields.get("policies"), f"{where}: policies", (*POLICIES, *OPTIONAL_POLICIES), required=POLICIES
    )
    claims = tuple(
        read_claim(paper, each, f"{where}: papers.{paper}[{i}]")
        for paper, listed in _mapping(fields.get("papers"), f"{where}: papers", (*PAPERS, CONTROLS)).items()
        for i, each in enumerate(_list(listed, f"{where}: papers.{paper}"))
    )
    claims = with_exclusions(claims, fields, where)
    experiments = {
        name: read_planned_experiment(name, each, f"{where}: experiments.{name}")
        for name, each in _mapping(fields.get("experiments", {} if draft else None), f"{where}: experiments").items()
    }
    plan = AnalysisPlan(
        scale=_text(fields.get("scale"), f"{where}: scale"),
        alpha=_number(fields.get("alpha"), f"{where}: alpha", 0, 0.5, open_="low"),
        power=_number(fields.get("power"), f"{where}: power", 0, 1, open_="both"),
        sigma_confidence=_number(fields.get("sigma_confidence"), f"{where}: sigma_confidence", 0.5, 1, open_="high"),
        max_seeds=int(_number(fields.get("max_seeds"), f"{where}: max_seeds", 2, 1000, integer=True)),
        pilot=_text(fields.get("pilot"), f"{where}: pilot"),
        pilot_seeds=_seeds(fields.get("pilot_seeds"), f"{where}: pilot_seeds"),
        policies={key: _text(value, f"{where}: policies.{key}") for key, value in policies.items()},
        claims=claims,
        experiments=experiments,
        digest=digest,
        path=str(path),
        rules=read_rules(fields.get("rules", {}), f"{where}: rules"),
        cost=read_cost(fields.get("cost"), f"{where}: cost"),
        thresholds=read_thresholds(fields.get("thresholds"), f"{where}: thresholds"),
        analysis_commit=str(fields.get("analysis_commit") or ""),
        history=str(fields.get("history") or ""),
    )
    _check_whole(plan, where, draft)
    return plan


def _check_whole(plan: AnalysisPlan, where: str, draft: bool = False) -> None:
    """What no one field shows: unique claim ids and rows, one or two primaries a paper, every in-family claim's
    experiment planned, fresh seeds that no pilot seed reuses."""
    ids = [c.id for c in plan.claims]
    if len(set(ids)) != len(ids):
        raise PlanError(f"{where}: claim id {next(i for i in ids if ids.count(i) > 1)!r} is given twice")
    rows = [(c.experiment, r) for c in plan.claims for r in (*c.rows, *c.same_measurement)]
    if len(set(rows)) != len(rows):
        twice = next(r for r in rows if rows.count(r) > 1)
        raise PlanError(f"{where}: row {twice[1]!r} of {twice[0]} belongs to two claims; a row is one claim's")
    for paper in PAPERS:
        primaries = [c for c in plan.of_paper(paper) if c.role == "primary" and c.in_family]
        if len(primaries) > 2:
            raise PlanError(f"{where}: papers.{paper} names {len(primaries)} primary claims; a paper has one or two")
    for claim in plan.claims:
        if claim.in_family and claim.experiment not in plan.experiments and not draft:
            raise PlanError(f"{where}: claim {claim.id} is in the family but experiments.{claim.experiment} is missing")
    for name, experiment in plan.experiments.items():
        if reused := sorted(set(experiment.seeds) & set(plan.pilot_seeds)):
            raise PlanError(
                f"{where}: experiments.{name}.seeds reuses pilot seed {reused[0]}: fresh seeds take new numbers"
            )
