"""Every tested claim row of the committed `results/cpu/` rebuilt from the committed files alone (the per-seed file
beside each table), by an implementation that shares nothing with `harness/claims.py` or `significance.py`:
scipy's Student-t and normal, numpy's pooling, Benjamini-Hochberg written again. A claim row's margin, interval, p,
q and verdict must come out as committed; a margin, noise input or verdict edited by hand fails here."""

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


def _p(t: float, dof: float) -> float:
    return 2 * (stats.norm.sf(abs(t)) if math.isinf(dof) else stats.t.sf(abs(t), dof))


def _tested(row: dict[str, str], seeds: list[dict[str, str]]) -> tuple[float, float, float, float]:
    """(mean margin, low, high, p) of one claim from its margins per seed and what its noise rests on."""
    mine = [r for r in seeds if (r["table"], r["row"]) == (row["table"], row["row"])]
    margins = [float(r["value"]) for r in mine if r["kind"] == "claim"]
    evidence = {r["metric"]: r["value"] for r in mine if r["kind"] == "evidence"}
    floor, floor_dof = float(evidence["noise_floor"]), math.inf
    candidates = []
    if evidence["noise_metric"]:
        spread, dof = _noise(seeds, evidence["noise_metric"])
        candidates.append((float(evidence["noise_scale"]) * spread, dof))
    arms = defaultdict(list)
    for r in mine:
        if r["kind"] == "claim_arm":
            arms[r["metric"]].append(float(r["value"]))
    candidates.append(_pooled(list(arms.values())))
    for spread, dof in candidates:
        if dof and spread > floor:
            floor, floor_dof = spread, dof
    n, mean = len(margins), float(np.mean(margins))
    per_seed = math.sqrt(int(evidence["runs_per_margin"])) * floor
    p = _p(mean * math.sqrt(n) / per_seed, floor_dof)
    bound = _critical(floor_dof) * per_seed / math.sqrt(n)
    if n > 1:
        sd = float(np.std(margins, ddof=1))
        p = max(p, _p(mean * math.sqrt(n) / sd, n - 1) if sd else float(mean == 0))
        bound = max(bound, _critical(n - 1) * sd / math.sqrt(n))
    return mean, mean - bound, mean + bound, p


def _benjamini_hochberg(p: dict) -> dict:
    keys = sorted(p, key=p.get)
    m, q, running = len(keys), {}, 1.0
    for rank in range(m, 0, -1):
        running = min(running, p[keys[rank - 1]] * m / rank)
        q[keys[rank - 1]] = running
    return q


def _key(row: dict[str, str]) -> tuple[str, str]:
    """One comparison: its statement (the note up to its first " | "), of the same runs in any order."""
    return row["note"].split(" | ")[0].split("; data: ")[0], ",".join(sorted(row["run"].split(",")))


def _claims(results: Path) -> list[tuple[dict[str, str], list[dict[str, str]]]]:
    """Each claim row of a table written under today's rules (with p and q; REPORT.md lists an older table's claims
    apart, as judged by older rules), with its table's per-seed file."""
    return [(row, _read(results / "seeds" / path.name)) for path in sorted(results.glob("*.csv"))
            for row in _read(path) if row["metric"] == "claim" and "q" in row]  # fmt: skip


@pytest.mark.skipif(not TABLES, reason="no committed cpu results")
def test_every_tested_claim_row_is_rebuilt_from_the_committed_files(results: Path = RESULTS):
    claims = _claims(results)
    tested = [(row, seeds) for row, seeds in claims if row["q"]]
    assert tested, "no tested claim in the committed results"
    p_of = {}
    for row, seeds in tested:
        mean, low, high, p = _tested(row, seeds)
        where = f"{row['experiment']}: {row['row']}"
        assert float(row["ours"]) == pytest.approx(mean, rel=1e-5, abs=1e-8), where
        assert (float(row["low"]), float(row["high"])) == pytest.approx((low, high), rel=1e-4, abs=1e-6), where
        assert float(row["p"]) == pytest.approx(p, rel=1e-3, abs=1e-9), where
        p_of.setdefault(_key(row), p)
    q = _benjamini_hochberg(p_of)
    for row, _ in tested:
        where = f"{row['experiment']}: {row['row']}"
        assert float(row["q"]) == pytest.approx(q[_key(row)], rel=1e-3, abs=1e-9), where
        decided = float(row["p"]) < 0.05 and q[_key(row)] < 0.05
        expected = ("claim_holds" if float(row["ours"]) > 0 else "claim_fails") if decided else "insufficient"
        assert row["status"] in (expected, "memorisation", "stale"), where


@pytest.mark.skipif(not TABLES, reason="no committed cpu results")
def test_no_claim_row_carries_a_placeholder_and_every_fragile_one_decides_nothing():
    for row, seeds in _claims(RESULTS):
        where = f"{row['experiment']}: {row['row']}"
        margins = [float(r["value"]) for r in seeds if r["kind"] == "claim" and r["row"] == row["row"]]
        assert -1.0 not in margins or len(set(margins)) > 1, where  # a "never reached" -1 at every seed
        if row["status"] == "fragile":
            assert not row["q"] and "decided by the tuning policy" in row["note"], where
        if row["status"] in ("claim_holds", "claim_fails"):
            assert row["p"] and row["q"] and float(row["q"]) < 0.05, where
