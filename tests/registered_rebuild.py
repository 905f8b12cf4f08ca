"""Issue 83's decision rules written again, sharing nothing with `harness/claims/` or `significance.py`: PyYAML for
the plan, scipy's Student-t, the exact sign-flip test by enumeration, each claim row judged on the test split where
the plan says so, Simes over an `each` claim's steps, positive controls alone at alpha, Holm over a paper's primaries
and Benjamini-Yekutieli over its secondaries; every seed kept (no stability veto). Each claim row comes out as
(status, estimate, low, high, p, q) for the tests to set beside what the suite committed."""

from __future__ import annotations

import csv
import itertools
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

LEARNED = 0.5  # nats below the unigram floor an arm must end at


def read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def claims_of(plan: dict) -> list[dict]:
    """Every claim with its paper, kind's tolerance and whether it is in the family (no exclusion named)."""
    excluded = {**plan.get("out_of_reach", {}), **plan.get("not_planned", {})}
    out = []
    for paper, listed in plan["papers"].items():
        for claim in listed:
            out_of_budget = claim["experiment"] in plan.get("out_of_budget", {})
            inside = not (claim.get("excluded") or claim["id"] in excluded or out_of_budget)
            out.append({**claim, "paper": paper, "inside": inside, "tolerance": claim.get("tolerance", 0.0)})
    return out


def experiment(results: Path, name: str, on_test: bool) -> tuple[dict, dict, dict]:
    """(table/row -> the table row; table/row -> seed -> margin; run -> seed -> measures, the plan digest among
    them); a validation-loss contrast's margins formed again from its runs' test losses where `on_test`."""
    rows = {f"{r['table']}/{r['row']}": r for r in read(results / f"{name}.csv") if r["metric"] == "claim"}
    margins, evidence = defaultdict(dict), defaultdict(dict)
    runs = defaultdict(lambda: defaultdict(dict))
    for r in read(results / "seeds" / f"{name}.csv"):
        where = f"{r['table']}/{r['row']}"
        if r["kind"] == "claim":
            margins[where][int(r["seed"])] = float(r["value"])
        elif r["kind"] == "evidence":
            evidence[where][r["metric"]] = r["value"]
        elif r["kind"] == "run":
            runs[r["run"]][int(r["seed"])][r["metric"]] = float(r["value"])
        elif r["kind"] == "plan":
            runs[r["run"]][int(r["seed"])]["plan"] = r["value"]
    for where, found in evidence.items():
        if on_test and found.get("measure") == "val_loss" and found.get("contrast"):
            weights = [(a, float(c)) for a, _, c in (p.rpartition(":") for p in found["contrast"].split(";"))]
            margins[where] = {
                k: sum(c * runs[a][k]["test_loss"] for a, c in weights)
                for k in margins[where]
                if all("test_loss" in runs[a].get(k, {}) for a, _ in weights)
            }
    return rows, margins, {"runs": runs, "evidence": evidence}


def blocked(row: dict, margins: dict, found: dict, seeds: list[int], digest: str) -> str:
    """The status that keeps a row from its test: its runs' own verdict, a missing seed, another plan, an arm that
    did not learn (a diverged seed aside: it enters at ln(vocabulary) and is kept)."""
    evidence = found["evidence"].get(f"{row['table']}/{row['row']}", {})
    if evidence.get("held"):
        return evidence["held"]
    if any(k not in margins for k in seeds):
        return "insufficient"
    for arm in filter(None, row["run"].split(",")):
        each = {k: found["runs"][arm][k] for k in seeds}
        if any(set(str(m.get("plan", "")).split(";")) != {digest} for m in each.values()):
            return "plan_changed"
        if any(
            not m.get("diverged") and "unigram_floor" in m and m["val_loss"] > m["unigram_floor"] - LEARNED
            for m in each.values()
        ):
            return "not_learning"
    return ""


def sign_flip(margins: list[float], shift: float) -> float:
    """The share of the 2^n sign patterns whose sum reaches the observed sum of margins - shift."""
    centred = [m - shift for m in margins]
    observed = sum(centred)
    patterns = itertools.product((1, -1), repeat=len(centred))
    sums = [sum(s * abs(c) for s, c in zip(signs, centred, strict=True)) for signs in patterns]
    return sum(s >= observed - 1e-12 * max(1.0, abs(observed)) for s in sums) / len(sums)


def one_sided(margins: list[float], kind: str, tolerance: float, fail_at: float) -> tuple:
    """(estimate, low, high, p that it holds, p that it fails): each p the larger of Student-t's and the sign-flip
    test's; the interval the two one-sided 0.025 bounds."""
    n, estimate = len(margins), float(np.mean(margins))
    se = float(np.std(margins, ddof=1)) / math.sqrt(n)

    def above(v: float) -> float:
        t = stats.t.sf((estimate - v) / se, n - 1) if se else float(estimate <= v)
        return max(t, sign_flip(margins, v))

    def below(v: float) -> float:
        t = stats.t.sf((v - estimate) / se, n - 1) if se else float(estimate >= v)
        return max(t, sign_flip([-m for m in margins], -v))

    if kind == "superiority":
        p_hold, p_fail = above(0.0), below(fail_at)
    elif kind == "non_inferiority":
        p_hold, p_fail = above(-tolerance), below(-tolerance)
    else:
        p_hold = max(above(-tolerance), below(tolerance))
        p_fail = min(1.0, 2 * min(above(tolerance), below(-tolerance)))
    half = stats.t.ppf(0.975, n - 1) * se
    return estimate, estimate - half, estimate + half, p_hold, p_fail


def holm(p: list[float]) -> list[float]:
    order, out, running = sorted(range(len(p)), key=lambda i: p[i]), [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def by(p: list[float]) -> list[float]:
    m = len(p)
    harmonic = sum(1 / k for k in range(1, m + 1))
    order, out, running = sorted(range(m), key=lambda i: p[i], reverse=True), [0.0] * m, 1.0
    for position, i in enumerate(order):
        running = min(running, p[i] * m * harmonic / (m - position))
        out[i] = running
    return out


def simes(p: list[float]) -> float:
    ordered = sorted(p)
    return min(1.0, min(len(p) * q / i for i, q in enumerate(ordered, 1)))


def decide(plan: dict, digest: str, results: Path) -> dict:
    """(experiment, table/row) -> (status, estimate, low, high, p, q) of every in-family claim's rows whose table is
    in `results` (a claim whose table is not enters its family untested, p = 1)."""
    claims = [c for c in claims_of(plan) if c["inside"]]
    on_test = plan.get("rules", {}).get("verdict_split") == "test"
    names = {c["experiment"] for c in claims if (results / f"{c['experiment']}.csv").exists()}
    tables = {name: experiment(results, name, on_test) for name in names}
    tested, blocks = {}, {}
    for claim in (c for c in claims if c["experiment"] in tables):
        rows, margins, found = tables[claim["experiment"]]
        assert plan["experiments"][claim["experiment"]]["test"] == "own_spread", "rebuilt on own spreads only"
        seeds = plan["experiments"][claim["experiment"]]["seeds"]
        blocks[claim["id"]] = {w: blocked(rows[w], margins[w], found, seeds, digest) for w in claim["rows"]}
        fail_at = claim["effect"] if claim.get("fail_below_effect") else 0.0
        tested[claim["id"]] = None
        if not any(blocks[claim["id"]].values()):
            tested[claim["id"]] = {
                w: one_sided([margins[w][k] for k in seeds], claim["kind"], claim["tolerance"], fail_at)
                for w in claim["rows"]
            }
    for control in (c for c in claims if c["paper"] == "controls"):
        steps = tested.get(control["id"])
        if steps is None or max(s[3] for s in steps.values()) >= plan["alpha"]:
            for other in (c for c in claims if c["experiment"] == control["experiment"] and c["paper"] != "controls"):
                tested[other["id"]] = None  # its experiment judges nothing: p = 1 in its family
                if other["id"] in blocks:  # its table is in `results`; else it is not yet trained
                    blocks[other["id"]] = dict.fromkeys(other["rows"], "control_failed")
    expected = {}
    for paper in {c["paper"] for c in claims}:
        for role, adjust in (("primary", holm), ("secondary", by), ("control", list)):
            group = [c for c in claims if c["paper"] == paper and c["role"] == role]
            holds = [max(s[3] for s in t.values()) if (t := tested.get(c["id"])) else 1.0 for c in group]
            fails = [simes([s[4] for s in t.values()]) if (t := tested.get(c["id"])) else 1.0 for c in group]
            for c, p_hold, p_fail, q_hold, q_fail in zip(
                group, holds, fails, adjust(holds), adjust(fails), strict=True
            ):
                if q_fail < plan["alpha"]:
                    verdict, p, q = "claim_fails", p_fail, q_fail
                elif q_hold < plan["alpha"]:
                    verdict, p, q = "claim_holds", p_hold, q_hold
                else:
                    (q, p), verdict = min((q_hold, p_hold), (q_fail, p_fail)), "insufficient"
                for where in c["rows"] if c["id"] in blocks else ():
                    if tested[c["id"]] is None:
                        expected[(c["experiment"], where)] = (blocks[c["id"]][where] or "insufficient",) + (None,) * 5
                    else:
                        expected[(c["experiment"], where)] = (verdict, *tested[c["id"]][where][:3], p, q)
    return expected
