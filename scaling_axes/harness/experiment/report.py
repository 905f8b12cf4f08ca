"""REPORT.md: per scale, the plan its claims were judged by (its file and digest), one line per claim of each paper
grouped by verdict beside a forest plot, the claims outside the family with their pilot's intervals, the power
predicted against the verdicts observed, the thresholds each verdict would move with, the exact checks, the scale's
caveats said once, and one line per experiment pointing at its CSV. A scale without a plan lists its claim rows as
exploratory. Read from the committed files alone (tables, per-seed files, the plan, the pilot), with nothing of when
it was written: the same files give the same bytes.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path

from scaling_axes.harness.claims.judge import read_scale
from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS
from scaling_axes.harness.claims.observed import Experiment, read_experiments
from scaling_axes.harness.claims.plan import AnalysisPlan, plan_for
from scaling_axes.harness.experiment.forest import forest_plot
from scaling_axes.harness.experiment.report_arms import arm_lines
from scaling_axes.harness.experiment.report_cards import card_lines
from scaling_axes.harness.experiment.report_claims import ClaimLine, Tables, claim_line, claim_lines, read_tables
from scaling_axes.harness.experiment.report_files import write_marked
from scaling_axes.harness.experiment.report_history import history_lines
from scaling_axes.harness.experiment.report_protocols import protocol_lines
from scaling_axes.harness.experiment.report_recipes import recipe_lines
from scaling_axes.harness.experiment.report_shift import shift_lines
from scaling_axes.harness.experiment.report_spikes import spike_lines
from scaling_axes.harness.experiment.sensitivity import SHIFT, THRESHOLDS, changed_verdicts
from scaling_axes.harness.results import RESULTS_DIR, VERDICTS
from scaling_axes.harness.scales import SCALES, Scale
from scaling_axes.harness.stability import LEARNED_NATS

HEADINGS = {
    "claim_holds": "Holds",
    "claim_fails": "Fails",
    "never_reached": "Never reached",
    "plan_changed": "Plan changed after the data",
    "unmatched": "Unmatched",
    "insufficient": "Insufficient",
    "out_of_reach": "Out of reach",
    "not_learning": "Not learning",
    "unstable": "Unstable",
    "control_failed": "Positive control failed",
    "not_planned": "Not planned at this scale",
    "out_of_budget": "Out of budget",
}
FOREST = "claims_forest.png"


def plan_lines(plan: AnalysisPlan, lines: Sequence[ClaimLine], pilot: dict[str, Experiment]) -> list[str]:
    """What the claims were judged by: the plan's file and digest, its rule, its family, its pilot."""
    inside = [c for c in lines if c.claim.in_family]
    per_paper = collections.Counter((c.claim.paper, c.claim.role) for c in inside)
    families = "; ".join(
        f"{paper}: {per_paper[(paper, 'control')]} positive controls"
        if per_paper[(paper, "control")]
        else f"{paper}: {per_paper[(paper, 'primary')]} primary, {per_paper[(paper, 'secondary')]} secondary"
        for paper in sorted({c.claim.paper for c in lines})
    )
    return [
        "## The plan",
        "",
        f"Judged by the pre-registered plan `scaling_axes/plans/{Path(plan.path).name}` (digest `{plan.digest}`), "
        "written and committed before any of its fresh seeds trained; every claim run records the digest it trained "
        "under, and a verdict whose runs recorded another decides nothing. Each claim is one of the papers', tested "
        f"one-sided at alpha {plan.alpha:g} per direction (it holds, or it fails) by its kind (superiority, "
        "non-inferiority, equivalence) and tolerance, its rows combined as the plan says. Per paper and per "
        "direction: Holm over its primaries; its secondaries a Benjamini-Yekutieli family of their own. "
        f"{len(lines)} claims, {len(inside)} in the family ({families}); {len(lines) - len(inside)} outside it, "
        "declared before the data (out of reach by the power analysis, or unmatched by the scale's design). The "
        f"seeds come from the power analysis at power {plan.power:g} on the pilot's noise at its "
        f"{plan.sigma_confidence:.0%} upper limit (`python -m scaling_axes power --scale {plan.scale}`); the pilot "
        f"(`{plan.pilot}/`, seeds {', '.join(map(str, plan.pilot_seeds))}) is shown beside each claim and enters "
        "no verdict." + registered(plan) + first_registration(plan, pilot),
        "",
    ]


def first_registration(plan: AnalysisPlan, pilot: dict[str, Experiment]) -> str:
    """The digests the pilot's runs recorded (issue 83: a plan registered before its pilot, then again with its seeds
    and rates, is named by both), from the pilot's per-seed files (`pilot`: its experiments, read once); nothing
    where they record none or this one."""
    digests = {digest for each in pilot.values() for seeds in each.digests.values() for digest in seeds.values()} - {
        "",
        plan.digest,
    }
    if not digests:
        return ""
    return (
        f" Its first registration, before the pilot, had digest `{'`, `'.join(sorted(digests))}` (recorded by every "
        f"pilot run); this file, the second, adds the seeds, the rates and the exclusions the pilot gave."
    )


def registered(plan: AnalysisPlan) -> str:
    """What the plan's registration fixed beyond its claims (issue 83), in words; nothing for an older plan."""
    parts = [f"the analysis code of commit `{plan.analysis_commit}`"] if plan.analysis_commit else []
    parts += [", ".join(f"{name} {value:g}" for name, value in plan.thresholds.items())] if plan.thresholds else []
    return f" It registered {'; '.join(parts)}." if parts else ""


def claims_section(scale_dir: Path, plan: AnalysisPlan, lines: Sequence[ClaimLine]) -> list[str]:
    """The claims by verdict (in the family), the forest plot, the claims outside, the power against the verdicts."""
    inside = [c for c in lines if c.claim.in_family]
    counts = collections.Counter(c.status for c in inside)
    out = [
        "## Claims: " + ", ".join(f"{counts[s]} {HEADINGS[s].lower()}" for s in VERDICTS if counts[s]),
        "",
        "Each claim's estimate (an `each` claim's weakest step), its 95% interval (the two one-sided bounds at "
        "0.025), its fresh seeds, the one-sided p that it holds and that it fails, and the adjusted p its paper's "
        "control decides on; then its pilot's estimate, and the power the plan predicted.",
        "",
    ]
    if forest_plot(lines, scale_dir / FOREST, f"claims at {scale_dir.name} scale ({plan.digest})", HEADINGS):
        out += [f"![each claim's margin, the interval that decides it, each seed]({FOREST})", ""]
    for status in VERDICTS:
        if group := [c for c in inside if c.status == status]:
            out += [f"### {HEADINGS[status]} ({len(group)})", "", *(claim_line(c) for c in group), ""]
    outside = [c for c in lines if not c.claim.in_family]
    if outside:
        out += [f"### Outside the family ({len(outside)}): no verdict, with the pilot's intervals", ""]
        out += [claim_line(c) for c in outside] + [""]
    expected = sum(1 - c.power for c in inside if c.power is not None)
    own = sum(1 - c.power_own_rows for c in inside if c.power_own_rows is not None)
    tested = [c for c in inside if c.tested is not None and c.status in ("claim_holds", "claim_fails", "insufficient")]
    sized = (
        "The plan sized each claim on each row's own pilot spread (its `sizing: own_rows`)."
        if plan.rules.sizing == "own_rows"
        else "The plan sized each claim on the pooled spread of its rows (or its experiment's), which understates "
        f"the noisiest row where they spread unequally: on each row's own pilot spread the expectation is {own:.2f}."
    )
    out += [
        f"Power: were each claim's true effect its smallest of interest, the plan expected {expected:.2f} of its "
        f"{len(inside)} claims to end insufficient (the sum of one minus each predicted power); "
        f"{sum(c.status == 'insufficient' for c in tested)} did, of {len(tested)} that reached a test. {sized} The "
        "effect of interest sets the seeds only: a superiority claim fails only where shown reversed, so a true "
        "effect between 0 and it stays insufficient however many seeds run.",
        "",
    ]
    return out


def sensitivity_lines(scale_dir: Path, plan: AnalysisPlan, lines: Sequence[ClaimLine]) -> list[str]:
    """Every verdict that a threshold, or a tolerance, moved SHIFT either way, or the stability policy off, would
    change (`sensitivity`)."""
    changes = changed_verdicts(scale_dir, plan, {c.claim.id: c.status for c in lines if c.claim.in_family})
    out = [
        f"## Sensitivity: {len(changes)} verdict change{'s' * (len(changes) != 1)} under another policy or threshold",
        "",
        f"Every claim in the family judged again with each threshold, and separately each tolerance, moved {SHIFT:.0%} "
        "down and up (never alpha), and with the stability policy off (unstable seeds kept), its arms' blocks and "
        "tests computed again; the pass reports, it changes no verdict:",
        "",
        *(f"- `{t.name}` {t.value:g} ({t.source})" for t in THRESHOLDS),
        "",
    ]
    out += [f"- changes: {change}" for change in changes] or ["- no verdict changes."]
    return [*out, ""]


def check_lines(tables: Tables, level: str = "##", plan: AnalysisPlan | None = None) -> list[str]:
    """The exact checks (`claims.outcomes.exact_check`), apart from the claims: each with its largest deviation over
    its seeds and whether it passes; where one fails, the planned claims of its experiment that rest on what it
    checks."""
    checks = [(name, r) for name, rows in tables.items() for r in rows if r["metric"] == "check"]
    if not checks:
        return []
    passed = sum(r["status"] == "check_passes" for _, r in checks)
    measured = sum(r["status"] in ("check_passes", "check_fails") for _, r in checks)
    unmeasured = f"; {len(checks) - measured} not measured at this scale's runs" if measured < len(checks) else ""
    lines = [f"{level} Exact checks: {passed} of {measured} pass{unmeasured}", ""]
    for name, r in checks:
        statement, _, measured = r["note"].partition(NOTE_PARTS)
        verdict = {"check_passes": "passes", "check_fails": "**fails**"}.get(r["status"], r["status"])
        lines.append(f"- {statement}: {verdict}; {measured or 'not measured'} ({name}: {r['row']})")
    failing = sorted({name for name, r in checks if r["status"] == "check_fails"})
    resting = [c.id for c in (plan.claims if plan else ()) if c.experiment in failing and c.in_family]
    if resting:
        lines += [
            "",
            f"The claims of {', '.join(failing)} in the family ({', '.join(resting)}) rest on the growth these checks "
            "measure: where a check fails, they judge the growth as the paper ran it, which does not preserve the "
            "function here, not an exact one.",
        ]
    return [*lines, ""]


def caveat_lines(scale: Scale, tables: Tables) -> list[str]:
    """What holds for every row at this scale, said once: its note, the data, the unigram floors."""
    lines = [f"## What every number at {scale} scale rests on", ""]
    if scale.note:
        lines.append(f"- {scale.note}.")
    data = sorted(
        {r["note"].partition(DATA_NOTE)[2] for rows in tables.values() for r in rows if r["metric"] == "claim"} - {""}
    )
    lines += [f"- data: {each}" for each in data]
    floors = sorted(
        {(r["row"], r["ours"], r["unit"]) for rows in tables.values() for r in rows if r["table"] == "floor"}
    )
    lines += [
        f"- {row}: unigram floor {float(value):.3g} {unit} (a run must end {LEARNED_NATS:g} below it to count as "
        "learning)"
        for row, value, unit in floors
    ]
    return [*lines, ""]


def experiment_lines(scale_dir: Path, tables: Tables, link_prefix: str) -> list[str]:
    """One line per experiment: its rows by status and where its table and figure are."""
    lines = ["## Tables", ""]
    for name, rows in tables.items():
        counts = collections.Counter(r["status"] for r in rows)
        figure = f", [figure]({link_prefix}{name}.png)" if (scale_dir / f"{name}.png").exists() else ""
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"- [{name}]({link_prefix}{name}.csv){figure}: {summary}")
    return [*lines, ""]


def exploratory_lines(tables: Tables) -> list[str]:
    """A scale without a plan: its claim rows as they stand, decided by nothing."""
    rows = [(name, r) for name, table in tables.items() for r in table if r["metric"] == "claim"]
    if not rows:
        return []
    out = ["## Claims: exploratory (no analysis plan at this scale decides any)", ""]
    for name, r in rows:
        statement = r["note"].partition(DATA_NOTE)[0].partition(NOTE_PARTS)[0]
        numbers = (
            f"{float(r['ours']):+.3g} [{r['low'] or '?'}, {r['high'] or '?'}] {r['unit']}" if r["ours"] else "no margin"
        )
        out.append(f"- {statement}: {numbers}, {r['seeds'] or 0} seeds, {r['status']} ({name}: {r['row']})")
    return [*out, ""]


HEADER = ("Machine: ",)  # the line of a scale's report that says where its runs were trained


def write_report(
    results_dir: Path = RESULTS_DIR, scale: Scale | None = None, header: tuple[str, ...] | None = None
) -> Path:
    """With `scale`: `results/<scale>/REPORT.md`, opening with `header` (None: the header the report has, kept) and
    the scale's scope. Without: `results/REPORT.md`, a line per scale that has results, pointing at its report."""
    results_dir = Path(results_dir)
    if scale is None:
        return _index(results_dir)
    scale_dir = results_dir / scale.name
    if header is None:
        old = (scale_dir / "REPORT.md").read_text().splitlines() if (scale_dir / "REPORT.md").exists() else []
        header = tuple(part for line in old if line.startswith(HEADER) for part in (line, ""))
    tables = read_tables(scale_dir)
    plan = plan_for(scale, root=results_dir.parent) if scale.judges_claims else None
    pilot = read_experiments(plan.pilot_dir, plan.experiments) if plan else {}  # read once: three sections use it
    lines = [f"# Results at {scale} scale", "", *header, *([scale.scope, ""] if scale.scope else [])]
    if plan is not None:
        experiments = read_scale(scale_dir, plan)  # every per-seed file read and verified once for the sections
        claims = claim_lines(scale_dir, plan, experiments=experiments)
        lines += [*plan_lines(plan, claims, pilot), *claims_section(scale_dir, plan, claims)]
        lines += [*protocol_lines(claims, tables, HEADINGS), *card_lines(claims, HEADINGS)]
        lines += sensitivity_lines(scale_dir, plan, claims)
        lines += [
            *arm_lines(experiments, plan),
            *spike_lines(experiments, plan, pilot),
            *shift_lines(experiments, plan),
        ]
        lines += history_lines(results_dir.parent, plan, claims, HEADINGS)
    else:
        lines += exploratory_lines(tables)
    lines += [*check_lines(tables, plan=plan), *caveat_lines(scale, tables)]
    lines += recipe_lines(scale_dir, plan, pilot)
    lines += experiment_lines(scale_dir, tables, "")
    return write_marked(scale_dir / "REPORT.md", "\n".join(lines))


def _index(results_dir: Path) -> Path:
    """results/REPORT.md: each scale that judges claims and has results, largest first, pointing at its report."""
    lines = [
        "# Results",
        "",
        "Regenerated by `python -m scaling_axes report` (and every experiment's `--report`). **smoke** results prove "
        "the pipeline and are never a reproduction: they stay in `results/smoke/` (not committed); paper numbers "
        "and their sources: `results/published/`.",
        "",
    ]
    for each in reversed(SCALES.values()):
        if each.judges_claims and (tables := read_tables(results_dir / each.name)):
            plan = plan_for(each)
            said = f"judged by its plan (digest `{plan.digest}`)" if plan else "no plan: exploratory"
            rows = sum(len(rows) for rows in tables.values())
            lines += [
                f"- **{each}** scale: {len(tables)} tables, {rows} rows, {said}: [its report]({each.name}/REPORT.md)"
            ]
    return write_marked(results_dir / "REPORT.md", "\n".join([*lines, ""]))
