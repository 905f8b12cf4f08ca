"""REPORT.md's "Before and after" (issue 83): each plan the one in force replaced (`plan.replaced_plans`), its
claims judged again by today's code on the results it judged (moved whole into their history folder), their
verdicts counted and set claim by claim beside the plan in force's. History, never evidence: the replaced plan's
recipes are the ones its successor was written to mend."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path

from scaling_axes.harness.claims.plan import AnalysisPlan, plan_for, replaced_plans
from scaling_axes.harness.experiment.report_claims import ClaimLine, claim_lines
from scaling_axes.harness.results import VERDICTS


def history_lines(root: Path, plan: AnalysisPlan, lines: Sequence[ClaimLine], headings: dict[str, str]) -> list[str]:
    """The section: for each replaced plan, the counts in its family and in the one in force, then every claim of
    either with its verdict under each (`root`: the checkout the results folders are under)."""
    out = []
    for path, folder in replaced_plans(plan.scale):
        old = plan_for(plan.scale, path, root)
        before = {c.claim.id: c for c in claim_lines(Path(root) / folder, old)}
        now = {c.claim.id: c for c in lines}
        out += [
            "## Before and after",
            "",
            f"The plan this one replaced (`scaling_axes/plans/history/{path.name}`, digest `{old.digest}`), its "
            f"claims judged again on the results it judged, moved whole to `{folder}/` with its report: history "
            "under its older recipes, never evidence here. A claim whose rows changed compares other arms now: the "
            "same name, another question.",
            "",
            f"- before: {_counts(before.values(), headings)}",
            f"- now: {_counts(now.values(), headings)}",
            "",
            "| claim | before | now |",
            "|---|---|---|",
        ]
        for claim in dict.fromkeys([*before, *now]):
            was, is_ = before.get(claim), now.get(claim)
            changed = " (its rows changed)" if was and is_ and was.claim.rows != is_.claim.rows else ""
            out.append(f"| {claim} | {_verdict(was, headings)} | {_verdict(is_, headings)}{changed} |")
        out.append("")
    return out


def _counts(lines: Sequence[ClaimLine] | collections.abc.ValuesView, headings: dict[str, str]) -> str:
    inside = collections.Counter(c.status for c in lines if c.claim.in_family)
    said = ", ".join(f"{inside[s]} {headings[s].lower()}" for s in VERDICTS if inside[s])
    return f"{sum(inside.values())} claims in the family ({said}), {sum(not c.claim.in_family for c in lines)} outside"


def _verdict(line: ClaimLine | None, headings: dict[str, str]) -> str:
    if line is None:
        return "not a claim"
    said = headings.get(line.status, line.status)
    return said if line.claim.in_family else f"{said} (outside the family)"
