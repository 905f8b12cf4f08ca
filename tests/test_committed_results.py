"""Every claim row of the committed `results/cpu/` rebuilt from the committed files alone (the per-seed file beside
each table), by an implementation that shares nothing with `harness/claims/`, `experiment/family.py` or
`significance.py`: scipy's Student-t and normal, numpy's pooling, the paired margins' pooled spread, two one-sided
tests, and the family (every declared claim, one hypothesis per runs and margins, Benjamini-Yekutieli) written
again. A claim row's margin, interval, p, q and verdict must come out as committed; a margin, noise input or verdict
edited by hand fails here."""

import csv
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

RESULTS = Path(__file__).resolve().parents[1] / "results" / "cpu"
TABLES = sorted(RESULTS.glob("*.csv"))


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _pooled(groups: list[list[float]]) -> tuple[float, int]:
    """The pooled standard deviation of repeated measurements and its degrees of freedom (groups of two or more)."""
    groups = [g for g in groups if len(g) > 1]
    dof = sum(len(g) - 1 for g in groups)
    return (math.sqrt(sum(np.var(g, ddof=1) * (len(g) - 1) for g in groups) / dof), dof) if dof else (0.0, 0)


def _noise(seeds: list[dict[str, str]], metric: str) -> tuple[float, int]:
    """One run's noise of `metric`: the seeds of each trained run pooled, those flagged unstable left out."""
    by_run = defaultdict(list)
    for r in seeds:
        if r["kind"] == "trained" and r["metric"] == metric and "unstable" not in r["flag"].split():
            by_run[r["run"]].append(float(r["value"]))
    return _pooled(list(by_run.values()))


def _critical(dof: float) -> float:
    return stats.norm.ppf(0.975) if math.isinf(dof) else stats.t.ppf(0.975, dof)


def _sf(t: float, dof: float) -> float:
    return stats.norm.sf(t) if math.isinf(dof) else stats.t.sf(t, dof)


def _p(t: float, dof: float) -> float:
    return 2 * (stats.norm.sf(abs(t)) if math.isinf(dof) else stats.t.sf(abs(t), dof))


def _tests(margins: list[float], floor: float, floor_dof: float) -> list[tuple[float, float]]:
    """(standard error, dof) of each test a mean margin must clear: against its noise, and on its seeds' spread."""
    n = len(margins)
    tests = [(floor / math.sqrt(n), floor_dof)]
    if n > 1:
        tests.append((float(np.std(margins, ddof=1)) / math.sqrt(n), n - 1))
    return tests


def _paired_pools(table: list[dict[str, str]], seeds: list[dict[str, str]], kind: str = "claim") -> dict:
    """Per pool (metric, unit, runs per margin; a claim on a metric no run records alone), the pooled spread of the
    table's paired margins (`kind`: under the settled tuning policy, or `claim_at_choice`), each comparison once, the
    claims whose arms did not learn (or, where settled, trained unstably) left out."""
    pools = defaultdict(dict)
    for row in table:
        if row["metric"] != "claim" or row["status"] in ("not_learning", "unstable")[: 2 if kind == "claim" else 1]:
            continue
        mine = [r for r in seeds if (r["table"], r["row"]) == (row["table"], row["row"])]
        evidence = {r["metric"]: r["value"] for r in mine if r["kind"] == "evidence"}
        margins = [float(r["value"]) for r in mine if r["kind"] == kind]
        if not evidence or evidence.get("paired") != "True" or len(margins) < 2:
            continue
        pool = (
            (evidence["noise_metric"], row["unit"], evidence["runs_per_margin"])
            if evidence["noise_metric"]
            else (row["table"], row["row"])
        )
        pools[pool][(",".join(sorted(row["run"].split(","))), tuple(f"{m:.9g}" for m in margins))] = margins
    return {pool: _pooled(list(groups.values())) for pool, groups in pools.items()}


def _noise_of(row, evidence, seeds, pools) -> tuple[float, float]:
    """(one margin's noise, its dof): its pool's paired spread, else the floor sqrt(runs) x one run's noise."""
    pool = (
        (evidence["noise_metric"], row["unit"], evidence["runs_per_margin"])
        if evidence["noise_metric"]
        else (row["table"], row["row"])
    )
    spread, dof = pools.get(pool, (0.0, 0))
    if evidence.get("paired") == "True" and dof and spread:
        return spread, dof
    floor, floor_dof = float(evidence["noise_floor"]), math.inf
    candidates = []
    if evidence["noise_metric"]:
        spread, dof = _noise(seeds, evidence["noise_metric"])
        candidates.append((float(evidence["noise_scale"]) * spread, dof))
    arms = defaultdict(list)
    for r in seeds:
        if r["kind"] == "claim_arm" and (r["table"], r["row"]) == (row["table"], row["row"]):
            arms[r["metric"]].append(float(r["value"]))
    candidates.append(_pooled(list(arms.values())))
    for spread, dof in candidates:
        if dof and spread > floor:
            floor, floor_dof = spread, dof
    return math.sqrt(int(evidence["runs_per_margin"])) * floor, floor_dof


def _test(margins: list[float], noise: tuple[float, float], tolerance: str) -> tuple[float, float, float, str]:
    """(mean, 95% bound, p, verdict at 0.05 before the family) of one claim's margins."""
    tests, mean = _tests(margins, *noise), float(np.mean(margins))
    bound = max(_critical(dof) * se for se, dof in tests)
    if not tolerance:
        p = max(_p(mean / se, dof) if se else float(mean == 0) for se, dof in tests)
        return mean, bound, p, ("claim_holds" if mean > 0 else "claim_fails") if p < 0.05 else "insufficient"
    tol = float(tolerance)
    difference = mean - tol
    if abs(difference) < tol:  # two one-sided tests that it lies within
        p = max(max(_sf((difference + tol) / se, dof), _sf((tol - difference) / se, dof)) for se, dof in tests)
        return mean, bound, p, "claim_holds" if p < 0.05 else "insufficient"
    p = max(_p((abs(difference) - tol) / se, dof) for se, dof in tests)
    return mean, bound, p, "claim_fails" if p < 0.05 else "insufficient"


def _benjamini_yekutieli(p: dict) -> dict:
    keys = sorted(p, key=p.get)
    m, q, running = len(keys), {}, 1.0
    harmonic = sum(1 / k for k in range(1, m + 1))
    for rank in range(m, 0, -1):
        running = min(running, p[keys[rank - 1]] * m * harmonic / rank)
        q[keys[rank - 1]] = running
    return q


def _claims(results: Path) -> list[tuple[str, dict[str, str], list[dict[str, str]], dict]]:
    """Each claim row of the scale (every table written under today's rules), with its per-seed rows and its table's
    paired pools."""
    out = []
    for path in sorted(results.glob("*.csv")):
        table, seeds_path = _read(path), results / "seeds" / path.name
        seeds = _read(seeds_path) if seeds_path.exists() else []
        pools = (_paired_pools(table, seeds), _paired_pools(table, seeds, "claim_at_choice"))
        out += [(path.stem, row, seeds, pools) for row in table if row["metric"] == "claim" and "q" in row]
    return out


def _rebuilt(results: Path) -> dict[tuple[str, str], dict]:
    """(table file, row) -> what the committed files say its numbers and verdict must be."""
    claims, per_row, family = _claims(results), {}, {}
    for name, row, seeds, pools in claims:
        mine = [r for r in seeds if (r["table"], r["row"]) == (row["table"], row["row"])]
        evidence = {r["metric"]: r["value"] for r in mine if r["kind"] == "evidence"}
        margins = [float(r["value"]) for r in mine if r["kind"] == "claim"]
        runs = ",".join(sorted(row["run"].split(",")))
        statement = row["note"].split("; data: ")[0].split(" | ")[0]
        key = (runs, row["unit"], tuple(f"{m:.6g}" for m in margins)) if margins else (runs, statement)
        entry = {"key": key, "p_family": 1.0, "tested": bool(evidence.get("verdict"))}
        if entry["tested"]:
            noise = _noise_of(row, evidence, seeds, pools[0])
            entry["mean"], entry["bound"], entry["p"], entry["verdict"] = _test(margins, noise, evidence["tolerance"])
            entry["p_family"] = entry["p"]
            if "p_at_choice" in evidence:
                other = [float(r["value"]) for r in mine if r["kind"] == "claim_at_choice"]
                theirs = _noise_of(row, evidence, seeds, pools[1])
                entry["other"] = _test(other, theirs, evidence["tolerance"]) if evidence["verdict_at_choice"] else None
                entry["p_family"] = max(entry["p"], entry["other"][2] if entry["other"] else 1.0)
        per_row[(name, row["row"])] = entry
        family[key] = max(family.get(key, 0.0), entry["p_family"])
    q = _benjamini_yekutieli(family)
    for entry in per_row.values():
        entry["q"], entry["family"] = q[entry["key"]], family
    return per_row


def _q_with(family: dict, key, value: float) -> float:
    return _benjamini_yekutieli({**family, key: value})[key]


def _status(entry: dict) -> str:
    """The verdict after the family: decided only at q < 0.05; under two policies, fragile where they differ."""

    def decided(verdict: str, p: float) -> str:
        q = _q_with(entry["family"], entry["key"], p) if "other" in entry else entry["q"]
        return verdict if verdict in ("claim_holds", "claim_fails") and q < 0.05 else "insufficient"

    mine = decided(entry["verdict"], entry["p"])
    if "other" not in entry:
        return mine
    theirs = decided(entry["other"][3], entry["other"][2]) if entry["other"] else "insufficient"
    return mine if mine == theirs else "fragile"


@pytest.mark.skipif(not TABLES, reason="no committed cpu results")
def test_every_claim_row_is_rebuilt_from_the_committed_files(results: Path = RESULTS):
    rebuilt = _rebuilt(results)
    tested = {key: entry for key, entry in rebuilt.items() if entry["tested"]}
    assert tested, "no tested claim in the committed results"
    rows = {(name, row["row"]): row for name, row, _, _ in _claims(results)}
    for key, entry in rebuilt.items():
        row, where = rows[key], f"{key[0]}: {key[1]}"
        assert row["q"] and float(row["q"]) == pytest.approx(entry["q"], rel=1e-3, abs=1e-9), where  # every row
        if not entry["tested"]:
            continue
        assert float(row["ours"]) == pytest.approx(entry["mean"], rel=1e-5, abs=1e-8), where
        low, high = entry["mean"] - entry["bound"], entry["mean"] + entry["bound"]
        assert (float(row["low"]), float(row["high"])) == pytest.approx((low, high), rel=1e-4, abs=1e-6), where
        assert float(row["p"]) == pytest.approx(entry["p"], rel=1e-3, abs=1e-9), where
        assert row["status"] in (_status(entry), "memorisation", "stale"), where


@pytest.mark.skipif(not TABLES, reason="no committed cpu results")
def test_the_family_is_every_declared_claim_each_hypothesis_once():
    """REPORT.md's family equals the declared claim rows less the exact checks, counted by hypothesis; every claim
    row carries a q; no fragile claim has verdicts that agree after the control; no insufficient row lacks the bound
    its data cannot exclude; every "as good as" row reports its two one-sided tests."""
    rebuilt = _rebuilt(RESULTS)
    hypotheses = {entry["key"] for entry in rebuilt.values()}
    report = (RESULTS / "REPORT.md").read_text()
    assert f"{len(rebuilt)} rows, {len(hypotheses)} hypotheses" in report
    for name, row, _, _ in _claims(RESULTS):
        where = f"{name}: {row['row']}"
        entry = rebuilt[(name, row["row"])]
        if row["status"] == "fragile":
            assert entry["tested"] and _status(entry) == "fragile", where
        if row["status"] == "insufficient":
            assert "cannot exclude a difference of " in row["note"] or "no difference can be excluded" in row["note"]
        if "(within " in row["note"].split(" | ")[0] and row["ours"]:
            assert "two one-sided tests" in row["note"], where
