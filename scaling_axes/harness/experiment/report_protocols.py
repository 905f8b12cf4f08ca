"""REPORT.md's "The paper's protocol beside the matched one" (issue 83): where a paper gave its arms different
recipes (RMT Table 4: a muP-tuned Transformer against an RMT at its defaults), the plan judges the paper's protocol
and the matched one as claims of their own, each statement naming its protocol in its closing parenthesis
("(Table 4, the paper's protocol)"). Each table's claims side by side: their rows' margins on the confirmatory seeds
as the experiment's table gives them (an out-of-reach claim's described, never judged), and their verdicts."""

from __future__ import annotations

import re
from collections.abc import Sequence

from scaling_axes.harness.experiment.report_claims import ClaimLine, Tables

PROTOCOL = re.compile(r"\(((?:Table|Fig\.) \w+), ((?:the paper's|the matched|matched)[^()]*)\)\.?$")


def protocol_lines(lines: Sequence[ClaimLine], tables: Tables, headings: dict[str, str]) -> list[str]:
    """One table per paper table whose claims include its paper's protocol and another, one row per claim row."""
    groups: dict[str, list[tuple[str, ClaimLine]]] = {}
    for c in lines:
        if found := PROTOCOL.search(c.claim.statement):
            groups.setdefault(found[1], []).append((found[2], c))
    groups = {where: each for where, each in groups.items() if any("paper's" in p for p, _ in each) and len(each) > 1}
    if not groups:
        return []
    out = [
        "## The paper's protocol beside the matched one",
        "",
        "Where a paper gave its arms different recipes, its protocol and the matched one are claims of their own, "
        "each judged (or out of reach, its margin then described only); the plan's roles say which is primary. "
        "Margins on the test split, nats/token, positive the paper's way, over the confirmatory seeds.",
        "",
    ]
    for where, each in groups.items():
        out += [f"### {where}", "", "| protocol | claim | role | row | margin [95%] | seeds | verdict |"]
        out.append("|---|---|---|---|---|---|---|")
        for protocol, c in each:
            verdict = headings.get(c.status, c.status)
            for row in c.claim.rows:
                out.append(
                    f"| {protocol} | {c.claim.id} | {c.claim.role} | {row} | {_margin(tables, c, row)} | {verdict} |"
                )
        out.append("")
    return out


def _margin(tables: Tables, c: ClaimLine, row: str) -> str:
    table, _, name = row.partition("/")
    found = [
        r for r in tables.get(c.claim.experiment, []) if (r["table"], r["row"], r["metric"]) == (table, name, "claim")
    ]
    if not found or not found[0]["ours"]:
        return "not measured | 0"
    r = found[0]
    return f"{float(r['ours']):+.3f} [{float(r['low']):+.3f}, {float(r['high']):+.3f}] | {r['seeds']}"
