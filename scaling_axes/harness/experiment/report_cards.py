"""REPORT.md's paper cards (issue 83): per paper, each claim's margin as a multiple of its smallest effect of
interest and the share of its seeds that favour the paper. A description beside the verdicts, never one: a claim
at half its effect on every seed and a claim at twice it on half its seeds read differently here and may share a
verdict."""

from __future__ import annotations

from collections.abc import Sequence

from scaling_axes.harness.experiment.report_claims import ClaimLine


def card_lines(lines: Sequence[ClaimLine], headings: dict[str, str]) -> list[str]:
    """One table per paper, one row per claim with a test at this scale (the weakest step of an `each`)."""
    out = [
        "## Paper cards",
        "",
        "Per paper, each tested claim's estimate divided by its smallest effect of interest (1: the effect the plan "
        "was powered for; below 0: the other way) and the share of its seeds whose margin favours the paper (above "
        "0; above -tolerance for an as-good-as claim). A description, never a verdict.",
        "",
    ]
    for paper in dict.fromkeys(c.claim.paper for c in lines):
        rows = [c for c in lines if c.claim.paper == paper and c.tested is not None and c.margins]
        if not rows:
            continue
        out += [f"### {paper}", "", "| claim | verdict | margin / effect | seeds favouring |", "|---|---|---|---|"]
        for c in rows:
            ratio = f"{c.tested.estimate / c.claim.effect:+.2f}" if c.claim.effect else "n/a (no effect stated)"
            favour = sum(m > -c.claim.tolerance for m in c.margins)
            verdict = headings.get(c.status, c.status) if c.claim.in_family else "outside the family"
            out.append(f"| {c.claim.id} | {verdict} | {ratio} | {favour} of {len(c.margins)} |")
        out.append("")
    return out
