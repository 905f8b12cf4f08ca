"""REPORT.md: per scale, one line per claim grouped by verdict, a forest plot of the margins, the caveats of the
scale said once, and one line per experiment pointing at its CSV (the tables' bulk stays there).

Read from the results CSVs alone (`results/<scale>/*.csv` and their per-seed files), so a report can be rebuilt
anywhere the CSVs are.
"""

from __future__ import annotations

import collections
from pathlib import Path

from scaling_axes.harness.claims.margins import LOSS_NOISE_FLOOR, TOP1_NOISE_FLOOR
from scaling_axes.harness.claims.notes import NOTE_PARTS

EXCLUDES = "cannot exclude a difference of "  # TODO
HANGS, MULTIPLICITY = " | hangs on a threshold: ", "decides nothing (multiplicity)"  # TODO
from scaling_axes.harness.experiment.forest import forest_plot
from scaling_axes.harness.experiment.report_claims import OLDER_RULES, Claim, Tables, claims_of, read_tables
from scaling_axes.harness.experiment.sensitivity import SHIFT, THRESHOLDS
from scaling_axes.harness.results import RESULTS_DIR, VERDICTS
from scaling_axes.harness.scales import SCALES, Scale
from scaling_axes.harness.stability import LEARNED_NATS
from scaling_axes.io import atomic_write

HEADINGS = {
    "claim_holds": "Holds",
    "claim_fails": "Fails",
    "never_reached": "Never reached",
    "fragile": "Fragile (decided by the tuning policy)",
    "unmatched": "Unmatched",
    "insufficient": "Insufficient",
    "out_of_reach": "Out of reach",
    "not_learning": "Not learning",
    "unstable": "Unstable",
}
HEADINGS[OLDER_RULES] = "Judged by older rules (not rebuilt since: no p or q, no second tuning policy)"
FOREST = "claims_forest.png"


def claim_lines(claims: list[Claim]) -> list[str]:
    """One line per claim under its verdict's heading: the mean margin, its 95% interval, the seeds."""
    lines = []
    for status in (*VERDICTS, *sorted({c.status for c in claims} - set(VERDICTS))):
        group = [c for c in claims if c.status == status]
        if not group:
            continue
        lines += [f"### {HEADINGS.get(status, status)} ({len(group)})", ""]
        for c in group:
            tests = "".join(f", {name} {_g(value)}" for name, value in (("p", c.p), ("q", c.q)) if value)
            interval = " (the gap)" if c.status == "never_reached" else f" [{_g(c.low)}, {_g(c.high)}]"
            measured = (
                f"{_g(c.margin, '+')}{interval} {c.unit}, {c.seeds} seed{'s' * (c.seeds != 1)}{tests}"
                if c.margin
                else "no margin"
            )
            excludes = f"; {EXCLUDES}{c.excludes} {c.unit}" if c.excludes and c.status == "insufficient" else ""
            why = f"{excludes}; {c.why}" if c.why else excludes
            lines.append(f"- {c.statement}: **{measured}**{why} ({'; '.join(c.where)})")
        lines.append("")
    return lines


def _g(value: str, sign: str = "") -> str:
    return f"{float(value):{sign}.3g}" if value else "?"


def caveat_lines(scale: Scale, tables: Tables, claims: list[Claim]) -> list[str]:
    """What holds for every row at this scale, said once: its note, the data, the measured noise, the floors."""
    lines = [f"## What every number at {scale} scale rests on", ""]
    if scale.note:
        lines.append(f"- {scale.note}.")
    lines += [f"- data: {data}" for data in sorted({c.data for c in claims if c.data})]
    harness_rows = [(name, r) for name, rows in tables.items() for r in rows if r["table"] in ("noise", "floor")]
    floors = sorted({(r["row"], r["ours"], r["unit"]) for _, r in harness_rows if r["table"] == "floor"})
    lines += [
        f"- {row}: unigram floor {_g(value)} {unit} (a run must end {LEARNED_NATS:g} below it to count as learning)"
        for row, value, unit in floors
    ]
    noise = list({(r["row"], r["ours"]): (name, r) for name, r in harness_rows if r["table"] == "noise"}.values())
    if noise:
        lines += [
            "- noise measured from the seeds (pooled spread of one run's final metric; the assumed floors, "
            f"{LOSS_NOISE_FLOOR:g} nats and {TOP1_NOISE_FLOOR:g} points, stay as lower bounds):"
        ]
        lines += [f"  - {name}: {r['row']} {_g(r['ours'])} {r['unit']} ({r['note']})" for name, r in noise]
    return [*lines, *sweep_lines(tables), ""]


def sweep_lines(tables: Tables) -> list[str]:
    """Each tuned arm's check on its claim seeds, said once: how many agree with their sweep, and which do not."""
    checks = {
        r["run"]: (name, r) for name, rows in tables.items() for r in rows if r["metric"] == "claim_seeds_minus_sweep"
    }
    if not checks:
        return []
    flagged = [
        f"{name}: {run} {_g(r['ours'], '+')} [{_g(r['low'])}, {_g(r['high'])}] {r['unit']} ({r['note']})"
        for run, (name, r) in checks.items()
        if r["status"] == "differs"
    ]
    agree = f"{len(checks) - len(flagged)} of {len(checks)}" if flagged else f"all {len(checks)}"
    head = (
        f"- learning rates: the claim seeds of {agree} arms swept on their own end within the 95% bound of their "
        "sweep's mean at the chosen rate"
    )
    if not flagged:
        return [head]
    return [
        f"{head}; no claim is decided on the others (claim seeds' mean minus the sweep's, [its 95% interval]):",
        *(f"  - {line}" for line in flagged),
    ]


def experiment_lines(scale_dir: Path, tables: Tables, link_prefix: str) -> list[str]:
    """One line per experiment: its rows by status (every row, the noise and floor rows `measured`) and where its
    table and figure are."""
    lines = ["## Tables", ""]
    for name, rows in tables.items():
        counts = collections.Counter(r["status"] for r in rows)
        figure = f", [figure]({link_prefix}{name}.png)" if (scale_dir / f"{name}.png").exists() else ""
        summary = ", ".join(f"{n} {status}" for status, n in counts.most_common())
        lines.append(f"- [{name}]({link_prefix}{name}.csv){figure}: {summary}")
    return [*lines, ""]


def scale_section(scale_dir: Path, claims: list[Claim], link_prefix: str, level: str = "##") -> list[str]:
    """A scale's claims (grouped by verdict, with the forest plot)."""
    lines = []
    if claims:
        counts = collections.Counter(c.status for c in claims)
        lines += [
            f"{level} Claims: " + ", ".join(f"{counts[s]} {HEADINGS.get(s, s).lower()}" for s in counts),
            "",
            "Mean margin over seeds (> 0: the claim holds), [its 95% interval], the seeds, p and q; a "
            "hypothesis several tables state (the same runs and margins) is one line; an insufficient claim "
            "names the narrowest difference its data exclude (two one-sided tests at 5%).",
            "",
            *family_lines(claims),
        ]
        if forest_plot(claims, scale_dir / FOREST, f"claims at {scale_dir.name} scale", HEADINGS):
            lines += [f"![margins of every claim]({link_prefix}{FOREST})", ""]
        lines += claim_lines(claims)
    return lines


def threshold_lines(claims: list[Claim], level: str = "##") -> list[str]:
    """The fixed thresholds the verdicts pass through, where each value came from, and the decided verdicts that
    one of them moved 25% either way would change (`experiment.sensitivity`)."""
    decided = [c for c in claims if c.status in ("claim_holds", "claim_fails")]
    hanging = [c for c in decided if HANGS.strip(" |") in c.why]
    lines = [
        f"{level} Thresholds: {len(hanging)} of {len(decided)} decided verdicts hang on one",
        "",
        f"Each decided verdict judged again with each threshold moved {SHIFT:.0%} down and up:",
        "",
        *(f"- `{t.name}` {'' if t.name == 'tolerance' else f'{t.value:g} '}({t.source})" for t in THRESHOLDS),
        *(
            f"- hangs: {c.statement} ({c.where[0]}): {c.why.partition(HANGS.strip(' |'))[2].strip(': ')}"
            for c in hanging
        ),
        "",
    ]
    return lines


def check_lines(tables: Tables, level: str = "##") -> list[str]:
    """The exact checks (`claims.outcomes.exact_check`), apart from the claims and outside their counts: each with
    its largest deviation over its seeds and whether it passes."""
    checks = [(name, r) for name, rows in tables.items() for r in rows if r["metric"] == "check"]
    if not checks:
        return []
    passed = sum(r["status"] == "check_passes" for _, r in checks)
    lines = [f"{level} Exact checks: {passed} of {len(checks)} pass", ""]
    for name, r in checks:
        statement, _, measured = r["note"].partition(NOTE_PARTS)
        verdict = {"check_passes": "passes", "check_fails": "**fails**"}.get(r["status"], r["status"])
        lines.append(f"- {statement}: {verdict}; {measured or 'not measured'} ({name}: {r['row']})")
    return [*lines, ""]


def family_lines(claims: list[Claim]) -> list[str]:
    """What the claims' false-discovery control was taken over, how it was formed, and what it took away."""
    if not any(c.q for c in claims):
        return []
    rows = sum(len(c.where) for c in claims)
    tested = [c for c in claims if c.p and c.status not in ("not_learning", "unstable", "unmatched")]
    demoted = sum(MULTIPLICITY in c.why for c in claims)
    return [
        f"The family: every claim declared at this scale, {rows} rows, {len(claims)} hypotheses (rows on the "
        "same runs and margins are one hypothesis, tested once and shown once here; the exact checks apart). A "
        "claim that could not be tested (unstable, unmatched, not learning, never reached, out of reach, "
        "untuned, unfinished) enters with p = 1; one judged under two tuning policies with the larger of its "
        "two p. A claim is decided only where its q, Benjamini-Yekutieli's adjusted p over the family (valid "
        "under any dependence between claims that share an arm), is below 0.05; its interval adjusted for the "
        f"family is the thick bar of the forest plot. {len(tested)} were tested; {demoted} decided by their own "
        "test did not survive the control (insufficient, 'multiplicity').",
        "",
    ]


HEADER = ("Machine: ", "Judged again ")  # the lines of a scale's report that say where and how it was made


def write_report(
    results_dir: Path = RESULTS_DIR, scale: Scale | None = None, header: tuple[str, ...] | None = None
) -> Path:
    """With `scale`: `results/<scale>/REPORT.md`, opening with `header` (the machine and commit; None: the header
    the report has, kept) and the scale's scope. Without: `results/REPORT.md`, each scale that has results, largest
    first, pointing at its own report."""
    results_dir = Path(results_dir)
    if scale is not None:
        scale_dir = results_dir / scale.name
        if header is None:
            old = (scale_dir / "REPORT.md").read_text().splitlines() if (scale_dir / "REPORT.md").exists() else []
            header = tuple(part for line in old if line.startswith(HEADER) for part in (line, ""))
        tables = read_tables(scale_dir)
        claims = claims_of(tables)
        lines = [
            f"# Results at {scale} scale",
            "",
            *header,
            *([scale.scope, ""] if scale.scope else []),
            *scale_section(scale_dir, claims, ""),
            *threshold_lines(claims),
            *check_lines(tables),
            *caveat_lines(scale, tables, claims),
            *experiment_lines(scale_dir, tables, ""),
        ]
        path = scale_dir / "REPORT.md"
    else:
        lines = [
            "# Results",
            "",
            "Regenerated by `python -m scaling_axes report` (and every experiment's "
            "`--report`). **smoke** results prove the pipeline and are never a reproduction: they stay in "
            "`results/smoke/` (not committed) and are not listed here; paper numbers and their sources: "
            "`results/published/`.",
            "",
        ]
        for each in reversed(SCALES.values()):
            scale_dir = results_dir / each.name
            if each.judges_claims and (tables := read_tables(scale_dir)):  # smoke's stays in results/smoke/
                lines += [
                    f"## {each} scale ([its report]({each.name}/REPORT.md))",
                    "",
                    *scale_section(scale_dir, claims_of(tables), f"{each.name}/", "###"),
                    *check_lines(tables, "###"),
                    *experiment_lines(scale_dir, tables, f"{each.name}/"),
                ]
        path = results_dir / "REPORT.md"
    atomic_write(path, "\n".join(lines))
    return path
