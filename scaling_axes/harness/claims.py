"""A paper's claims as result rows, judged from whatever runs finished: `claim_holds`, `claim_fails` or
`insufficient`.

A claim is measured as a signed margin, positive where the paper's claim holds (say the Transformer's loss minus
the RMT's), once per seed at which every run it compares finished (`paired_margins`; further seeds are trained with
`--seeds N`). It is judged only where the data can support it: never at smoke scale (tiny models on a few thousand
tokens prove the pipeline, not a claim). A margin is a difference of two runs, so its noise is at least
sqrt(2) x the metric's noise floor for one run (`margin_floor`). The mean margin of n seeds is tested against that
floor / sqrt n (a normal test for an assumed floor, Student-t on its degrees of freedom for a measured one) and, from
two seeds on, by Student-t on the seeds' own spread (t_{n-1} s / sqrt n: twice the standard error would pass a false
claim about 30% of the time at n = 2, where t is 12.7; a spread of three seeds can be zero by chance, so the floor's
test stays). Its p is the larger of the two (`significance.significance`); its test decides it where p < ALPHA. Over a
scale, the claims tested are one family whose false-discovery rate Benjamini-Hochberg's q holds at ALPHA
(`false_discovery_q`, `with_multiplicity`). The margin, p, the noise and the seeds are in the note.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence

from scaling_axes.harness.results import Evidence, Row
from scaling_axes.harness.scales import Scale
from scaling_axes.significance import (
    ALPHA,
    MAX_SEEDS,
    Significance,
    margin_floor,
    minimum_detectable_effect,
    pooled_spread,
    seeds_needed,
    significance,
    t_critical,
)

# Noise floors of one run's metric, used as the least noise a margin can have (assumed, not measured here): the final
# validation loss of a small language model, and ImageNet top-1
LOSS_NOISE_FLOOR = 0.02  # nats/token
TOP1_NOISE_FLOOR = 0.3  # points
ONE_SEED_Z = 2.0  # a sweep's tie: rates whose mean losses lie within this many standard errors (`sweeps.within_noise`)


NOTE_PARTS = " | "  # a claim's note: its statement | what was measured | why it was not decided (when it was not)
DATA_NOTE = "; data: "  # what `table.data_caveats` appends to a claim's note: the data it was judged on


def judge(
    table: str,
    row: str,
    statement: str,
    scale: Scale,
    margins: Mapping[int, float] | Sequence[float],
    noise_floor: float,
    unit: str = "",
    fails_because: str | None = None,
    runs: Sequence[str] = (),
    runs_per_margin: int = 2,
    noise_metric: str | None = None,
    noise_scale: float = 1.0,
    unmatched: str | None = None,
    before_training: bool = False,
    own_values: Sequence[Sequence[float]] | None = None,
) -> Row:
    """The claim `statement`, measured by `margins` (seed -> margin, or a list from seed 1; positive: the claim
    holds), each combining
    `runs_per_margin` runs of a metric whose one-run noise is at least `noise_floor` (`noise_metric`: the per-run
    metric whose measured spread may raise it, see `settle`). `fails_because`: a part of the claim that the runs
    already contradict whatever the margin (a cost that is not lower). `runs`: the runs it compares (the row's
    `run`, comma-separated), whose data, staleness and learning the harness reads. `before_training`: the margin is
    measured on the models before they train, so their training's stability does not bear on it. `own_values`:
    a metric that no run's done.json holds, per arm over its seeds: its noise is their pooled spread (one seed each
    measures none, and the claim is not decided on another metric's floor)."""
    by_seed = margins if isinstance(margins, Mapping) else dict(enumerate(margins, 1))
    evidence = Evidence(statement, tuple(by_seed.values()), tuple(by_seed), noise_floor, runs_per_margin,
                        fails_because, noise_metric, noise_scale, unmatched, before_training,
                        None if own_values is None else tuple(map(tuple, own_values)))  # fmt: skip
    claim = Row(table=table, row=row, metric="claim", unit=unit, run=",".join(runs), evidence=evidence)
    return settle(claim, scale)


def settle(
    claim: Row,
    scale: Scale,
    measured_noise: dict[str, tuple[float, int]] | None = None,
    not_learning: Sequence[str] = (),
    untuned: Sequence[str] = (),
    unstable: Sequence[str] = (),
) -> Row:
    """`claim` judged from its evidence: with `measured_noise` (metric -> the pooled one-run spread at this scale and
    its degrees of freedom) as the floor where it exceeds the assumed one, and never decided on a run in
    `not_learning` (why each is not), on one that trained unstably (`unstable`: why each did) or on one whose lr is
    not tuned (`untuned`: why). A claim its test decides (or leaves within the bound) carries its p twice: as `p`,
    and as `q` until the scale's false-discovery control adjusts it (`control_false_discoveries`)."""
    e = claim.evidence
    floor, floor_dof = e.noise_floor, math.inf
    pooled, pooled_dof = (measured_noise or {}).get(e.noise_metric, (0.0, 0))
    own = (0.0, 0) if e.own_values is None else pooled_spread(e.own_values)
    for spread, dof in ((e.noise_scale * pooled, pooled_dof), own):
        if dof and spread > floor:  # the measured noise: estimated, on its degrees of freedom
            floor, floor_dof = spread, dof
    test = significance(e.margins, floor, e.runs_per_margin, floor_dof) if e.margins else None
    status, why = _verdict(claim, scale, test, floor_dof, not_learning, untuned, unstable)
    tested = test is not None and (not why or why.startswith(WITHIN))  # its verdict is its test's
    margin = statistics.mean(e.margins) if e.margins else None
    low, high = (None, None) if test is None else (margin - test.bound, margin + test.bound)
    note = NOTE_PARTS.join((e.statement, _measured(claim, test, floor, floor_dof), why)).rstrip(" |")
    return dataclasses.replace(claim, ours=margin, low=low, high=high, seeds=len(e.margins), status=status,
                               p=test and test.p, q=test.p if tested else None, note=note)  # fmt: skip


WITHIN = "within the 95% bound"


def _verdict(claim: Row, scale: Scale, test: Significance | None, floor_dof: float, not_learning: Sequence[str],
             untuned: Sequence[str], unstable: Sequence[str]) -> tuple[str, str]:  # fmt: skip
    """(status, why it is not decided: empty where it is) of `claim` (see `settle`)."""
    e, n = claim.evidence, len(claim.evidence.margins)
    if test is None:
        return "insufficient", "the runs it needs have not finished"
    if not scale.judges_claims:
        return "insufficient", f"{scale} scale proves the pipeline, not a claim"
    if not_learning:
        return "not_learning", f"decides nothing: {not_learning[0]}{_more(not_learning[1:])}"
    if unstable and not e.before_training:
        return "unstable", f"decides nothing: {'; '.join(unstable[:3])}{_more(unstable[3:])}"
    if untuned:
        return "insufficient", f"an arm's lr is not tuned: {'; '.join(untuned)}"
    if e.unmatched:
        return "unmatched", f"decides nothing: the arms are not matched on what the claim is stated at: {e.unmatched}"
    if e.own_values is not None and not pooled_spread(e.own_values)[1]:
        return "insufficient", ("its metric's noise is measured over its arms' seeds, and one seed each measures "
                                "none: another metric's floor decides nothing")  # fmt: skip
    if e.fails_because:
        return "claim_fails", e.fails_because
    margin = statistics.fmean(e.margins)
    if test.p < ALPHA:
        return ("claim_holds" if margin > 0 else "claim_fails"), ""
    detectable = minimum_detectable_effect(test.noise, n, floor_dof)
    needed = seeds_needed(margin, test.noise, floor_dof)
    needs = f"--seeds {needed}" if needed <= MAX_SEEDS else f"over {MAX_SEEDS} seeds: out of reach here"
    return "insufficient", (f"{WITHIN}; minimum detectable effect {detectable:.3g} at {n} seed{'s' * (n != 1)}, "
                            f"this margin needs {needs}")  # fmt: skip


def _measured(claim: Row, test: Significance | None, floor: float, floor_dof: float) -> str:
    """What a claim's note says was measured: the margin, its bound and p, the noise and the floor it rests on."""
    if test is None:
        return ""
    e, n = claim.evidence, len(claim.evidence.margins)
    how = "one seed against the floor" if n < 2 else f"Student-t {t_critical(n - 1):.3g}"
    rests = "assumed" if math.isinf(floor_dof) else f"measured on {floor_dof} degrees of freedom"
    return (f"margin {statistics.fmean(e.margins):+.4g} {claim.unit}, 95% bound {test.bound:.3g}, p {test.p:.3g}, "
            f"noise {test.noise:.3g} (floor {margin_floor(floor, e.runs_per_margin):.3g}, {rests}; {n} "
            f"seed{'s' * (n != 1)}; {how})")  # fmt: skip


MULTIPLICITY = f"{NOTE_PARTS}multiplicity: "  # where a note says its claim did not survive the family's control


def with_multiplicity(row: dict[str, str], q: float, family: int) -> dict[str, str]:
    """A tested claim's CSV row with its `q` over a family of `family` tested claims: a claim its test decided
    (p < ALPHA) stays decided only if q < ALPHA too; else it is `insufficient`, its note says why."""
    note, data_sep, data = row["note"].partition(DATA_NOTE)
    note = note.split(MULTIPLICITY)[0]
    status = row["status"]
    if float(row["p"]) < ALPHA:
        status = ("claim_holds" if float(row["ours"]) > 0 else "claim_fails") if q < ALPHA else "insufficient"
        if q >= ALPHA:
            note += (f"{MULTIPLICITY}q {q:.3g} >= {ALPHA:g} over the {family} claims tested at this scale "
                     "(Benjamini-Hochberg): decides nothing")  # fmt: skip
    return {**row, "q": f"{q:.6g}", "status": status, "note": note + data_sep + data}


DECIDED, OTHER_POLICY = ("claim_holds", "claim_fails"), f"{NOTE_PARTS}the other tuning policy: "


def fragile(claim: Row, other: Row | None) -> Row:
    """`claim` as judged where its arms' claim seeds settled (a fallback below a sweep's choice where they spiked),
    beside `other`, the same claim judged with every arm at its sweep's choice, spikes it recovered from kept (None:
    not measured there, as where a run never reaches the loss it is measured at). Where one of the two is decided
    and they differ, the tuning policy decides it: `fragile`, deciding nothing (no q: not among the scale's tested
    claims). The note gives both margins either way."""

    def said(row: Row | None) -> str:
        if row is None:
            return "not measured (a run never reached the loss it is measured at, or did not finish)"
        interval = f" [{row.low:+.4g}, {row.high:+.4g}]" if row.low is not None else ""
        return f"{row.status}, margin {row.ours:+.4g}{interval}" if row.ours is not None else row.status

    both = (f"{said(claim)} where the claim seeds settled; {said(other)} with every arm at its sweep's choice, "
            "recovered spikes kept")  # fmt: skip
    if len(verdicts := {claim.status, other.status if other else None}) == 1 or not verdicts & set(DECIDED):
        return dataclasses.replace(claim, note=f"{claim.note}{OTHER_POLICY}{both}")
    return dataclasses.replace(claim, status="fragile", q=None,
                               note=f"{claim.note}{OTHER_POLICY}decided by the tuning policy: {both}")  # fmt: skip


def _more(reasons: Sequence[str]) -> str:
    return f" (and {len(reasons)} more run{'s' * (len(reasons) > 1)} or seeds)" if reasons else ""


def sweep_disagreement(sweep: Sequence[float], claims: Sequence[float], noise_floor: float) -> tuple[float, float]:
    """(difference, bound): the claim seeds' mean final loss minus the sweep's mean at the same rate, and the 95%
    bound of that difference of two means (Student-t on their pooled spread, at least `noise_floor`; one value on
    each side: ONE_SEED_Z x the floor)."""
    difference = statistics.fmean(claims) - statistics.fmean(sweep)
    spread, dof = pooled_spread([sweep, claims])
    critical = t_critical(dof) if dof else ONE_SEED_Z
    return difference, critical * max(spread, noise_floor) * math.sqrt(1 / len(sweep) + 1 / len(claims))


def beyond_reach(paper_effect: float, noise_floor: float, seeds: int, runs_per_margin: int = 2) -> str | None:
    """Why a claim whose effect in the paper is `paper_effect` cannot be decided by `seeds` seeds of runs whose
    one-run noise is `noise_floor` (None: it can): the effect is below their minimum detectable effect."""
    detectable = minimum_detectable_effect(margin_floor(noise_floor, runs_per_margin), seeds)
    if abs(paper_effect) >= detectable:
        return None
    return (f"the paper's effect, {abs(paper_effect):.3g}, is below the minimum detectable effect here, "
            f"{detectable:.3g} at {seeds} seed{'s' * (seeds != 1)} (one-run noise {noise_floor:.3g})")  # fmt: skip


def exact_check(table: str, row: str, statement: str, deviations: Mapping[int, float], tolerance: float, unit: str,
                runs: Sequence[str] = ()) -> Row:  # fmt: skip
    """An exact property (growth preserves the function), checked at each seed (seed -> its deviation): it passes
    where every seed's |deviation| is within `tolerance`. Not a claim a test decides: no margin, interval or p, and
    not counted among the claims (metric `check`; REPORT.md lists the checks apart)."""
    if not deviations:
        return Row(table=table, row=row, metric="check", unit=unit, run=",".join(runs), status="not_run",
                   note=statement)  # fmt: skip
    worst = max(abs(d) for d in deviations.values())
    return Row(table=table, row=row, metric="check", ours=worst, seeds=len(deviations), unit=unit,
               run=",".join(runs), status="check_passes" if worst <= tolerance else "check_fails",
               note=f"{statement} | largest |deviation| {worst:.3g} {unit} over {len(deviations)} "
               f"seed{'s' * (len(deviations) != 1)} (tolerance {tolerance:g})")  # fmt: skip


def never_reached(table: str, row: str, statement: str, gaps: Mapping[int, float], runs: Sequence[str]) -> Row:
    """A claim measured where a run reaches a loss, at seeds where it never did within its budget (seed -> the gap:
    the loss minus the run's lowest, negative): an outcome of its own, its margin the mean gap, without interval or
    p (a resource saved at a crossing that did not happen is not a number)."""
    n, gap = len(gaps), statistics.fmean(gaps.values())
    return Row(table=table, row=row, metric="claim", ours=gap, seeds=n, unit="nats/token", run=",".join(runs),
               status="never_reached", note=f"{statement} | never reached within the budget at seed"
               f"{'s' * (n != 1)} {', '.join(map(str, gaps))}: mean gap {gap:+.4g} nats/token")  # fmt: skip


def out_of_reach(table: str, row: str, statement: str, unit: str, why: str, runs: Sequence[str] = ()) -> Row:
    """A claim not judged (nor trained for) at this scale, and why."""
    return Row(table=table, row=row, metric="claim", unit=unit, run=",".join(runs), status="out_of_reach",
               note=NOTE_PARTS.join((statement, "", why)))  # fmt: skip


def seeds_of(done: dict | None) -> dict[int, dict]:
    """A finished run's done.json at each seed that finished: {1: the run, k: its repeat at seed k}."""
    return {} if done is None else {1: done, **done.get("seed_runs", {})}


def paired_margins(results: dict[str, dict], names: Sequence[str],
                   margin: Callable[..., float | None]) -> dict[int, float]:  # fmt: skip
    """seed -> `margin(*done)` of the runs `names`, at each seed at which all of them finished (None: no margin
    there, e.g. a diverged run)."""
    per_run = [seeds_of(results.get(name)) for name in names]
    common = sorted(set.intersection(*(set(seeds) for seeds in per_run)))
    return {k: m for k in common if (m := margin(*(seeds[k] for seeds in per_run))) is not None}


def metric_margin(key: str, scale_by: float = 1.0) -> Callable[[dict, dict], float | None]:
    """The margin `scale_by` x (winner's `key` - loser's), None where either lacks it."""

    def margin(winner: dict, loser: dict) -> float | None:
        values = winner.get(key), loser.get(key)
        return None if None in values else scale_by * (values[0] - values[1])

    return margin


def lower_loss(table: str, statement: str, scale: Scale, winner: str, loser: str, results: dict[str, dict],
               unmatched: str | None = None) -> Row:  # fmt: skip
    """The claim that run `winner` ends at a lower validation loss than run `loser` (margin: loser's minus
    winner's, per seed)."""
    margins = paired_margins(results, (winner, loser), metric_margin("val_loss", scale_by=-1.0))
    return judge(table, f"{winner}_vs_{loser}", statement, scale, margins, LOSS_NOISE_FLOOR, "nats/token",
                 runs=(winner, loser), noise_metric="val_loss", unmatched=unmatched)  # fmt: skip


def as_good_as(table: str, statement: str, scale: Scale, candidate: str, reference: str, results: dict[str, dict],
               tolerance: float, key: str = "val_top1", scale_by: float = 100.0, noise_floor: float = TOP1_NOISE_FLOOR,
               unit: str = "points", fails_because: str | None = None,
               unmatched: str | None = None) -> Row:  # fmt: skip
    """The claim that run `candidate` is as good as `reference`: its `key` (x `scale_by`; higher is better) no more
    than `tolerance` below. Margin: the difference plus the tolerance, per seed. `fails_because`: as `judge`'s."""
    difference = metric_margin(key, scale_by)
    margins = paired_margins(results, (candidate, reference),
                             lambda c, r: None if (d := difference(c, r)) is None else d + tolerance)  # fmt: skip
    within = f" (within {tolerance:g} {unit})" if tolerance else ""
    return judge(table, f"{candidate}_vs_{reference}", f"{statement}{within}", scale, margins, noise_floor, unit,
                 fails_because, runs=(candidate, reference), noise_metric=key, noise_scale=abs(scale_by),
                 unmatched=unmatched)  # fmt: skip
