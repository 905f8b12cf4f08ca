"""REPORT.md as a researcher reads it: one line per claim grouped by verdict (duplicates merged), its margin,
interval and seeds, a forest plot, the scale's caveats once, the tables' bulk left in their CSVs; and the per-seed
file from which any verdict can be recomputed by hand."""

import csv
import statistics

import pytest

from scaling_axes.harness.claims.verdicts import judge, settle
from scaling_axes.harness.experiment.noise import Trained
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.experiment.seeds import Judged, write_seeds
from scaling_axes.harness.results import Row, write_rows
from scaling_axes.harness.scales import CPU
from scaling_axes.significance import significance

HOLDS, FAILS, UNDECIDED = [0.30, 0.25, 0.28], [-0.30, -0.25, -0.28], [0.01, -0.02, 0.015]


def _claims(experiment: str) -> list[Row]:
    not_learning = settle(
        judge("t", "d_vs_e", "d beats e", CPU, HOLDS, 0.02, "nats/token", runs=("d", "e")),
        CPU,
        not_learning=["d ends at 7.0 nats/token, not 0.5 below the unigram floor 6.5"],
    )
    return [
        judge("t", "c_vs_b", "c beats b", CPU, UNDECIDED, 0.02, "nats/token", runs=("c", "b")),
        judge("t", "a_vs_b", "a beats b", CPU, HOLDS, 0.02, "nats/token", runs=("a", "b")),
        not_learning,
        judge("t", "b_vs_a", "b beats a", CPU, FAILS, 0.02, "nats/token", runs=("b", "a")),
        judge("t", "shared", f"a claim only {experiment} states", CPU, HOLDS, 0.02, "points", runs=("x", "y")),
    ]


def test_the_report_lists_each_claim_once_by_verdict_within_its_length(tmp_path):
    bulk = [Row(table="counts", row=f"r{i}", metric="params", ours=i, note=CPU.note) for i in range(400)]
    for experiment in ("exp_a", "exp_b"):  # the same four claims of the same runs in both
        write_rows(experiment, CPU, [*bulk, *_claims(experiment)], tmp_path)
    text = write_report(tmp_path, scale=CPU).read_text()
    lines = text.splitlines()
    headings = [text.index(f"### {h}") for h in ("Holds (2)", "Fails (1)", "Insufficient (1)", "Not learning (1)")]
    assert headings == sorted(headings)
    (holds,) = [line for line in lines if line.startswith("- a beats b")]
    low = statistics.mean(HOLDS) - significance(HOLDS, 0.02).bound
    assert f"**+{statistics.mean(HOLDS):.3g} [{low:.3g}, " in holds and "3 seeds" in holds
    assert "exp_a: a_vs_b; exp_b: a_vs_b" in holds  # merged, both places named
    # the claim each table states in its own words, of the same runs and margins, is one hypothesis: one line
    assert "exp_a: shared; exp_b: shared" in next(line for line in lines if line.startswith("- a claim only exp_a"))
    assert sum(line.startswith("- ") and " seeds, p " in line.partition("**")[2] for line in lines) == 5
    assert "minimum detectable effect" in next(line for line in lines if line.startswith("- c beats b"))
    assert "decides nothing: d ends at 7.0" in next(line for line in lines if line.startswith("- d beats e"))
    assert text.count(CPU.note) == 1 and "r399" not in text  # the caveat once; the bulk stays in the CSVs
    assert len(lines) < 400 and (tmp_path / "cpu" / "claims_forest.png").stat().st_size > 10_000
    assert text.index("## Claims") < text.index("## What every number") < text.index("## Tables")
    counts = next(line for line in lines if line.startswith("- [exp_a](exp_a.csv)")).partition(": ")[2]
    assert sum(int(part.split()[0]) for part in counts.split(", ")) == 405  # every row of the table, counted


def test_a_verdict_can_be_recomputed_from_the_per_seed_file(tmp_path):
    claim = judge("t", "a_vs_b", "a beats b", CPU, {1: 0.30, 2: 0.25, 4: 0.28}, 0.02, "nats/token", runs=("a", "b"))
    results = {"a": {"val_loss": 4.0, "steps": 10, "seed_runs": {2: {"val_loss": 4.1, "steps": 10}}}}
    path = write_seeds("exp", CPU, [claim], Judged(results, Trained({}, {})), tmp_path)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    margins = {int(r["seed"]): float(r["value"]) for r in rows if r["kind"] == "claim"}
    assert margins == {1: 0.30, 2: 0.25, 4: 0.28}  # each margin at its own seed (3 did not finish)
    bound = significance(list(margins.values()), 0.02).bound
    assert claim.low == statistics.mean(margins.values()) - bound and claim.status == "claim_holds"
    runs = {(r["run"], r["seed"], r["metric"]): float(r["value"]) for r in rows if r["kind"] == "run"}
    assert runs == {
        ("a", "1", "val_loss"): 4.0,
        ("a", "1", "steps"): 10,
        ("a", "2", "val_loss"): 4.1,
        ("a", "2", "steps"): 10,
    }


def test_a_results_csv_from_before_the_interval_columns_still_reports(tmp_path):
    """A committed CSV of an earlier format (no low, high, seeds, p, q) is read, its claims shown with their mean,
    apart from today's verdicts: it was judged by older rules."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "old.csv").write_text(
        "experiment,table,row,metric,paper,ours,unit,scale,run,status,note\n"
        'old,t,a_vs_b,claim,,0.3,nats/token,cpu,"a,b",claim_holds,a beats b | margin +0.3 nats/token\n'
    )
    text = write_report(tmp_path).read_text() + write_report(tmp_path, scale=CPU).read_text()
    assert "- a beats b: **+0.3 [?, ?] nats/token, 0 seeds** (old: a_vs_b)" in text
    assert "### Judged by older rules (not rebuilt since: no p or q, no second tuning policy) (1)" in text
    assert "### Holds" not in text


def test_smoke_results_stay_out_of_the_committed_report(tmp_path):
    """`make smoke` writes results/smoke/ (ignored): the report of every scale leaves it out, so a fresh clone's
    `git status` stays clean after it."""
    from scaling_axes.harness.scales import SMOKE

    write_rows("exp_a", CPU, _claims("exp_a"), tmp_path)
    before = write_report(tmp_path).read_text()
    write_rows("exp_a", SMOKE, _claims("exp_a"), tmp_path)
    assert write_report(tmp_path).read_text() == before and "smoke scale" not in before
    assert write_report(tmp_path, scale=SMOKE).parent == tmp_path / "smoke"


def _one_seed_claim(statement: str, runs: tuple[str, str], p: float) -> Row:
    """A one-seed claim whose two-sided p against the assumed floor (sqrt 2 x 0.02, a normal test) is `p`."""
    margin = statistics.NormalDist().inv_cdf(1 - p / 2) * 2**0.5 * 0.02
    return judge("t", "_vs_".join(runs), statement, CPU, [margin], 0.02, "nats/token", runs=runs)


def _judged_scale(results_dir, tables: dict[str, list[Row]], results: dict | None = None) -> dict[tuple, dict]:
    """`tables` written as a scale's CSVs and per-seed files (the runs' `results` in them), then judged as one
    family; (table, row) -> CSV row."""
    from scaling_axes.harness.experiment.family import judge_family

    for name, rows in tables.items():
        write_rows(name, CPU, rows, results_dir)
        write_seeds(name, CPU, rows, Judged(results or {}, Trained({}, {})), results_dir)
    judge_family(results_dir / "cpu")
    out = {}
    for name in tables:
        with open(results_dir / "cpu" / f"{name}.csv", newline="") as f:
            out |= {(name, r["row"]): r for r in csv.DictReader(f)}
    return out


def test_the_family_is_every_declared_claim_each_hypothesis_once_under_benjamini_yekutieli(tmp_path):
    """Five hypotheses over two experiments, one stated by both (counted once), one kept from its test by a run
    that did not learn (in the family all the same, at p = 1): p 0.001, 0.04, 0.045, 0.3, 1 give Benjamini-Hochberg's
    0.005, 0.075, 0.075, 0.375, 1, times 1 + 1/2 + ... + 1/5 under any dependence (Benjamini-Yekutieli). The two
    decided by their own test at q >= 0.05 decide nothing and say why. Judging again changes nothing, and REPORT.md
    states the family."""
    shared = _one_seed_claim("a beats b", ("a", "b"), 0.001)
    not_learning = settle(_one_seed_claim("d beats e", ("d", "e"), 0.001), CPU, not_learning=["d did not learn"])
    exp_a = [shared, _one_seed_claim("c beats b", ("c", "b"), 0.04), not_learning]
    exp_b = [shared, _one_seed_claim("f beats g", ("f", "g"), 0.045), _one_seed_claim("h beats g", ("h", "g"), 0.3)]
    rows = _judged_scale(tmp_path, {"exp_a": exp_a, "exp_b": exp_b})
    harmonic = sum(1 / k for k in range(1, 6))
    q = {key: float(r["q"]) for key, r in rows.items()}
    expected = {
        ("exp_a", "a_vs_b"): 0.005,
        ("exp_a", "c_vs_b"): 0.075,
        ("exp_a", "d_vs_e"): 1 / harmonic,
        ("exp_b", "a_vs_b"): 0.005,
        ("exp_b", "f_vs_g"): 0.075,
        ("exp_b", "h_vs_g"): 0.375,
    }
    assert q == pytest.approx({key: min(1.0, value * harmonic) for key, value in expected.items()}, rel=1e-4)
    status = {key: r["status"] for key, r in rows.items()}
    assert status[("exp_a", "a_vs_b")] == status[("exp_b", "a_vs_b")] == "claim_holds"
    assert status[("exp_a", "c_vs_b")] == status[("exp_b", "f_vs_g")] == status[("exp_b", "h_vs_g")] == "insufficient"
    assert status[("exp_a", "d_vs_e")] == "not_learning" and "enters with p = 1" in rows[("exp_a", "d_vs_e")]["note"]
    assert "q 0.171 over 5 hypotheses (Benjamini-Yekutieli)" in rows[("exp_a", "c_vs_b")]["note"]
    assert "decides nothing (multiplicity)" in rows[("exp_a", "c_vs_b")]["note"]
    before = {name: (tmp_path / "cpu" / f"{name}.csv").read_text() for name in ("exp_a", "exp_b")}
    from scaling_axes.harness.experiment.family import judge_family

    assert judge_family(tmp_path / "cpu") == 5
    assert before == {name: (tmp_path / "cpu" / f"{name}.csv").read_text() for name in ("exp_a", "exp_b")}
    text = write_report(tmp_path, scale=CPU).read_text()
    assert "The family: every claim declared at this scale, 6 rows, 5 hypotheses" in text
    from scaling_axes.harness.experiment.report_claims import claims_of, read_tables

    claims = {c.where[0]: c for c in claims_of(read_tables(tmp_path / "cpu"))}
    low, high = claims["exp_a: c_vs_b"].adjusted  # the interval the control decides by: wider than the 95% one
    assert low < float(claims["exp_a: c_vs_b"].low) and high > float(claims["exp_a: c_vs_b"].high) and low < 0
    assert "2 decided by their own test did not survive" in text


def test_a_decided_verdict_that_a_threshold_moved_a_quarter_would_change_says_so(tmp_path):
    """A claim decided on arms whose seed 2 spiked 0.7 nats (below the 0.8 threshold, above 0.6 = -25%) hangs on
    SPIKE_NATS; an "as good as" claim shown inside +-0.05 (two one-sided tests p 0.02, q 0.04) hangs on its tolerance
    at 0.0375; one decided clear of every threshold says nothing. REPORT.md lists them under its thresholds."""
    spiked = {
        "val_loss": 3.0,
        "seed_runs": {2: {"val_loss": 3.0, "train_loss_spike": {"nats": 0.7, "step": 5, "loss": 9.0}}},
    }
    results = {"a": spiked, "b": {"val_loss": 3.3}, "c": {"val_loss": 3.0}, "d": {"val_loss": 3.3}}
    on_spike = judge("t", "a_vs_b", "a beats b", CPU, [0.3, 0.31, 0.29], 0.02, "nats/token", runs=("a", "b"))
    clear = judge("t", "c_vs_d", "c beats d", CPU, [0.3, 0.31, 0.29], 0.02, "nats/token", runs=("c", "d"))
    within = judge(
        "t",
        "e_vs_f",
        "e as good as f (within 0.05 nats/token)",
        CPU,
        [0.05, 0.04, 0.06],
        0.03,
        "nats/token",
        runs=("e", "f"),
        tolerance=0.05,
    )
    assert within.status == "claim_holds"
    rows = _judged_scale(tmp_path, {"exp": [on_spike, clear, within]}, results)
    assert rows[("exp", "a_vs_b")]["status"] == rows[("exp", "c_vs_d")]["status"] == "claim_holds"
    assert "hangs on a threshold: SPIKE_NATS at 0.6: a seed 2 turns unstable" in rows[("exp", "a_vs_b")]["note"]
    assert "hangs on a threshold" not in rows[("exp", "c_vs_d")]["note"]
    assert "its tolerance at 0.0375: insufficient" in rows[("exp", "e_vs_f")]["note"]
    text = write_report(tmp_path, scale=CPU).read_text()
    assert "## Thresholds: 2 of 3 decided verdicts hang on one" in text and "- `SPIKE_NATS` 0.8 (" in text


def test_the_family_with_the_rule_switched_off_is_looser():
    """Benjamini-Yekutieli's factor is what makes the control valid under dependence: the same p without it are
    Benjamini-Hochberg's, smaller by exactly 1 + 1/2 + ... + 1/m."""
    from scaling_axes.significance import false_discovery_q

    p = [0.001, 0.04, 0.045, 0.3, 1.0]
    by, bh = false_discovery_q(p, dependent=True), false_discovery_q(p)
    assert by == pytest.approx([min(1.0, q * sum(1 / k for k in range(1, 6))) for q in bh])
    assert bh == pytest.approx([0.005, 0.075, 0.075, 0.375, 1.0])


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
    write_rows("exp_a", CPU, [*_claims("exp_a"), passes, fails], tmp_path)
    text = write_report(tmp_path, scale=CPU).read_text()
    assert "## Exact checks: 1 of 2 pass" in text and "- growth preserves h's function: **fails**" in text
    claims_heading = next(line for line in text.splitlines() if line.startswith("## Claims: "))
    assert sum(int(word) for word in claims_heading.replace(",", " ").split() if word.isdigit()) == 5


def test_no_empty_figure_is_written_or_linked(tmp_path):
    """A figure without a point to draw (MoT's mixouts before their curves exist) is not written, an earlier one at
    its path goes, and REPORT.md links none; with points it is written and linked."""
    from scaling_axes.harness.experiment.figures import line_figure

    path = tmp_path / "cpu" / "exp_a.png"
    write_rows("exp_a", CPU, _claims("exp_a"), tmp_path)
    points = [(1, 2.0, 0.1, (1.9, 2.1)), (2, 1.5, 0.0, (1.5, 1.5))]
    line_figure(path, {"a": points}, notes=(("fallback lr 0.003", 1, 2.0),), title="t")
    assert path.stat().st_size > 1000 and "[figure](exp_a.png)" in write_report(tmp_path, scale=CPU).read_text()
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
    assert not path.exists() and "[figure]" not in write_report(tmp_path, scale=CPU).read_text()


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


def test_a_report_killed_mid_write_leaves_nothing_after_the_next_one(tmp_path):
    """Issue 58, case 7: a `--report` killed mid-write left `.<experiment>.csv.tmp<pid>` that nothing cleaned. The
    next rebuild removes a dead writer's temporaries and leaves a live writer's alone."""
    import os
    import subprocess
    import sys

    from scaling_axes.harness.experiment.table import rebuild
    from scaling_axes.harness.runs import Experiment

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
