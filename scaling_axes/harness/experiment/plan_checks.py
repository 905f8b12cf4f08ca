"""What `report`, `power` and `simulate` check before they believe or write anything: that the folder they are
pointed at holds results of the scale (they write beside those, never into a folder that has none), and that the
scale's plan names the suite's experiments and rows and a pilot that holds their tables (each command's reader of
the pilot, `judge.read_scale` or `power.read_pilot`, then checks their digests and rows before it uses them).

    results = results_dir_of(Path("."), CPU)      # ./results, or one line: no results/cpu under PATH
    plan = checked_plan(CPU, Path("."), names)    # the plan, its pilot read under that folder
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

from scaling_axes.harness.claims.plan import AnalysisPlan, PlanError, plan_path, read_plan
from scaling_axes.harness.results import RESULTS_DIR
from scaling_axes.harness.scales import Scale
from scaling_axes.io import SuiteError


def results_dir_of(out_dir: Path, scale: Scale | None = None) -> Path:
    """`out_dir/results`, where it holds results of `scale` (its tables or per-seed files; None: of any scale), else
    one line saying where to run from."""
    results = Path(out_dir) / RESULTS_DIR
    folders = [results / scale.name] if scale else [p for p in results.glob("*") if p.is_dir()]
    if not any(any(f.rglob("*.csv")) for f in folders):  # its tables, per-seed files or pilot
        what = f"results/{scale.name}" if scale else "results of any scale"
        raise SuiteError(f"no {what} under {Path(out_dir).resolve()}: run from the checkout, or name it with --out-dir")
    return results


def checked_plan(
    scale: Scale, out_dir: Path, experiments: set[str], draft: bool = False, path: Path | None = None
) -> AnalysisPlan:
    """The scale's plan, its pilot read under `out_dir`, checked against the suite before it is believed: each
    claim's experiment is one of the suite's (`experiments`, their names), each row in that experiment's table (the
    scale's or the pilot's, where it has one), the pilot folder there with a table and per-seed file for each
    experiment an in-family claim names (a draft without its experiments part: the power
    analysis is still choosing the family, so those there); `path`: another than the plan in force (a pending
    registration). One line each, naming the file and the field."""
    path = path or plan_path(scale)
    if not path.exists():
        raise SuiteError(f"the {scale} scale has no analysis plan ({path}): write one, then size it here")
    plan = dataclasses.replace(read_plan(path, draft=draft), root=str(out_dir))
    where = path.name
    pilot = plan.pilot_dir
    if not pilot.is_dir():
        raise PlanError(
            f"{where}: pilot {plan.pilot!r} is no folder under {Path(out_dir).resolve()} nor here: restore it"
        )
    for claim in plan.claims:
        field = f"{where}: claim {claim.id}"
        if claim.experiment not in experiments:
            raise PlanError(
                f"{field}.experiment: {claim.experiment!r} is no experiment of the suite (`list` names them)"
            )
        tables = [t / f"{claim.experiment}.csv" for t in (Path(out_dir) / RESULTS_DIR / scale.name, pilot)]
        rows = {f"{r.get('table')}/{r.get('row')}" for t in tables for r in _rows(t)}
        # an experiment not run yet at this scale, or one the plan trains none of, has no rows to check
        written = any(t.exists() for t in tables) and not plan.out_of_budget(claim.experiment)
        if written and (missing := [r for r in (*claim.rows, *claim.same_measurement) if r not in rows]):
            raise PlanError(
                f"{field}.rows: {missing[0]!r} is in no table of {claim.experiment} (results/{scale.name}/ or its "
                "pilot): name a row the experiment writes"
            )
    check_thresholds(plan, where)
    needed = sorted({c.experiment for c in plan.claims if c.in_family})
    present = [name for name in needed if (pilot / f"{name}.csv").exists()]
    if not present:
        raise PlanError(f"{where}: pilot {plan.pilot} holds no table of the plan's experiments: run the pilot first")
    for name in needed if plan.experiments else present:  # a draft's family is not chosen yet: what is there
        if name not in present or not (pilot / "seeds" / f"{name}.csv").exists():
            raise PlanError(f"{where}: pilot {plan.pilot} lacks {name}'s table or per-seed file: restore it from git")
    return plan


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_thresholds(plan: AnalysisPlan, where: str) -> None:
    """A registration's thresholds are the code's (`sensitivity.THRESHOLDS`): a name it does not know, or a value the
    code has since changed, stops the judging (the analysis changed after the registration)."""
    from scaling_axes.harness.experiment.sensitivity import THRESHOLDS

    code = {t.name: t.value for t in THRESHOLDS}
    for name, value in plan.thresholds.items():
        if name not in code:
            raise PlanError(f"{where}: thresholds.{name} is no threshold of the code's ({', '.join(code)})")
        if code[name] != value:
            raise PlanError(
                f"{where}: thresholds.{name} was registered as {value:g} but the code says {code[name]:g}: the "
                "analysis changed after the registration; restore it, or register a new plan before new runs"
            )
