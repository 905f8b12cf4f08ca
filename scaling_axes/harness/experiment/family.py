"""A scale's claims judged as one family, from its results CSVs and per-seed files alone (so a committed scale is
judged again anywhere, without its runs).

The family is declared, not found: every claim row an experiment states at the scale (exact checks apart) is in it,
whatever happened to its runs; one that could not be tested (unstable, unmatched, not learning, never reached, out of
reach, untuned, unfinished) enters with p = 1, so an outcome can only make the control stricter. Claims resting on
the same runs and margins are one hypothesis, tested once: every row that states it shows its verdict. Claims that
share an arm are dependent, of either sign, so the false-discovery rate is held by Benjamini-Yekutieli, valid under
any dependence. A claim judged under two tuning policies (`table.judge_claims`) enters with the larger of its two p
(it is decided only if decided under both: an intersection-union test); each policy's verdict is its q-decided one,
and it is `fragile` only where those differ.

    judge_family(Path("results/cpu"))   # every claim row of the scale gets its q and its final status
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

from scaling_axes.harness.claims.notes import DATA_NOTE, NOTE_PARTS
from scaling_axes.harness.results import COLUMNS
from scaling_axes.io import write_csv
from scaling_axes.significance import ALPHA, false_discovery_q, t_critical

DECIDED = ("claim_holds", "claim_fails")
FAMILY = f"{NOTE_PARTS}family: "  # what the family says of each claim: its q, and its adjusted interval where tested
MULTIPLICITY = "decides nothing (multiplicity)"  # where a claim its own test decided did not survive the control
ADJUSTED = "interval adjusted for them "
OTHER_POLICY = f"{NOTE_PARTS}the other tuning policy: "
HANGS = f"{NOTE_PARTS}hangs on a threshold: "  # a decided verdict that a threshold moved 25% would change
SUFFIXES = (FAMILY, OTHER_POLICY, HANGS)  # what the family appends to a note, stripped before it appends again
Table = list[dict[str, str]]


@dataclasses.dataclass(frozen=True)
class Member:
    """One claim row as the family reads it: where it is, the hypothesis it tests (`key`), its p and the verdict its
    own test reached (None: not tested), and under the other tuning policy the same (`policies` 2), with its mean
    margin there (None: not measured)."""

    table: str
    index: int
    key: tuple
    p: float | None
    verdict: str | None
    tests: tuple[tuple[float, float], ...] = ()
    policies: int = 1
    p_other: float | None = None
    verdict_other: str | None = None
    margin_other: float | None = None

    @property
    def family_p(self) -> float:
        if self.p is None:
            return 1.0
        return self.p if self.policies == 1 else max(self.p, 1.0 if self.p_other is None else self.p_other)


def read_seeds(scale_dir: Path, name: str) -> Table:
    path = scale_dir / "seeds" / f"{name}.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def members_of(name: str, rows: Table, seeds: Table) -> list[Member]:
    """The claim rows of one table, each with what its per-seed file records of its test."""
    evidence, margins = collections.defaultdict(dict), collections.defaultdict(list)
    for r in seeds:
        where = (r["table"], r["row"])
        if r["kind"] == "evidence":
            evidence[where][r["metric"]] = r["value"]
        elif r["kind"] in ("claim", "claim_at_choice"):
            margins[(*where, r["kind"])].append(float(r["value"]))
    out = []
    for i, r in enumerate(rows):
        if r["metric"] != "claim":
            continue
        e, where = evidence[(r["table"], r["row"])], (r["table"], r["row"])
        mine = margins[(*where, "claim")]
        runs = ",".join(sorted(r["run"].split(",")))
        key = (runs, r["unit"], tuple(f"{m:.6g}" for m in mine)) if mine else (runs, statement_of(r))
        other = margins[(*where, "claim_at_choice")]
        tests = tuple(tuple(map(float, t.split(":"))) for t in e.get("tests", "").split(";") if t)
        out.append(
            Member(
                name,
                i,
                key,
                _float(e.get("p")),
                e.get("verdict") or None,
                tests,
                2 if "p_at_choice" in e else 1,
                _float(e.get("p_at_choice")),
                e.get("verdict_at_choice") or None,
                sum(other) / len(other) if other else None,
            )
        )
    return out


def _float(value: str | None) -> float | None:
    return float(value) if value else None


def statement_of(row: dict[str, str]) -> str:
    return row["note"].partition(DATA_NOTE)[0].partition(NOTE_PARTS)[0]


def judge_family(scale_dir: Path) -> int:
    """Every claim row of `scale_dir`'s tables rewritten with its hypothesis's q over the declared family and its
    final status (`final`); returns the family's size in hypotheses."""
    tables = {path.stem: read_table(path) for path in sorted(Path(scale_dir).glob("*.csv"))}
    seeds = {name: read_seeds(Path(scale_dir), name) for name in tables}
    members = [m for name, rows in tables.items() for m in members_of(name, rows, seeds[name])]
    hypotheses: dict[tuple, list[Member]] = {}
    for m in members:
        hypotheses.setdefault(m.key, []).append(m)
    keys = list(hypotheses)
    p = [max(m.family_p for m in hypotheses[key]) for key in keys]

    def q_with(index: int, value: float) -> float:  # the hypothesis's q were its p `value`, the others as they are
        return false_discovery_q([*p[:index], value, *p[index + 1 :]], dependent=True)[index]

    q = false_discovery_q(p, dependent=True)
    # Benjamini-Yekutieli's intervals for the selected: each at level ALPHA x (hypotheses decided) / (m x sum 1/k)
    selected = max(1, sum(value < ALPHA for value in q))
    adjusted_alpha = ALPHA * selected / (len(p) * sum(1 / k for k in range(1, len(p) + 1))) if p else ALPHA
    for index, key in enumerate(keys):
        tested_by = max(hypotheses[key], key=lambda m: m.family_p)  # its most conservative test, shown in every row
        family = Family(q[index], len(keys), adjusted_alpha, lambda value, i=index: q_with(i, value))
        for m in hypotheses[key]:
            row = _as_tested_by(tables[m.table][m.index], tables[tested_by.table][tested_by.index])
            row = final(row, tested_by, family)
            if row["status"] in DECIDED:
                row = _with_hangs(row, seeds[m.table], _floors(tables[m.table]), family)
            tables[m.table][m.index] = row
    for name, rows in tables.items():
        write_csv(Path(scale_dir) / f"{name}.csv", COLUMNS, rows)
    return len(keys)


def _floors(rows: Table) -> dict[str, float]:
    return {r["row"]: float(r["ours"]) for r in rows if r["table"] == "floor" and r["ours"]}


def _with_hangs(row: dict[str, str], seeds: Table, floors: dict[str, float], family: Family) -> dict[str, str]:
    """A decided `row` with the thresholds its verdict hangs on (`sensitivity.hangs_on`), in its note."""
    from scaling_axes.harness.experiment.sensitivity import hangs_on  # it reads this module's tables

    def redecide(p: float, verdict: str) -> str:
        return verdict if family.q_with(p) < ALPHA else "insufficient"

    if not (hangs := hangs_on(row, seeds, floors, redecide)):
        return row
    note, data_sep, data = row["note"].partition(DATA_NOTE)
    return {**row, "note": f"{note}{HANGS}{'; '.join(hangs)}{data_sep}{data}"}


@dataclasses.dataclass(frozen=True)
class Family:
    """What the control says of one hypothesis: its `q`, the family's `size`, the level its adjusted interval is
    drawn at, and its q were its p another (`q_with`: one tuning policy's)."""

    q: float
    size: int
    adjusted_alpha: float
    q_with: Callable[[float], float]


def _as_tested_by(row: dict[str, str], test: dict[str, str]) -> dict[str, str]:
    """`row` (its own statement and data) showing the numbers and verdict of `test`, the row its hypothesis is
    tested by."""
    if row is test:
        return row
    own, data_sep, data = row["note"].partition(DATA_NOTE)
    measured = test["note"].partition(DATA_NOTE)[0].partition(NOTE_PARTS)[2]
    numbers = {column: test[column] for column in ("ours", "low", "high", "seeds", "p", "status")}
    return {**row, **numbers, "note": NOTE_PARTS.join((own.partition(NOTE_PARTS)[0], measured)) + data_sep + data}


def read_table(path: Path) -> Table:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def final(row: dict[str, str], m: Member, family: Family) -> dict[str, str]:
    """`row` with its hypothesis's q and its status after the control: a tested claim stays decided only where its
    q is below ALPHA; under two policies, each policy's q-decided verdict, `fragile` where they differ."""
    note, data_sep, data = row["note"].partition(DATA_NOTE)
    for suffix in SUFFIXES:
        note = note.split(suffix)[0]
    if m.verdict is None:
        note += f"{FAMILY}not tested, so it enters with p = 1: q {family.q:.3g} over {family.size} hypotheses"
        return {**row, "q": f"{family.q:.6g}", "note": note + data_sep + data}
    status, mine = m.verdict, family.q_with(m.p) if m.policies == 2 else family.q
    margin = float(row["ours"])
    half = max(t_critical(df, family.adjusted_alpha) * se for se, df in m.tests) if m.tests else math.nan
    note += (
        f"{FAMILY}q {mine:.3g} over {family.size} hypotheses (Benjamini-Yekutieli), its {ADJUSTED}"
        f"[{margin - half:+.4g}, {margin + half:+.4g}]"
    )
    if m.verdict in DECIDED and mine >= ALPHA:
        status, note = "insufficient", f"{note}; {MULTIPLICITY}"
    if m.policies == 2:
        status, note = _two_policies(status, note, m, family.q_with(m.p_other) if m.p_other is not None else 1.0)
    return {**row, "q": f"{family.q:.6g}", "status": status, "note": note + data_sep + data}


def _two_policies(status: str, note: str, m: Member, q_other: float) -> tuple[str, str]:
    """(status, note) of a claim judged where its arms' claim seeds settled (`status`) and with every arm at its
    sweep's choice (`m`'s other policy, q `q_other`): `fragile` where their q-decided verdicts differ."""
    if m.p_other is None:
        other, said = "insufficient", "not measured (a run never reached the loss it is measured at, or did not finish)"
    else:
        decided = m.verdict_other in DECIDED and q_other < ALPHA
        other = m.verdict_other if decided else "insufficient"
        said = f"{other}, margin {m.margin_other:+.4g}, p {m.p_other:.3g}, q {q_other:.3g}"
    both = f"{status} where the claim seeds settled; {said} with every arm at its sweep's choice, recovered spikes kept"
    if other == status:
        return status, f"{note}{OTHER_POLICY}{both}"
    return "fragile", f"{note}{OTHER_POLICY}decided by the tuning policy: {both}"
