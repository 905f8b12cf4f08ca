"""Issue 83's plan decided twice: by the suite (`claims.judge`) and by `registered_rebuild`, which shares nothing with
it. On the committed pilot, judged as if its seeds were fresh (every number of a test, none decided: three seeds
cannot pass a sign-flip test), and on the confirmatory tables of `results/cpu/` as they are committed."""

import csv
import shutil
from pathlib import Path

import pytest
import yaml

from tests import registered_rebuild

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "scaling_axes" / "plans" / "cpu.yaml"
PILOT = ROOT / "results" / "cpu" / "pilot83"
RESULTS = ROOT / "results" / "cpu"


def _compare(expected: dict, results: Path) -> None:
    assert expected
    for (experiment, where), (status, estimate, low, high, p, q) in expected.items():
        table, _, row = where.partition("/")
        (committed,) = [
            r
            for r in registered_rebuild.read(results / f"{experiment}.csv")
            if (r["table"], r["row"], r["metric"]) == (table, row, "claim")
        ]
        assert committed["status"] == status, (where, committed["status"], status)
        if estimate is not None:
            for column, value in (("ours", estimate), ("low", low), ("high", high), ("p", p), ("q", q)):
                assert float(committed[column]) == pytest.approx(value, rel=1e-4, abs=1e-9), (where, column)


def _pilot_as_confirmatory(tmp_path: Path) -> tuple[dict, str, Path]:
    """The plan's claims and rules over a copy of the pilot, each piloted experiment's seeds the pilot's
    (the rest of its claims not planned), its digest the one the pilot's runs recorded."""
    data = yaml.safe_load(PLAN.read_text())
    results = tmp_path / "cpu"
    shutil.copytree(PILOT, results)
    experiments, digests = {}, set()
    for table in sorted(results.glob("*.csv")):
        rows = registered_rebuild.read(table)
        digests |= {r["value"] for r in registered_rebuild.read(results / "seeds" / table.name) if r["kind"] == "plan"}
        arms = sorted({arm for r in rows if r["metric"] == "claim" for arm in r["run"].split(",") if arm})
        experiments[table.stem] = {"seeds": [1, 2, 3], "test": "own_spread", "arms": dict.fromkeys(arms)}
    elsewhere = {c["id"] for c in registered_rebuild.claims_of(data) if c["experiment"] not in experiments}
    not_planned = {**data.get("not_planned", {}), **dict.fromkeys(elsewhere - set(data.get("out_of_reach", {})), "x")}
    data |= {"experiments": experiments, "pilot": str(results), "pilot_seeds": [97, 98, 99], "not_planned": not_planned}
    (digest,) = digests
    return data, digest, results


def test_the_pilot_judged_as_fresh_seeds_comes_out_the_same_from_both_implementations(tmp_path):
    from scaling_axes.harness.claims.judge import judge_scale
    from scaling_axes.harness.claims.plan import parse_plan
    from scaling_axes.harness.scales import CPU

    data, digest, results = _pilot_as_confirmatory(tmp_path)
    judge_scale(results, CPU, parse_plan(data, digest, str(PLAN)))
    expected = registered_rebuild.decide(data, digest, results)
    assert {status for status, *_ in expected.values()} >= {"insufficient"}
    assert any(estimate is not None for _, estimate, *_ in expected.values())
    _compare(expected, results)


def test_a_pilot_margin_moved_by_hand_is_caught(tmp_path):
    """The comparison is not a copy: a test-split loss moved by a nat, and a row no longer comes out as judged."""
    from scaling_axes.harness.claims.judge import judge_scale
    from scaling_axes.harness.claims.plan import parse_plan
    from scaling_axes.harness.scales import CPU

    data, digest, results = _pilot_as_confirmatory(tmp_path)
    judge_scale(results, CPU, parse_plan(data, digest, str(PLAN)))
    expected = registered_rebuild.decide(data, digest, results)
    experiment, where = next(key for key, (_, estimate, *_) in expected.items() if estimate is not None)
    table = registered_rebuild.read(results / f"{experiment}.csv")
    arm = next(r["run"] for r in table if f"{r['table']}/{r['row']}" == where and r["metric"] == "claim").split(",")[0]
    path = results / "seeds" / f"{experiment}.csv"
    rows = registered_rebuild.read(path)
    first = next(i for i, r in enumerate(rows) if (r["kind"], r["run"], r["metric"]) == ("run", arm, "test_loss"))
    rows[first] = {**rows[first], "value": str(float(rows[first]["value"]) + 1.0)}
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(AssertionError):
        _compare(registered_rebuild.decide(data, digest, results), results)


def test_every_claim_row_of_the_plan_in_force_is_decided_again_from_the_committed_files():
    data = yaml.safe_load(PLAN.read_text())
    from scaling_axes.harness.claims.plan import digest_of

    _compare(registered_rebuild.decide(data, digest_of(PLAN), RESULTS), RESULTS)


def test_every_confirmatory_run_recorded_the_plan_in_force_and_the_report_names_it():
    """The second registration's digest on every run of each experiment it trained (none under another plan), its
    seeds none of the pilot's, and REPORT.md naming the file, the digest and each sensitivity beside the verdicts."""
    from scaling_axes.harness.claims.plan import digest_of

    data, digest = yaml.safe_load(PLAN.read_text()), digest_of(PLAN)
    for experiment, planned in data["experiments"].items():
        path = RESULTS / "seeds" / f"{experiment}.csv"
        if not path.exists():
            continue
        rows = registered_rebuild.read(path)
        assert {r["value"] for r in rows if r["kind"] == "plan"} == {digest}, experiment
        assert {int(r["seed"]) for r in rows if r["kind"] == "claim"} <= set(planned["seeds"]), experiment
    report = (RESULTS / "REPORT.md").read_text()
    assert f"`scaling_axes/plans/cpu.yaml` (digest `{digest}`)" in report
    for section in ("## The paper's protocol beside the matched one", "## Before and after", "## Spikes among"):
        assert section in report
    assert report.count("with the stability filter on (a sensitivity, not the verdict)") >= 6
