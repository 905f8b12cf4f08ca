"""Every claim of issue 73's plan (its judged `results/cpu/`, moved whole to `results/cpu/issue73/` when issue 83's
plan came into force) decided again from the committed files alone (the plan, the tables and
the per-seed files beside them), by an implementation that shares nothing with `harness/claims/` or
`significance.py`: PyYAML for the plan, scipy's Student-t, numpy's least squares for the arm x seed model, the
thresholds, each kind's one-sided tests, `each`, Holm and Benjamini-Yekutieli written again (the last two in
`tests/registered_rebuild.py`, which the issue-83 rebuild shares). Each claim row's
estimate, interval, p, adjusted p and status must come out as committed; a margin, a run's measure, the plan or a
verdict edited by hand fails here."""

import csv
import hashlib
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from tests.registered_rebuild import by, holm, read

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "cpu" / "issue73"  # issue 73's judged results, moved whole when issue 83's plan came in
PLAN_FILE = ROOT / "scaling_axes" / "plans" / "history" / "cpu_issue73.yaml"
SPIKE, RISE, OUTLIER_NATS, OUTLIER_Z, LEARNED = 0.8, 0.1, 0.25, 3.5, 0.5


def _plan() -> tuple[dict, str]:
    data = PLAN_FILE.read_bytes()
    return yaml.safe_load(data), hashlib.sha256(data).hexdigest()[:16]


def _claims(plan: dict) -> list[dict]:
    out = []
    for paper, claims in plan["papers"].items():
        for claim in claims:
            excluded = claim.get("excluded") or ("out of reach" if claim["id"] in plan.get("out_of_reach", {}) else "")
            out.append({**claim, "paper": paper, "excluded": excluded, "tolerance": claim.get("tolerance", 0.0)})
    return out


def _experiment(name: str) -> tuple[list[dict], dict, dict]:
    """The table's rows, and from its per-seed file: (table, row) -> {margins, arms, evidence}; run -> seed -> measures
    (with the plan digest it recorded)."""
    rows, seeds = read(RESULTS / f"{name}.csv"), read(RESULTS / "seeds" / f"{name}.csv")
    claims = defaultdict(lambda: {"margins": {}, "arms": defaultdict(dict), "evidence": {}})
    runs = defaultdict(lambda: defaultdict(dict))
    for r in seeds:
        if r["kind"] == "claim":
            claims[(r["table"], r["row"])]["margins"][int(r["seed"])] = float(r["value"])
        elif r["kind"] == "arm":
            claims[(r["table"], r["row"])]["arms"][r["run"]][int(r["seed"])] = float(r["value"])
        elif r["kind"] == "evidence":
            claims[(r["table"], r["row"])]["evidence"][r["metric"]] = r["value"]
        elif r["kind"] == "run":
            runs[r["run"]][int(r["seed"])][r["metric"]] = float(r["value"])
        elif r["kind"] == "plan":
            runs[r["run"]][int(r["seed"])]["plan"] = r["value"]
    return rows, claims, runs


def _outliers(finals: dict[int, float]) -> bool:
    if len(finals) < 3:
        return False
    median = float(np.median(list(finals.values())))
    mad = 1.4826 * float(np.median([abs(v - median) for v in finals.values()]))
    return any(abs(v - median) > OUTLIER_NATS and abs(v - median) > OUTLIER_Z * mad for v in finals.values())


def _blocked(row: dict, found: dict, runs: dict, seeds: list[int], digest: str) -> str:
    """The status that keeps a row from its test (empty: none), as the plan's policies say."""
    if found["evidence"].get("held"):
        return found["evidence"]["held"]
    if any(k not in found["margins"] for k in seeds):
        return "insufficient"
    for arm in filter(None, row["run"].split(",")):
        each = {k: runs[arm][k] for k in seeds}
        if any(m.get("plan") != digest for m in each.values()):
            return "plan_changed"
        if found["evidence"].get("before_training") != "True" and (
            any(m.get("spike_nats", 0) > SPIKE or m.get("val_rise_nats", 0) > RISE for m in each.values())
            or _outliers({k: m["val_loss"] for k, m in each.items() if "val_loss" in m})
        ):
            return "unstable"
        if any("unigram_floor" in m and m["val_loss"] > m["unigram_floor"] - LEARNED for m in each.values()):
            return "not_learning"
    return ""


def _test(found: dict, seeds: list[int], model: str, pooled: list[dict]) -> tuple[float, float, float]:
    """(estimate, se, df): the paired t on the row's own margins, or the arm x seed least squares over `pooled`
    (the experiment's testable contrast rows of the row's measure; blocks of arms the rows join)."""
    margins = np.array([found["margins"][k] for k in seeds])
    if model == "own_spread" or not found["evidence"].get("contrast"):
        return float(margins.mean()), float(margins.std(ddof=1) / math.sqrt(len(seeds))), len(seeds) - 1
    values = {a: v for o in pooled for a, v in o["arms"].items()}
    arms = sorted(values)
    parent = {a: a for a in arms}

    def root(a: str) -> str:
        return a if parent[a] == a else root(parent[a])

    for o in pooled:  # the blocks: the arms the rows' contrasts join
        joined = sorted(o["arms"])
        for a in joined[1:]:
            parent[root(a)] = root(joined[0])
    block = {a: root(a) for a in arms}
    blocks = sorted(set(block.values()))
    y, design = [], []
    for arm in arms:
        for k in seeds:
            y.append(values[arm][k])
            design.append(
                [float(a == arm) for a in arms] + [float(b == block[arm] and s == k) for b in blocks for s in seeds]
            )
    fit, *_ = np.linalg.lstsq(np.array(design), np.array(y), rcond=None)
    df = sum((sum(block[a] == b for a in arms) - 1) * (len(seeds) - 1) for b in blocks)
    sigma = math.sqrt(float(np.sum((np.array(y) - np.array(design) @ fit) ** 2)) / df)
    contrast = {a: float(c) for a, _, c in (p.rpartition(":") for p in found["evidence"]["contrast"].split(";"))}
    estimate = sum(c * fit[arms.index(a)] for a, c in contrast.items())
    return estimate, sigma * math.sqrt(sum(c * c for c in contrast.values()) / len(seeds)), df


def _ps(estimate: float, se: float, df: float, kind: str, tolerance: float) -> tuple[float, float]:
    """(p that it holds, p that it fails), one-sided, by kind."""
    above = lambda v: stats.t.sf((estimate - v) / se, df)  # noqa: E731
    below = lambda v: stats.t.sf((v - estimate) / se, df)  # noqa: E731
    if kind == "superiority":
        return above(0.0), below(0.0)
    if kind == "non_inferiority":
        return above(-tolerance), below(-tolerance)
    return max(above(-tolerance), below(tolerance)), min(1.0, 2 * min(above(tolerance), below(-tolerance)))


def _decide(plan: dict, digest: str) -> dict:
    """(experiment, table/row) -> the row's expected (status, estimate, low, high, p, q); a row kept from its test,
    its status alone."""
    claims, expected, tested = _claims(plan), {}, {}
    tables = {name: _experiment(name) for name in {c["experiment"] for c in claims if not c["excluded"]}}
    for claim in (c for c in claims if not c["excluded"]):
        rows, found, runs = tables[claim["experiment"]]
        planned = plan["experiments"][claim["experiment"]]
        seeds = planned["seeds"]
        by_where = {f"{r['table']}/{r['row']}": r for r in rows if r["metric"] == "claim"}
        blocks = {w: _blocked(by_where[w], found[tuple(w.split("/", 1))], runs, seeds, digest) for w in claim["rows"]}
        if any(blocks.values()):
            tested[claim["id"]] = None
            for where, status in blocks.items():
                expected[(claim["experiment"], where)] = (status or "insufficient",) + (None,) * 5
            continue
        testable = [
            found[(r["table"], r["row"])]
            for w, r in by_where.items()
            if not _blocked(r, found[(r["table"], r["row"])], runs, seeds, digest)
        ]
        steps = []
        for where in claim["rows"]:
            mine = found[tuple(where.split("/", 1))]
            pooled = [o for o in testable if o["evidence"].get("measure") == mine["evidence"].get("measure")]
            estimate, se, df = _test(mine, seeds, planned["test"], pooled)
            steps.append((where, estimate, se, df, *_ps(estimate, se, df, claim["kind"], claim["tolerance"])))
        tested[claim["id"]] = steps
    for paper in plan["papers"]:
        for role, adjust in (("primary", holm), ("secondary", by)):
            group = [c for c in claims if c["paper"] == paper and c["role"] == role and not c["excluded"]]
            holds = [max(s[4] for s in tested[c["id"]]) if tested[c["id"]] else 1.0 for c in group]
            fails = [min(1.0, len(t) * min(s[5] for s in t)) if (t := tested[c["id"]]) else 1.0 for c in group]
            for c, p_hold, p_fail, q_hold, q_fail in zip(
                group, holds, fails, adjust(holds), adjust(fails), strict=True
            ):
                if tested[c["id"]] is None:
                    continue
                if q_fail < 0.025:
                    verdict, p, q = "claim_fails", p_fail, q_fail
                elif q_hold < 0.025:
                    verdict, p, q = "claim_holds", p_hold, q_hold
                else:
                    q, p = min((q_hold, p_hold), (q_fail, p_fail))
                    verdict = "insufficient"
                for where, estimate, se, df, *_ in tested[c["id"]]:
                    half = stats.t.ppf(0.975, df) * se
                    expected[(c["experiment"], where)] = (verdict, estimate, estimate - half, estimate + half, p, q)
    return expected


def test_every_planned_claim_row_is_decided_again_from_the_committed_files():
    plan, digest = _plan()
    expected = _decide(plan, digest)
    assert expected
    for (experiment, where), (status, estimate, low, high, p, q) in expected.items():
        table, _, row = where.partition("/")
        (committed,) = [
            r
            for r in read(RESULTS / f"{experiment}.csv")
            if (r["table"], r["row"], r["metric"]) == (table, row, "claim")
        ]
        assert committed["status"] == status, (where, committed["status"], status)
        if estimate is not None:
            for column, value in (("ours", estimate), ("low", low), ("high", high), ("p", p), ("q", q)):
                assert float(committed[column]) == pytest.approx(value, rel=1e-4, abs=1e-9), (where, column)


def test_the_plan_is_the_one_every_claim_run_trained_under_and_its_family_counts_claims():
    """Every fresh run recorded the committed plan's digest; REPORT.md names the plan and the digest; the
    family counts the papers' claims, and the claims outside it are listed."""
    plan, digest = _plan()
    for experiment in plan["experiments"]:
        recorded = {r["value"] for r in read(RESULTS / "seeds" / f"{experiment}.csv") if r["kind"] == "plan"}
        assert recorded == {digest}, experiment
    report = (RESULTS / "REPORT.md").read_text()
    assert f"digest `{digest}`" in report and "scaling_axes/plans/cpu.yaml" in report
    claims = _claims(plan)
    inside = [c for c in claims if not c["excluded"]]
    assert f"{len(claims)} claims, {len(inside)} in the family" in report
    assert all(f"**{c['id']}**" in report.partition("### Outside the family")[2] for c in claims if c["excluded"])


def test_no_pilot_seed_enters_a_verdict():
    plan, _ = _plan()
    pilot = set(plan["pilot_seeds"])
    for experiment, planned in plan["experiments"].items():
        assert not pilot & set(planned["seeds"])
        margins = [r for r in read(RESULTS / "seeds" / f"{experiment}.csv") if r["kind"] == "claim"]
        assert margins and not {int(r["seed"]) for r in margins} & pilot, experiment


def test_a_margin_edited_by_hand_is_caught(tmp_path, monkeypatch):
    """The rebuild is not a copy: one committed margin moved by a nat, and its row no longer comes out as committed."""
    import shutil
    import sys

    shutil.copytree(RESULTS, tmp_path / "cpu")
    path = tmp_path / "cpu" / "seeds" / "rmt_table3_4_resources.csv"  # Table 4's claim: tested, and decided
    rows = read(path)
    first = next(i for i, r in enumerate(rows) if r["kind"] == "claim" and r["table"] == "table4")
    rows[first] = {**rows[first], "value": str(float(rows[first]["value"]) + 1.0)}
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    monkeypatch.setattr(sys.modules[__name__], "RESULTS", tmp_path / "cpu")
    with pytest.raises(AssertionError):
        test_every_planned_claim_row_is_decided_again_from_the_committed_files()
