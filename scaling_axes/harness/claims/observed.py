"""What a scale's committed files say of its claims, read once: each claim row with its margins, contrast and arm
values per seed (`Observed`), and each run's measures per seed that the thresholds cut (`RunSeeds`), from
`results/<scale>/<experiment>.csv` and `results/<scale>/seeds/<experiment>.csv` alone, so that a committed scale is
judged anywhere without its runs.

The per-seed file's kinds (`experiment.seeds` writes them): `run` (a run's final metrics and stability measures at a
seed, its data's unigram floor), `plan` (the plan digest a run recorded when it trained), `trained` (every run of the
directory, for the measured noise), `claim` (a claim's margin at a seed), `arm` (an arm's value of the claim's
measure at a seed), `evidence` (the claim's contrast, measure, and what its runs alone hold it to: `held`), `curve`
(a run's validation curve at a seed: `step:loss` pairs, space-separated) and `windows` (its whole test split's loss
window by window, in the split's order: what `claims.bootstrap` resamples), `sweep` (each learning-rate sweep point
a run chose its rate by: the rate, the draw, its final validation loss, flagged unstable or diverged).
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterable
from pathlib import Path

from scaling_axes.harness.claims.plan import PlannedExperiment
from scaling_axes.io import CorruptFileError, SuiteError, verify_checksum

Table = list[dict[str, str]]
SEED_COLUMNS = ("kind", "table", "row", "run", "seed", "metric", "value", "flag")
KINDS = ("run", "plan", "trained", "claim", "arm", "evidence", "curve", "windows", "sweep")
HELD = ("unmatched", "claim_fails", "never_reached", "out_of_reach", "memorisation", "stale", "insufficient")  # what
# a row's runs alone may hold it to: each keeps it from a test, none makes it hold (`claim_fails`: a part of the claim
# its design contradicts, Table 10's costlier RMT); a stored `held` is a reason, never a verdict
PILOT_KINDS = ("claim_arm", "claim_at_choice")  # what the pilot's writer also recorded (each arm's value under a claim
# and the margin at the sweep's choice of rate), read by nothing now and kept as the pilot wrote them


class DamagedSeeds(SuiteError, ValueError):
    """A per-seed file that is not what a report wrote: refused by name, never judged or rewritten."""


@dataclasses.dataclass(frozen=True)
class Observed:
    """One claim row as the judge reads it: where it is (`experiment`, `where` = table/row, its index in the
    table), its statement and unit, the runs it compares, its margins per seed, its contrast and arm values (empty:
    not a contrast), and `held`/`held_why`: a status its runs alone decide (unmatched, never reached, untuned,
    memorisation, stale, out of reach; empty: none)."""

    experiment: str
    where: str
    index: int
    statement: str
    unit: str
    runs: tuple[str, ...]
    margins: dict[int, float]
    contrast: dict[str, float]
    measure: str
    arm_values: dict[str, dict[int, float]]
    held: str = ""
    held_why: str = ""
    before_training: bool = False


RunSeeds = dict[str, dict[int, dict[str, float]]]  # run -> seed -> measure -> value


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One experiment's committed table and what its per-seed file says: claim rows observed, each run's measures
    and the plan digest each run recorded."""

    name: str
    rows: Table
    seeds: Table
    claims: list[Observed]
    runs: RunSeeds
    digests: dict[str, dict[int, str]]
    windows: dict[str, dict[int, tuple[float, ...]]] = dataclasses.field(default_factory=dict)  # run -> seed -> ...
    curves: dict[str, dict[int, tuple[tuple[int, float], ...]]] = dataclasses.field(default_factory=dict)
    sweeps: dict[str, list[tuple[float, int, float | None, str]]] = dataclasses.field(default_factory=dict)


def read_csv(path: Path) -> Table:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def read_experiments(scale_dir: Path, names: Iterable[str]) -> dict[str, Experiment]:
    """Each of `names` whose table is in `scale_dir`, read once (`read_experiment`): a pilot's files, which several
    of REPORT.md's sections read."""
    return {name: read_experiment(scale_dir, name) for name in names if (Path(scale_dir) / f"{name}.csv").exists()}


def read_experiment(scale_dir: Path, name: str, planned: PlannedExperiment | None = None) -> Experiment:
    """Experiment `name`'s table and per-seed file in `scale_dir`, the per-seed file verified against its digest and
    checked whole: every row complete, numbers finite, no row twice, with `planned` no seed outside the plan's and
    each planned arm at each planned seed exactly once. A file that is not is refused in one line naming it and the
    row (`DamagedSeeds`); nothing is judged on it, and it is never rewritten."""
    rows = read_csv(Path(scale_dir) / f"{name}.csv")
    seeds_path = Path(scale_dir) / "seeds" / f"{name}.csv"
    if not seeds_path.exists():
        return Experiment(name, rows, [], [], {}, {})
    if _starts_with_bom(seeds_path):
        raise DamagedSeeds(
            f"{seeds_path}: starts with a byte-order mark, which the suite never writes (an editor saved it); "
            "restore it from git (`git checkout -- <file>`) or rebuild it from its runs"
        )
    try:
        verify_checksum(seeds_path, "restore it from git (`git checkout -- <file>`) or rebuild it from its runs")
    except CorruptFileError as error:
        raise DamagedSeeds(str(error)) from None
    seeds = read_csv(seeds_path)  # a CRLF file reads as the same rows (csv's newline handling)
    runs, digests = _checked(seeds, seeds_path, planned)
    claims = [_observed(name, i, r, seeds, seeds_path, runs) for i, r in enumerate(rows) if r["metric"] == "claim"]
    windows, curves = _series(seeds, seeds_path)
    return Experiment(name, rows, seeds, claims, runs, digests, windows, curves, _sweeps(seeds, seeds_path))


def _sweeps(seeds: Table, path: Path) -> dict[str, list[tuple[float, int, float | None, str]]]:
    """run -> its sweep's points (rate, draw, final loss or None where it diverged, flag), each number checked."""
    out: dict[str, list[tuple[float, int, float | None, str]]] = {}
    for line, r in enumerate(seeds, 2):
        if r["kind"] != "sweep":
            continue
        try:
            lr, loss = float(r["metric"]), None if r["flag"] == "diverged" else float(r["value"])
        except ValueError:
            lr, loss = math.nan, math.nan
        if not math.isfinite(lr) or (loss is not None and not math.isfinite(loss)):
            raise DamagedSeeds(f"{path}, line {line}: sweep point of {r['run']} at {r['metric']!r} is {r['value']!r}")
        out.setdefault(r["run"], []).append((lr, _seed(r, path, line), loss, r["flag"]))
    return out


def _series(seeds: Table, path: Path) -> tuple[dict, dict]:
    """The per-seed file's test windows and validation curves (run -> seed -> values), each number finite."""
    windows: dict[str, dict[int, tuple[float, ...]]] = {}
    curves: dict[str, dict[int, tuple[tuple[int, float], ...]]] = {}
    for line, r in enumerate(seeds, 2):
        if r["kind"] not in ("windows", "curve"):
            continue
        try:
            if r["kind"] == "windows":
                values = tuple(float(v) for v in r["value"].split())
                windows.setdefault(r["run"], {})[_seed(r, path, line)] = values
            else:
                points = tuple((int(a), float(b)) for a, _, b in (p.partition(":") for p in r["value"].split()))
                values = tuple(v for _, v in points)
                curves.setdefault(r["run"], {})[_seed(r, path, line)] = points
        except ValueError:
            values = (math.nan,)
        if not values or not all(map(math.isfinite, values)):
            raise DamagedSeeds(f"{path}, line {line}: {r['kind']} of {r['run']} seed {r['seed']} is not finite numbers")
    return windows, curves


def _starts_with_bom(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(3) == b"\xef\xbb\xbf"


def _checked(seeds: Table, path: Path, planned: PlannedExperiment | None) -> tuple[RunSeeds, dict]:
    """The per-seed file's runs (run -> seed -> measure) and recorded plan digests, each row checked (see
    `read_experiment`)."""
    runs: RunSeeds = {}
    digests: dict[str, dict[int, str]] = {}
    seen: set[tuple[str, ...]] = set()
    for line, r in enumerate(seeds, 2):
        if r.get("kind") not in (*KINDS, *PILOT_KINDS) or None in r.values() or None in r:
            raise DamagedSeeds(f"{path}, line {line}: not a whole row of a per-seed file (cut short, or extended)")
        key = tuple(r[c] for c in SEED_COLUMNS[:6])
        if key in seen:
            raise DamagedSeeds(f"{path}, line {line}: {r['kind']} {r['run'] or r['row']} seed {r['seed']} twice")
        seen.add(key)
        if r["kind"] in ("run", "claim", "arm", "plan") and planned is not None:
            if (k := _seed(r, path, line)) not in planned.seeds:
                raise DamagedSeeds(
                    f"{path}, line {line}: seed {k} is not one of the plan's seeds for it "
                    f"({', '.join(map(str, planned.seeds))})"
                )
        if r["kind"] == "run":
            runs.setdefault(r["run"], {}).setdefault(_seed(r, path, line), {})[r["metric"]] = _value(r, path, line)
        elif r["kind"] in ("claim", "arm"):
            _value(r, path, line)
        elif r["kind"] == "plan":
            digests.setdefault(r["run"], {})[_seed(r, path, line)] = r["value"]
    for arm in planned.arms if planned else ():
        if missing := [k for k in planned.seeds if k not in digests.get(arm, {})]:
            raise DamagedSeeds(f"{path}: no row of planned arm {arm} at seed {missing[0]}: the file is not whole")
    return runs, digests


def _seed(r: dict[str, str], path: Path, line: int) -> int:
    try:
        return int(r["seed"])
    except ValueError:
        raise DamagedSeeds(f"{path}, line {line}: seed {r['seed']!r} is not a seed number") from None


def _value(r: dict[str, str], path: Path, line: int) -> float:
    try:
        value = float(r["value"])
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DamagedSeeds(
            f"{path}, line {line}: {r['kind']} {r['run']} seed {r['seed']} {r['metric']} is {r['value']!r}"
        )
    return value


def _observed(name: str, index: int, row: dict[str, str], seeds: Table, path: Path, runs: RunSeeds) -> Observed:
    """The claim row `row` with what its per-seed file records of it: a contrast's margins recomputed from its arms'
    values (each checked against the run's own value where the file has it), never read from the file's margins,
    which must agree (`recomputed`); a stored status read only as a reason it is not tested (`HELD`)."""
    where = (row["table"], row["row"])
    margins: dict[int, float] = {}
    arms: dict[str, dict[int, float]] = {}
    evidence: dict[str, str] = {}
    for line, r in enumerate(seeds, 2):
        if (r["table"], r["row"]) != where:
            continue
        if r["kind"] == "claim":
            seed = _seed(r, path, line)
            if seed in margins:
                raise DamagedSeeds(f"{path}, line {line}: claim {r['row']} has seed {seed} twice")
            margins[seed] = _value(r, path, line)
        elif r["kind"] == "arm":
            arms.setdefault(r["run"], {})[_seed(r, path, line)] = _arm_value(r, path, line, runs)
        elif r["kind"] == "evidence":
            evidence[r["metric"]] = r["value"]
    contrast = _contrast(evidence.get("contrast", ""), path, row["row"])
    held = evidence.get("held", "") if evidence else ("" if margins else row["status"])  # a file without evidence
    if held and held not in HELD:
        raise DamagedSeeds(
            f"{path}: claim {row['row']}'s held is {held!r}; a stored status only says why a row is not tested "
            f"({', '.join(HELD)}), never a verdict: restore the file from git or rebuild it from its runs"
        )
    statement = row["note"].partition(" | ")[0].partition("; data: ")[0]
    return Observed(
        experiment=name,
        where=f"{row['table']}/{row['row']}",
        index=index,
        statement=statement,
        unit=row["unit"],
        runs=tuple(filter(None, row["run"].split(","))),
        margins=recomputed(margins, contrast, arms, path, row["row"]) if contrast else dict(sorted(margins.items())),
        contrast=contrast,
        measure=evidence.get("measure", ""),
        arm_values=arms,
        held=held,
        held_why=evidence.get("held_why", ""),
        before_training=evidence.get("before_training") == "True",
    )


def _contrast(text: str, path: Path, row: str) -> dict[str, float]:
    try:
        return {arm: float(c) for arm, _, c in (part.rpartition(":") for part in text.split(";")) if arm}
    except ValueError:
        raise DamagedSeeds(
            f"{path}: claim {row}'s contrast {text!r} is not arm:coefficient pairs; restore it from git or rebuild it"
        ) from None


def _arm_value(r: dict[str, str], path: Path, line: int, runs: RunSeeds) -> float:
    """An arm's value of its claim's measure, which must be its run's own where the file records the run's."""
    value = _value(r, path, line)
    own = runs.get(r["run"], {}).get(_seed(r, path, line), {}).get(r["metric"])
    if own is not None and not math.isclose(own, value, rel_tol=1e-8, abs_tol=1e-12):
        raise DamagedSeeds(
            f"{path}, line {line}: arm {r['run']} seed {r['seed']} {r['metric']} is {value!r} under claim {r['row']} "
            f"but {own!r} as the run's own: the file disagrees with itself; restore it from git or rebuild it"
        )
    return value


MARGIN_TOLERANCE = 1e-6  # a margin written to 9 digits against its arms' values written to 9 digits


def recomputed(
    stored: dict[int, float], contrast: dict[str, float], arms: dict[str, dict[int, float]], path: Path, row: str
) -> dict[int, float]:
    """A contrast row's margin at each seed where every arm has a value, sum c_a x value_a: what the judge uses,
    whichever margins the file stores. A stored margin that is not it, or one without its arms' values, refuses the
    file, naming the row and both values."""
    common = set.intersection(*(set(arms.get(a, {})) for a in contrast))
    out = {k: sum(c * arms[a][k] for a, c in contrast.items()) for k in sorted(common)}
    for seed, margin in sorted(stored.items()):
        if seed not in out:
            missing = next(a for a in contrast if seed not in arms.get(a, {}))
            raise DamagedSeeds(f"{path}: claim {row} seed {seed} has a margin but no value of arm {missing}")
        if abs(out[seed] - margin) > MARGIN_TOLERANCE * max(1.0, abs(out[seed])):
            raise DamagedSeeds(
                f"{path}: claim {row} seed {seed}'s margin is {margin:.9g} in the file but {out[seed]:.9g} from its "
                "arms' values: a derived field that disagrees with the raw values; restore it from git or rebuild it"
            )
    return out
