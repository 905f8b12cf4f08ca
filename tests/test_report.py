"""REPORT.md as a researcher reads it: the plan it was judged by, one line per claim of the plan grouped by
verdict with its pilot and its predicted power, the claims outside the family, a forest plot, the exact checks
apart, the scale's caveats once, the tables' bulk left in their CSVs; the same files give the same bytes."""

import dataclasses
import statistics
from pathlib import Path

import pytest

from scaling_axes.harness.claims.verdicts import judge
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.results import Row, write_rows
from scaling_axes.harness.scales import CPU

HOLDS, FAILS, UNDECIDED = [0.30, 0.25, 0.28], [-0.30, -0.25, -0.28], [0.01, -0.02, 0.015]


def _claims(experiment: str) -> list[Row]:
    return [
        judge("t", "c_vs_b", "c beats b", CPU, UNDECIDED, "nats/token", runs=("c", "b")),
        judge("t", "a_vs_b", "a beats b", CPU, HOLDS, "nats/token", runs=("a", "b")),
        judge("t", "b_vs_a", "b beats a", CPU, FAILS, "nats/token", runs=("b", "a")),
    ]


def _planned(tmp_path, monkeypatch, margins=None) -> tuple:
    """A scale of one planned claim (`tests.test_plan_decisions._scale`, seeds 4-6) and one outside the family whose
    pilot measured it; the report reads this plan and pilot."""
    from scaling_axes.harness.claims.power import PilotRow
    from tests.test_plan_decisions import _scale

    scale_dir, plan = _scale(tmp_path, margins or {4: 0.31, 5: 0.29, 6: 0.30})
    outside = dataclasses.replace(plan.claims[0], id="d", rows=("t/x_vs_y",), excluded="out of reach: 34 seeds")
    plan = dataclasses.replace(plan, claims=(*plan.claims, outside))
    pilot = {
        ("e", "t/a_vs_b"): PilotRow("e", "t/a_vs_b", frozenset("ab"), "nats/token", "insufficient", (0.2, 0.3, 0.25)),
        ("e", "t/x_vs_y"): PilotRow("e", "t/x_vs_y", frozenset("xy"), "nats/token", "insufficient", (0.1, -0.1, 0.0)),
    }
    for module in ("report_claims", "report"):
        monkeypatch.setattr(
            f"scaling_axes.harness.experiment.{module}.plan_for", lambda scale, **where: plan, raising=False
        )
    monkeypatch.setattr("scaling_axes.harness.experiment.report_claims.read_pilot", lambda *_: pilot)
    return scale_dir, plan


def test_the_report_names_its_plan_and_shows_each_claim_once_with_its_pilot_and_power(tmp_path, monkeypatch):
    from scaling_axes.harness.claims.judge import judge_scale

    scale_dir, plan = _planned(tmp_path, monkeypatch)
    judge_scale(scale_dir, CPU, plan)
    text = write_report(tmp_path, scale=CPU).read_text()
    assert f"digest `{plan.digest}`" in text and "`scaling_axes/plans/plan.yaml`" in text
    assert "## Claims: 1 holds" in text and "### Holds (1)" in text
    (line,) = [line for line in text.splitlines() if line.startswith("- **c**")]
    assert "**+0.3 [" in line and "3 fresh seeds" in line and "pilot: +0.25 [" in line and "predicted power" in line
    (outside,) = [line for line in text.splitlines() if line.startswith("- **d**")]
    assert "out of reach: 34 seeds" in outside and "pilot: +0 [" in outside
    assert text.index("## The plan") < text.index("## Claims") < text.index("## Sensitivity") < text.index("## Tables")
    assert (scale_dir / "claims_forest.png").stat().st_size > 10_000


def test_two_identical_reports_are_the_same_bytes(tmp_path, monkeypatch):
    """Nothing of when or where a report is written goes into it: the same files, the same REPORT.md and forest."""
    from scaling_axes.harness.claims.judge import judge_scale

    scale_dir, plan = _planned(tmp_path, monkeypatch)
    judge_scale(scale_dir, CPU, plan)
    first = [write_report(tmp_path, scale=CPU).read_bytes(), (scale_dir / "claims_forest.png").read_bytes()]
    judge_scale(scale_dir, CPU, plan)
    second = [write_report(tmp_path, scale=CPU).read_bytes(), (scale_dir / "claims_forest.png").read_bytes()]
    assert first == second


def test_a_scale_without_a_plan_lists_its_claims_as_exploratory(tmp_path):
    from scaling_axes.harness.scales import SMALL

    write_rows("exp_a", SMALL, _claims("exp_a"), tmp_path)
    text = write_report(tmp_path, scale=SMALL).read_text()
    assert "## Claims: exploratory (no analysis plan at this scale decides any)" in text
    assert "- a beats b: " in text and "claim_holds" not in text


def test_smoke_results_stay_out_of_the_committed_report(tmp_path):
    """`make smoke` writes results/smoke/ (ignored): the report of every scale leaves it out, so a fresh clone's
    `git status` stays clean after it."""
    from scaling_axes.harness.scales import SMALL, SMOKE

    write_rows("exp_a", SMALL, _claims("exp_a"), tmp_path)
    before = write_report(tmp_path).read_text()
    write_rows("exp_a", SMOKE, _claims("exp_a"), tmp_path)
    assert write_report(tmp_path).read_text() == before and "smoke** scale" not in before
    assert write_report(tmp_path, scale=SMOKE).parent == tmp_path / "smoke"


@pytest.mark.parametrize("x", [[1e11, 3e12], [2e5, 6e5], [3.4e11, 1.2e12], [1.3e5, 6.2e5]])
def test_a_log_axis_labels_at_least_four_ticks_and_no_two_labels_overlap(x):
    """Issue 83: RMT Fig. 2's FLOPs axis (3.4e11-1.2e12 with its margins, under half a decade) printed
    "7e+118e+119e+11": every digit of the decade labelled, crowded at its top. On the suite's widths each axis keeps
    four labels, apart."""
    from scaling_axes.harness.results import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(6.5, 3.5))
    ax.plot(x, [4.5, 5.2])
    ax.set(xscale="log", yscale="log")
    save_figure(fig, Path("/dev/null"))
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # save_figure closed the figure's own canvas
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
        shown = [t for t in labels if t.get_text() and t.get_visible()]
        assert len(shown) >= 4, [t.get_text() for t in labels]
        boxes = [t.get_window_extent(renderer) for t in shown]
        overlapping = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if a.overlaps(b)]
        assert not overlapping, [t.get_text() for t in shown]
    for axis in (ax.xaxis, ax.yaxis):  # no tick mark without its label (Fig. 3's perplexity axis had one)
        assert len(axis.get_minorticklocs()) == 0 and all(t.get_text() for t in axis.get_majorticklabels())


@pytest.mark.parametrize("name", ["a", "transformer_rmt_405m_mup1 (11 seeds; unstable: seeds 9, 12)"])
def test_a_legend_covers_no_tick_label_of_its_axes_or_its_neighbours(name):
    """Issue 83: RMT Table 4's legends, wider than their axes (long run names), spilled over the y tick labels of
    their own panel and the next. A legend that fits stays inside its axes; a wider one goes below the x label."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from scaling_axes.harness.results import pyplot, save_figure

    fig, axes = pyplot().subplots(1, 3, figsize=(12, 3.6))
    for ax in axes:
        ax.plot([0, 1e6, 2e6], [5.0, 4.5, 4.2], label=name)
        ax.set(xlabel="tokens", ylabel="validation loss (nats/token)")
    save_figure(fig, Path("/dev/null"))
    renderer = FigureCanvasAgg(fig).get_renderer()  # save_figure closed the figure's own canvas
    texts = [t for ax in axes for t in (*ax.get_xticklabels(), *ax.get_yticklabels(), ax.xaxis.label, ax.yaxis.label)]
    boxes = [t.get_window_extent(renderer) for t in texts if t.get_text() and t.get_visible()]
    for ax in axes:
        legend = ax.get_legend().get_window_extent(renderer)
        assert not [box for box in boxes if legend.overlaps(box)]
        assert fig.bbox.contains(legend.x0, legend.y0) and fig.bbox.contains(legend.x1, legend.y1)
        inside = ax.get_window_extent(renderer)
        assert (len(name) < 10) == (inside.y0 <= legend.y0 and legend.y1 <= inside.y1)


def test_exact_checks_are_listed_apart_from_the_claims_and_outside_their_counts(tmp_path):
    """Growth preserving the function is a check, passed or not: no margin, interval or p, not a claim's verdict;
    REPORT.md lists the checks under their own heading and counts only the claims as claims."""
    from scaling_axes.harness.claims.outcomes import exact_check

    passes = exact_check(
        "fig3", "g_growth", "growth preserves the function", {1: 2e-6, 2: -5e-6}, 1e-4, "nats/token", runs=("g",)
    )
    fails = exact_check("fig3", "h_growth", "growth preserves h's function", {1: 0.3}, 1e-4, "nats/token", runs=("h",))
    assert (passes.status, passes.ours, passes.seeds, passes.p, passes.low) == ("check_passes", 5e-6, 2, None, None)
    assert fails.status == "check_fails" and fails.ours == 0.3
    from scaling_axes.harness.scales import SMALL

    write_rows("exp_a", SMALL, [*_claims("exp_a"), passes, fails], tmp_path)
    text = write_report(tmp_path, scale=SMALL).read_text()
    assert "## Exact checks: 1 of 2 pass" in text and "- growth preserves h's function: **fails**" in text
    claims = text.partition("## Claims")[2].partition("## Exact checks")[0]
    assert claims.count("\n- ") == 3 and "growth" not in claims  # the checks are not among the claims


def test_no_empty_figure_is_written_or_linked(tmp_path):
    """A figure without a point to draw (MoT's mixouts before their curves exist) is not written, an earlier one at
    its path goes, and REPORT.md links none; with points it is written and linked."""
    from scaling_axes.harness.experiment.figures import line_figure
    from scaling_axes.harness.scales import SMALL

    path = tmp_path / "small" / "exp_a.png"
    write_rows("exp_a", SMALL, _claims("exp_a"), tmp_path)
    points = [(1, 2.0, 0.1, (1.9, 2.1)), (2, 1.5, 0.0, (1.5, 1.5))]
    line_figure(path, {"a": points}, notes=(("fallback lr 0.003", 1, 2.0),), title="t")
    assert path.stat().st_size > 1000 and "[figure](exp_a.png)" in write_report(tmp_path, scale=SMALL).read_text()
    from scaling_axes.harness.experiment.figures import draw
    from scaling_axes.harness.results import pyplot

    fig, ax = pyplot().subplots()
    draw(ax, points, "a")  # the mean's line, and every seed a point beside it
    assert sorted(zip(*ax.get_lines()[1].get_data(), strict=True)) == [(1, 1.9), (1, 2.1), (2, 1.5), (2, 1.5)]
    pyplot().close(fig)
    fig, ax = pyplot().subplots()
    draw(ax, points, "curve", "-")  # along a curve, each seed a thin line of its own
    assert [tuple(line.get_ydata()) for line in ax.get_lines()[1:]] == [(1.9, 1.5), (2.1, 1.5)]
    pyplot().close(fig)
    line_figure(path, {"a": [], "b": []}, title="t")
    assert not path.exists() and "[figure]" not in write_report(tmp_path, scale=SMALL).read_text()


def test_a_figures_points_are_every_seeds_mean_and_spread_and_a_fallback_is_labelled():
    """Fig. 6 at cpu drew seed 1 alone, at mixed rates: a point is the seeds' mean with their standard deviation, a
    curve their mean at the steps all logged, and a run whose claim seeds fell back or spiked says so."""
    from scaling_axes.harness.experiment.figures import marked, over_seeds, seed_curves

    seed2 = {"run": "a_seed2", "val_loss": 4.2, "val_loss_curve": [[10, 5.4], [20, 4.2], [30, 4.1]]}
    seed3 = {"run": "a_seed3", "val_loss": 4.4, "val_loss_curve": [[10, 5.2], [20, 4.4]]}
    done = {"run": "a", "val_loss": 4.0, "val_loss_curve": [[10, 5.0], [20, 4.0]], "seed_runs": {2: seed2, 3: seed3}}
    assert over_seeds(done)[:2] == pytest.approx((4.2, statistics.stdev([4.0, 4.2, 4.4])))
    assert over_seeds(done)[2] == (4.0, 4.2, 4.4)  # each seed, drawn beside the mean
    curve = seed_curves(done, lambda each: each["val_loss_curve"])
    assert [point[0] for point in curve] == [10, 20] and curve[0][1:3] == pytest.approx((5.2, 0.2))
    assert curve[0][3] == (5.0, 5.4, 5.2)
    assert marked("a", done) == "a (3 seeds)"
    fell = {**done, "stable_fallback": {"lr": 3e-3, "unstable_at": {1e-2: ["a spiked"]}, "at_edge": False}}
    spiked = {
        **done,
        "seed_runs": {
            **done["seed_runs"],
            3: {**done["seed_runs"][3], "train_loss_spike": {"nats": 2.4, "step": 7, "loss": 9}},
        },
    }
    assert (
        marked("a", fell) == "a (3 seeds; fallback lr 0.003)" and marked("a", spiked) == "a (3 seeds; unstable: seed 3)"
    )


def test_a_report_killed_mid_write_leaves_nothing_after_the_next_one(tmp_path, monkeypatch):
    """Issue 58, case 7: a `--report` killed mid-write left `.<experiment>.csv.tmp<pid>` that nothing cleaned. The
    next rebuild removes a dead writer's temporaries and leaves a live writer's alone."""
    import os
    import subprocess
    import sys

    from scaling_axes.harness.experiment import table
    from scaling_axes.harness.experiment.table import rebuild
    from scaling_axes.harness.runs import Experiment

    monkeypatch.setattr(table, "confirming_plan", lambda scale, root=".": None)  # its tables in results/cpu/

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    scale_dir = tmp_path / "results" / "cpu"
    (scale_dir / "seeds").mkdir(parents=True)
    killed = [
        scale_dir / f".exp.csv.tmp{dead.stdout.strip()}",
        scale_dir / "seeds" / f".exp.csv.tmp{dead.stdout.strip()}",
    ]
    live = scale_dir / f".other.csv.tmp{os.getpid()}"
    for path in (*killed, live):
        path.touch()
    rebuild(
        Experiment("exp", "nothing", lambda scale: [], lambda scale, results: []),
        CPU,
        tmp_path / "runs",
        tmp_path / "results",
    )
    assert not any(path.exists() for path in killed) and live.exists()
    assert (scale_dir / "REPORT.md").exists()  # `run --report` writes the scale's report, not only results/REPORT.md


def test_a_paper_card_gives_each_claims_margin_over_its_effect_and_the_seeds_that_favour_the_paper():
    """Issue 83: a description beside the verdicts, from the claim lines: -0.05 against an effect of 0.1 is -0.50; an
    as-good-as claim's seed favours the paper above -tolerance."""
    from scaling_axes.harness.claims.decisions import Tested
    from scaling_axes.harness.experiment.report import HEADINGS
    from scaling_axes.harness.experiment.report_cards import card_lines
    from scaling_axes.harness.experiment.report_claims import ClaimLine
    from tests.test_plan_decisions import _claim

    def line(claim, estimate, margins, status):
        tested = Tested(estimate, estimate - 0.1, estimate + 0.1, 0.5, 0.5)
        return ClaimLine(
            claim, status, "", "nats/token", tested, len(margins), 0.5, "", 0.025, (), margins, None, 0, None
        )

    beats = _claim(id="beats", effect=0.1)
    as_good = _claim(id="as_good", kind="non_inferiority", tolerance=0.05, effect=0.1, paper="mot")
    text = "\n".join(
        card_lines(
            [
                line(beats, -0.05, (0.02, -0.04, -0.13), "insufficient"),
                line(as_good, 0.2, (-0.04, -0.06, 0.3, 0.1), "claim_holds"),
            ],
            HEADINGS,
        )
    )
    assert "| beats | Insufficient | -0.50 | 1 of 3 |" in text
    assert "### mot" in text and "| as_good | Holds | +2.00 | 3 of 4 |" in text


def test_the_report_counts_and_names_every_confirmatory_seed_that_spiked(tmp_path):
    """Issue 83: the target is none; each one is named with its rate, from the per-seed files alone."""
    from scaling_axes.harness.claims.judge import read_scale
    from scaling_axes.harness.experiment.report_spikes import spike_lines
    from tests.test_plan_decisions import _scale

    scale_dir, plan = _scale(tmp_path, {4: 0.31, 5: 0.29, 6: 0.30}, {("a", 5): {"spike_nats": 1.2}})
    lines = spike_lines(read_scale(scale_dir, plan), plan, _pilot(plan))
    assert lines[0] == "## Spikes among the confirmatory seeds: 1 of 6 runs (the target is none)"
    assert "- e: a seed 5 spiked 1.20 nats (at its declared rate)" in lines
    quiet, plan = _scale(tmp_path / "quiet", {4: 0.31, 5: 0.29, 6: 0.30})
    assert spike_lines(read_scale(quiet, plan), plan, _pilot(plan))[0].endswith(": 0 of 6 runs (the target is none)")


def test_a_spiked_seed_is_named_with_its_rates_neighbours_in_the_pilots_sweep_and_the_seeds_arms_share(tmp_path):
    """Issue 83: a spike among the confirmatory seeds is read beside the pilot's sweep around its rate (was the rate
    at the edge?), and a seed on which several arms spiked is named once (their data order, not one arm's rate)."""
    import dataclasses

    from scaling_axes.harness.claims.judge import read_scale
    from scaling_axes.harness.claims.observed import SEED_COLUMNS, read_csv
    from scaling_axes.harness.experiment.report_spikes import spike_lines
    from scaling_axes.io import write_csv
    from tests.test_plan_decisions import _scale

    spikes = {("a", 5): {"spike_nats": 1.2}, ("b", 5): {"spike_nats": 0.9}}
    scale_dir, plan = _scale(tmp_path, {4: 0.31, 5: 0.29, 6: 0.30}, spikes)
    planned = plan.experiments["e"]
    plan = dataclasses.replace(plan, experiments={"e": dataclasses.replace(planned, arms={"a": 0.01, "b": 0.02})})
    sweep = [(0.0025, 1, "4.4", ""), (0.005, 1, "4.3", ""), (0.005, 2, "4.31", ""), (0.01, 1, "4.2", "")]
    sweep += [(0.02, 1, "5.1", "unstable"), (0.02, 2, "", "diverged"), (0.04, 1, "", "diverged")]
    seeds = tmp_path / "pilot" / "seeds" / "e.csv"
    rows = read_csv(seeds) + [
        {"kind": "sweep", "run": "a", "seed": draw, "metric": lr, "value": loss, "flag": flag}
        for lr, draw, loss, flag in sweep
    ]
    write_csv(seeds, SEED_COLUMNS, rows, checksum=True)
    lines = spike_lines(read_scale(scale_dir, plan), plan, _pilot(plan))
    assert lines[0].endswith(": 2 of 6 runs (the target is none)")
    neighbours = "the pilot's sweep: 0.005 (4.300, 4.310), 0.01 (4.200), 0.02 (5.100 unstable, diverged))"
    assert f"- e: a seed 5 spiked 1.20 nats (at the plan's rate 0.01; {neighbours}" in lines
    assert "- e: b seed 5 spiked 0.90 nats (at the plan's rate 0.02; no sweep of its own in the pilot)" in lines
    assert "- e seed 5: 2 of 2 arms spiked" in lines
    write_csv(seeds, SEED_COLUMNS, [r for r in rows if r["kind"] != "sweep"], checksum=True)  # an older pilot's file
    lines = spike_lines(read_scale(scale_dir, plan), plan, _pilot(plan))
    assert "- e: a seed 5 spiked 1.20 nats (at the plan's rate 0.01; the pilot's file records no sweep)" in lines


def test_a_papers_protocol_is_shown_beside_the_matched_one_with_each_rows_margin_and_verdict():
    """Issue 83: RMT Table 4 under both protocols side by side, the out-of-reach one's margin described from its
    table row; a table whose claims name no paper's protocol gets no section."""
    from scaling_axes.harness.experiment.report import HEADINGS
    from scaling_axes.harness.experiment.report_claims import ClaimLine
    from scaling_axes.harness.experiment.report_protocols import protocol_lines
    from tests.test_plan_decisions import _claim

    def line(id_, statement, row, status, role="secondary"):
        claim = _claim(id=id_, statement=statement, rows=(row,), role=role)
        return ClaimLine(claim, status, "", "nats/token", None, 11, None, "", 0.025, (), (), None, 0, None)

    lines = [
        line("paper", "the RMT wins (Table 4, the paper's protocol).", "t4/r_vs_tuned", "out_of_reach"),
        line("matched", "the RMT wins (Table 4, the matched protocol).", "t4/r_vs_t", "claim_holds", "primary"),
        line("alone", "the RMT wins (Table 5, the matched protocol).", "t5/r_vs_t", "claim_holds"),
    ]
    row = {"metric": "claim", "ours": "-0.149", "low": "-0.18", "high": "-0.119", "seeds": "11"}
    tables = {
        "e": [{**row, "table": "t4", "row": "r_vs_tuned"}, {**row, "table": "t4", "row": "r_vs_t", "ours": "0.1"}]
    }
    text = "\n".join(protocol_lines(lines, tables, HEADINGS))
    assert "### Table 4" in text and "Table 5" not in text
    assert (
        "| the paper's protocol | paper | secondary | t4/r_vs_tuned | -0.149 [-0.180, -0.119] | 11 | Out of reach |"
        in text
    )
    assert "| the matched protocol | matched | primary | t4/r_vs_t | +0.100 [-0.180, -0.119] | 11 | Holds |" in text
    assert protocol_lines(lines[1:], tables, HEADINGS) == []


def test_the_replaced_plans_verdicts_are_counted_and_set_claim_by_claim_beside_the_ones_in_force(tmp_path, monkeypatch):
    """Issue 83: the counts before and after. The replaced plan judged again on the folder its results moved to; a
    claim either plan lacks reads `not a claim`, one outside a family says so."""
    import dataclasses

    from scaling_axes.harness.claims.observed import SEED_COLUMNS, read_csv
    from scaling_axes.harness.experiment import report_history
    from scaling_axes.harness.experiment.report import HEADINGS
    from scaling_axes.harness.experiment.report_claims import ClaimLine
    from scaling_axes.io import write_csv
    from tests.test_plan_decisions import _claim, _scale

    _, old_plan = _scale(tmp_path, {4: 0.31, 5: 0.29, 6: 0.30})
    pilot = tmp_path / "pilot" / "seeds" / "e.csv"  # the pilot's margins spread, as a power analysis needs
    rows = [{**r, "value": 9 + int(r["seed"]) / 10} if r["kind"] == "claim" else r for r in read_csv(pilot)]
    write_csv(pilot, SEED_COLUMNS, rows, checksum=True)
    monkeypatch.setattr(report_history, "replaced_plans", lambda scale: [(tmp_path / "cpu_old.yaml", "cpu")])
    monkeypatch.setattr(report_history, "plan_for", lambda scale, path, root: old_plan)
    kept = dataclasses.replace(old_plan.claims[0], excluded="out of reach: x")
    now = [
        ClaimLine(kept, "out_of_reach", "", "nats/token", None, 0, None, "", 0.025, (), (), None, 0, None),
        ClaimLine(_claim(id="new"), "claim_holds", "", "nats/token", None, 3, None, "", 0.025, (), (), None, 0, None),
    ]
    text = "\n".join(report_history.history_lines(tmp_path, old_plan, now, HEADINGS))
    assert "- before: 1 claims in the family (1 holds), 0 outside" in text
    assert "- now: 1 claims in the family (1 holds), 1 outside" in text
    assert "| c | Holds | Out of reach (outside the family) |" in text
    assert "| new | not a claim | Holds |" in text
    moved = [now[0], dataclasses.replace(now[0], claim=dataclasses.replace(kept, id="c", rows=("t/other",)))][1:]
    assert "| c | Holds | Out of reach (outside the family) (its rows changed) |" in "\n".join(
        report_history.history_lines(tmp_path, old_plan, moved, HEADINGS)
    )
    assert "| c | Holds | not a claim |" in "\n".join(
        report_history.history_lines(tmp_path, old_plan, now[1:], HEADINGS)
    )
    monkeypatch.setattr(report_history, "replaced_plans", lambda scale: [])
    assert report_history.history_lines(tmp_path, old_plan, now, HEADINGS) == []


def test_the_power_line_counts_as_tested_only_the_claims_that_reached_a_test(tmp_path, monkeypatch):
    """A claim in the family whose experiment has not trained enters its family at p = 1 (insufficient), but it
    reached no test: the power line must not count it among the claims the plan's power speaks to."""
    from scaling_axes.harness.claims.judge import judge_scale

    scale_dir, plan = _planned(tmp_path, monkeypatch)
    waiting = dataclasses.replace(plan.claims[0], id="w", experiment="not_trained_yet", rows=("t/p_vs_q",))
    other = dataclasses.replace(plan.experiments["e"], name="not_trained_yet")
    plan = dataclasses.replace(
        plan, claims=(*plan.claims, waiting), experiments={**plan.experiments, other.name: other}
    )
    for module in ("report_claims", "report"):
        monkeypatch.setattr(f"scaling_axes.harness.experiment.{module}.plan_for", lambda scale, **where: plan)
    judge_scale(scale_dir, CPU, plan)
    text = write_report(tmp_path, scale=CPU).read_text()
    assert "### Insufficient (1)" in text and "1 holds, 1 insufficient" in text
    assert "of its 2 claims to end insufficient" in text and "; 0 did, of 1 that reached a test." in text


def test_validation_against_test_gives_each_contrasts_margin_on_both_splits_and_says_which_the_files_hold(tmp_path):
    """Issue 83: each final-loss contrast's mean margin on validation and on test, their shift, which split decides,
    and that the per-seed files' claim rows are validation margins the judge forms again on test."""
    import dataclasses

    from scaling_axes.harness.claims.judge import read_scale
    from scaling_axes.harness.claims.observed import SEED_COLUMNS, read_csv
    from scaling_axes.harness.claims.plan import DecisionRules
    from scaling_axes.harness.experiment.report_shift import shift_lines
    from scaling_axes.io import write_csv
    from tests.test_plan_decisions import _scale

    tests = {("a", k): {"test_loss": 3.9 - k / 100} for k in (4, 5, 6)} | {
        ("b", k): {"test_loss": 4.0} for k in (4, 5, 6)
    }
    scale_dir, plan = _scale(tmp_path, {4: 0.0, 5: 0.0, 6: 0.0}, tests)
    evidence = {"contrast": "b:1;a:-1", "measure": "val_loss"}
    path = scale_dir / "seeds" / "e.csv"
    rows = [
        {**r, "value": evidence.get(r["metric"], r["value"])} if r["kind"] == "evidence" else r for r in read_csv(path)
    ]
    arm = {"kind": "arm", "table": "t", "row": "a_vs_b", "metric": "val_loss", "value": 4.0}
    rows += [{**arm, "run": a, "seed": k} for a in "ab" for k in (4, 5, 6)]  # the values the margins come from
    write_csv(path, SEED_COLUMNS, rows, checksum=True)
    on_test = dataclasses.replace(plan, rules=DecisionRules(verdict_split="test"))
    lines = shift_lines(read_scale(scale_dir, on_test), on_test)
    assert "| e | t/a_vs_b | 3 | +0.0000 | +0.1500 | +0.1500 |" in lines
    assert any("verdicts are judged on the test split. The per-seed files' `claim`" in line for line in lines)
    said = "\n".join(shift_lines(read_scale(scale_dir, plan), plan))
    assert "judged on the validation split." in said and "per-seed files' `claim`" not in said


def test_a_claim_line_sets_the_sign_flip_p_beside_the_t_p_where_the_plan_takes_the_larger():
    """Issue 83: every judged claim shows its permutation p beside its t p (the plan's p the larger), each checked
    here against scipy's t and a sign-flip test by enumeration of the 2^n signs."""
    import itertools

    from scipy import stats

    from scaling_axes.harness.claims.decisions import Tested
    from scaling_axes.harness.experiment.report_claims import ClaimLine, claim_line
    from tests.test_plan_decisions import _claim

    margins = (0.12, 0.08, -0.02, 0.1, 0.05, 0.09)
    mean, se = statistics.fmean(margins), statistics.stdev(margins) / len(margins) ** 0.5
    flips = [sum(s * m for s, m in zip(signs, margins, strict=True)) for signs in itertools.product((1, -1), repeat=6)]
    exact = sum(f >= sum(margins) - 1e-12 for f in flips) / len(flips)
    tested = Tested(mean, mean - 0.1, mean + 0.1, 0.01, 0.99, se, 5)
    line = ClaimLine(_claim(), "claim_holds", "", "nats/token", tested, 6, 0.01, "", 0.025, (), margins, None, 0, None)
    both = f"of holding, Student-t's p {stats.t.sf(mean / se, 5):.3g} and the exact sign-flip test's {exact:.3g}"
    assert both in claim_line(dataclasses.replace(line, sign_flip=True)) and both not in claim_line(line)


def test_the_plan_section_names_the_first_registration_its_pilot_recorded(tmp_path):
    """Issue 83: a plan registered twice is named by both digests: the first is the one every pilot run recorded."""
    from scaling_axes.harness.claims.observed import SEED_COLUMNS, read_csv
    from scaling_axes.harness.experiment.report import first_registration
    from scaling_axes.io import write_csv
    from tests.test_plan_decisions import _scale

    _, plan = _scale(tmp_path, {4: 0.31, 5: 0.29, 6: 0.30})
    assert first_registration(plan, _pilot(plan)) == ""  # the pilot recorded this plan's own digest: one registration
    pilot = tmp_path / "pilot" / "seeds" / "e.csv"
    rows = [{**r, "value": "f1r5t00000000000"} if r["kind"] == "plan" else r for r in read_csv(pilot)]
    write_csv(pilot, SEED_COLUMNS, rows, checksum=True)
    assert first_registration(plan, _pilot(plan)).startswith(
        " Its first registration, before the pilot, had digest `f1r5t00000"
    )


def test_the_plan_section_counts_the_positive_controls_as_controls(tmp_path):
    """A control is neither primary nor secondary: its own group in the family's count."""
    from scaling_axes.harness.experiment.report import plan_lines
    from scaling_axes.harness.experiment.report_claims import ClaimLine
    from tests.test_plan_decisions import _claim, _scale

    def line(**fields):
        return ClaimLine(_claim(**fields), "claim_holds", "", "", None, 3, None, "", 0.025, (), (), None, 0, None)

    lines = [line(), line(id="k", paper="controls", role="control"), line(id="k2", paper="controls", role="control")]
    plan = dataclasses.replace(_scale(tmp_path, {4: 0.31, 5: 0.29, 6: 0.30})[1], claims=tuple(c.claim for c in lines))
    text = "\n".join(plan_lines(plan, lines, {}))
    assert "3 claims, 3 in the family (controls: 2 positive controls; rmt: 1 primary, 0 secondary)" in text


def test_every_arms_final_loss_is_listed_lowest_first_with_its_rate_and_seeds(tmp_path):
    """Issue 83's final review: a claim that holds against one arm is read beside the others its experiment trained
    (the RMT beat the muP Transformer, the standard one of the same shape ended lower still)."""
    import dataclasses

    from scaling_axes.harness.claims.judge import read_scale
    from scaling_axes.harness.experiment.report_arms import arm_lines
    from tests.test_plan_decisions import _scale

    tests = {(a, k): {"test_loss": t + k / 100} for a, t in (("a", 3.5), ("b", 3.9)) for k in (4, 5, 6)}
    scale_dir, plan = _scale(tmp_path, {4: 0.3, 5: 0.3, 6: 0.3}, tests)
    planned = dataclasses.replace(plan.experiments["e"], arms={"b": 0.02, "a": None})
    plan = dataclasses.replace(plan, experiments={"e": planned})
    lines = arm_lines(read_scale(scale_dir, plan), plan)
    rows = [line for line in lines if line.startswith("| a |") or line.startswith("| b |")]
    assert rows == [
        "| a | declared | 3 | 3.5500 +- 0.0100 | 4.0000 +- 0.0000 |",
        "| b | 0.02 | 3 | 3.9500 +- 0.0100 | 4.0000 +- 0.0000 |",
    ]
    assert arm_lines({}, plan) == []


def _pilot(plan) -> dict:
    """The plan's pilot experiments, read once as `write_report` reads them for its sections."""
    from scaling_axes.harness.claims.observed import read_experiments

    return read_experiments(plan.pilot_dir, plan.experiments)
