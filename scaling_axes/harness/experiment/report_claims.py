"""A scale's claims as REPORT.md reads them from its results CSVs: one `Claim` per hypothesis (the rows several
tables state of the same runs and margins merged), with what the family wrote into each note."""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path

from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS

EXCLUDES = "cannot exclude a difference of "  # TODO
ADJUSTED, OTHER_POLICY = "interval adjusted for them ", " | the other tuning policy: "  # TODO
from scaling_axes.harness.results import VERDICTS

OLDER_RULES = "older_rules"  # the claims of a CSV not rebuilt since the verdicts gained p, q and the fragile check


@dataclasses.dataclass
class Claim:
    """A claim as the report shows it: merged over the experiments that state it of the same runs."""

    statement: str
    status: str
    margin: str
    low: str
    high: str
    unit: str
    why: str
    seeds: int
    where: list[str]
    data: str
    p: str = ""
    q: str = ""  # its hypothesis's q over the scale's family (`experiment.family`)
    adjusted: tuple[float, float] | None = None  # its interval adjusted for the family, where tested
    other_margin: float | None = None  # its mean margin under the other tuning policy, where measured
    excludes: str = ""  # the narrowest difference its data exclude (`claims.notes.EXCLUDES`)


Tables = dict[str, list[dict[str, str]]]  # experiment -> its CSV's rows


def read_tables(scale_dir: Path) -> Tables:
    """Each results CSV of `scale_dir`, read once, by experiment name."""
    tables = {}
    for path in sorted(scale_dir.glob("*.csv")):
        with open(path, newline="") as f:
            tables[path.stem] = list(csv.DictReader(f))
    return tables


def claim_key(row: dict[str, str]) -> tuple[str, ...]:
    """What makes two claim rows one line: one hypothesis (the same runs, unit and numbers: `experiment.family`
    shows its test in every row that states it), or without a test the same statement of the same runs."""
    runs = ",".join(sorted(row["run"].split(",")))
    if row.get("p"):
        return runs, row["unit"], row["ours"], row["p"], row["status"]
    return row["note"].partition(DATA_NOTE)[0].partition(NOTE_PARTS)[0], runs


NUMBER = r"([-+]?[\d.]+(?:e[-+]?\d+)?|nan)"


def claims_of(tables: Tables) -> list[Claim]:
    """The claims in a scale's tables, one per hypothesis, in verdict order."""
    merged: dict[tuple[str, ...], Claim] = {}
    for name, rows in tables.items():
        for r in rows:
            if r["metric"] != "claim":
                continue
            note, _, data = r["note"].partition(DATA_NOTE)
            statement, _, why = note.partition(NOTE_PARTS)
            why = why.partition(NOTE_PARTS)[2]
            key = claim_key(r)
            if key in merged:
                merged[key].where.append(f"{name}: {r['row']}")
                continue
            # a CSV written before the p and q columns was judged by older rules (no false-discovery control, no
            # second tuning policy): its verdict is not one of today's, and is listed apart as such
            status = r["status"] if "q" in r else OLDER_RULES
            adjusted = re.search(rf"{ADJUSTED}\[{NUMBER}, {NUMBER}\]", note)
            other = re.search(rf"{re.escape(OTHER_POLICY)}.*?; \w+, margin {NUMBER}", note)
            excludes = re.search(rf"{EXCLUDES}{NUMBER}", note)
            merged[key] = Claim(
                statement,
                status,
                r["ours"],
                r.get("low", ""),
                r.get("high", ""),
                r["unit"],
                why,
                int(r.get("seeds") or 0),
                [f"{name}: {r['row']}"],
                data,
                r.get("p", ""),
                r.get("q", ""),
                adjusted and (float(adjusted[1]), float(adjusted[2])),
                other and float(other[1]),
                excludes[1] if excludes else "",
            )
    order = {status: i for i, status in enumerate(VERDICTS)}
    return sorted(merged.values(), key=lambda c: (order.get(c.status, len(order)), c.where[0]))
