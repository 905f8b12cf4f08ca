"""A paper's claims as result rows, judged from whatever runs finished: `claim_holds`, `claim_fails` or
`insufficient`, and the rows of what decides nothing (`never_reached`, `out_of_reach`, the exact checks).

A claim is measured as a signed margin, positive where the paper's claim holds (say the Transformer's loss minus
the RMT's), once per seed at which every run it compares finished (`paired_margins`). It is judged only where the
data can support it: never at smoke scale. The arms of a margin share its seed, so its noise is the spread of the
experiment's paired margins on the same metric (`paired_noise`); an unpaired margin's is at least sqrt(2) x one
run's (`margin_floor`). The mean of n seeds must clear two Student-t tests: on that noise (its degrees of freedom)
and on the seeds' own spread (n - 1); its p is the larger. A claim stated within a tolerance is an equivalence: two
one-sided tests. Over a scale, every declared claim is one family whose false discoveries `experiment.family`
controls; the margin, p, the noise, the seeds and the narrowest difference the data exclude are in the note.
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
    t_two_sided_p,
)

# Noise floors of one run's metric, used as the least noise a margin can have (assumed, not measured here): the final
# validation loss of a small language model, and ImageNet top-1
LOSS_NOISE_FLOOR = 0.02  # nats/token
TOP1_NOISE_FLOOR = 0.3  # points


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
    tolerance: float | None = None,
) -> Row:
    """The claim `statement`, measured by `margins` (seed -> margin, or a list from seed 1; positive: it holds), each
    combining `runs_per_margin` runs of a metric whose one-run noise is at least `noise_floor` (`noise_metric`: the
    per-run metric whose measured spread may raise it). `fails_because`: a part of the claim the runs contradict
    whatever the margin. `runs`: the runs it compares. `before_training`: measured on the models before they train.
    `own_values`: a metric no done.json holds, per arm over its seeds (its noise their pooled spread). `tolerance`:
    a claim stated within it, each margin the difference plus it (`as_good_as`)."""
    by_seed = margins if isinstance(margins, Mapping) else dict(enumerate(margins, 1))
    evidence = Evidence(statement, tuple(by_seed.values()), tuple(by_seed), noise_floor, runs_per_margin,
                        fails_because, noise_metric, noise_scale, unmatched, before_training,
                        None if own_values is None else tuple(map(tuple, own_values)), tolerance)  # fmt: skip
    claim = Row(table=table, row=row, metric="claim", unit=unit, run=",".join(runs), evidence=evidence)
    return settle(claim, scale)


PairedNoise = dict[tuple, tuple[float, int]]  # a pool of paired margins -> (one margin's pooled spread, its dof)


def pool_of(claim: Row) -> tuple:
    """The pool whose paired margins share one noise: the experiment's claims on the same metric, unit and runs per
    margin (a claim on a metric no run records, as a downstream evaluation, pools alone)."""
    e = claim.evidence
    return (e.noise_metric, claim.unit, e.runs_per_margin) if e.noise_metric else (claim.table, claim.row)


def paired_noise(claims: Sequence[Row]) -> PairedNoise:
    """Per pool (`pool_of`), the pooled spread over seeds of its paired claims' margins and its degrees of freedom,
    each comparison once (two claims on the same runs and margins are one)."""
    pools: dict[tuple, dict[tuple, list[float]]] = {}
    for claim in claims:
        if (e := claim.evidence) is not None and e.paired and len(e.margins) >= 2:
            same = (",".join(sorted(claim.run.split(","))), tuple(f"{m:.9g}" for m in e.margins))
            pools.setdefault(pool_of(claim), {})[same] = list(e.margins)
    return {key: pooled_spread(list(pool.values())) for key, pool in pools.items()}


def settle(
    claim: Row,
    scale: Scale,
    measured_noise: dict[str, tuple[float, int]] | None = None,
    not_learning: Sequence[str] = (),
    untuned: Sequence[str] = (),
    unstable: Sequence[str] = (),
    paired: PairedNoise | None = None,
) -> Row:
    """`claim` judged from its evidence: a paired margin against `paired`, its pool's spread (`paired_noise`); an
    unpaired one, or one whose pool measured none, against sqrt(runs per margin) x one run's noise (the assumed floor,
    raised by `measured_noise`: metric -> pooled one-run spread and dof). Never decided on a run `not_learning`,
    `unstable` or `untuned` (why each). A tested claim carries its p as `p`, and as `q` until `experiment.family`."""
    e = claim.evidence
    noise, noise_dof, per_margin, pooled_over = _noise(claim, measured_noise, paired)
    test = significance(e.margins, noise, per_margin, noise_dof) if e.margins else None
    p, decided = _decision(e, test) if test is not None else (None, "insufficient")
    status, why = _verdict(claim, scale, test, decided, noise_dof, not_learning, untuned, unstable)
    tested = test is not None and (not why or why.startswith(WITHIN))  # its verdict is its test's
    margin = statistics.mean(e.margins) if e.margins else None
    low, high = (None, None) if test is None else (margin - test.bound, margin + test.bound)
    measured = _measured(claim, test, p, margin_floor(noise, per_margin), noise_dof, pooled_over)
    note = NOTE_PARTS.join((e.statement, measured, why)).rstrip(" |")
    evidence = dataclasses.replace(e, tests=test.tests) if test is not None else e
    return dataclasses.replace(claim, ours=margin, low=low, high=high, seeds=len(e.margins), status=status,
                               p=p, q=p if tested else None, note=note, evidence=evidence)  # fmt: skip


def _noise(claim: Row, measured: dict[str, tuple[float, int]] | None,
           paired: PairedNoise | None) -> tuple[float, float, int, str]:  # fmt: skip
    """(noise, its degrees of freedom, runs per margin it is multiplied by, what it rests on) of `claim`'s margin."""
    e = claim.evidence
    spread, dof = (paired or {}).get(pool_of(claim), (0.0, 0))
    if e.paired and dof and spread:
        return spread, dof, 1, "paired"
    floor, floor_dof = e.noise_floor, math.inf
    pooled, pooled_dof = (measured or {}).get(e.noise_metric, (0.0, 0))
    own = (0.0, 0) if e.own_values is None else pooled_spread(e.own_values)
    for each, each_dof in ((e.noise_scale * pooled, pooled_dof), own):
        if each_dof and each > floor:  # the measured noise: estimated, on its degrees of freedom
            floor, floor_dof = each, each_dof
    return floor, floor_dof, e.runs_per_margin, "floor"


def _decision(e: Evidence, test: Significance) -> tuple[float, str]:
    """(p, the verdict its test reaches at ALPHA, before the family's control). A difference: two-sided. Within a
    tolerance: two one-sided tests that the difference lies inside it where the mean does, else the test that it
    lies beyond (two-sided, on the side it lies)."""
    margin = statistics.fmean(e.margins)
    if e.tolerance is None:
        return test.p, ("claim_holds" if margin > 0 else "claim_fails") if test.p < ALPHA else "insufficient"
    difference = margin - e.tolerance
    if abs(difference) < e.tolerance:
        p = test.equivalence_p(difference, e.tolerance)
        return p, "claim_holds" if p < ALPHA else "insufficient"
    beyond = abs(difference) - e.tolerance
    p = max(t_two_sided_p(beyond / se, df) if se else float(beyond == 0) for se, df in test.tests)
    return p, "claim_fails" if p < ALPHA else "insufficient"


WITHIN = "within the 95% bound"


def _verdict(claim: Row, scale: Scale, test: Significance | None, decided: str, noise_dof: float,
             not_learning: Sequence[str], untuned: Sequence[str],
             unstable: Sequence[str]) -> tuple[str, str]:  # fmt: skip
    """(status, why it is not decided: empty where it is) of `claim` (see `settle`)."""
    e, n = claim.evidence, len(claim.evidence.margins)
    if test is None:
        return "insufficient", "the runs it needs have not finished: no difference can be excluded"
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
    if decided != "insufficient":
        return decided, ""
    margin = statistics.fmean(e.margins) - (e.tolerance or 0.0)
    detectable = minimum_detectable_effect(test.noise, n, noise_dof)
    needed = seeds_needed(margin, test.noise, noise_dof)
    needs = f"--seeds {needed}" if needed <= MAX_SEEDS else f"over {MAX_SEEDS} seeds: out of reach here"
    return "insufficient", (f"{WITHIN}; minimum detectable effect {detectable:.3g} at {n} seed{'s' * (n != 1)} "
                            f"(80% power), this margin needs {needs}")  # fmt: skip


def _measured(claim: Row, test: Significance | None, p: float | None, noise_floor: float, noise_dof: float,
              rests_on: str) -> str:  # fmt: skip
    """What a claim's note says was measured: the margin, its bound and p, the noise it rests on, the tolerance's
    two one-sided tests, and the narrowest difference the data exclude."""
    if test is None:
        return ""
    e, n = claim.evidence, len(claim.evidence.margins)
    how = "one seed against the floor" if n < 2 else f"Student-t {t_critical(n - 1):.3g}"
    estimated = "assumed" if math.isinf(noise_dof) else f"measured on {noise_dof} degrees of freedom"
    source = "paired margins' spread" if rests_on == "paired" else "floor"
    difference = statistics.fmean(e.margins) - (e.tolerance or 0.0)
    tost = ""
    if e.tolerance is not None:
        beyond = "" if abs(difference) < e.tolerance else "; p is the test that it lies beyond"
        tost = (f"; the difference {difference:+.4g} against +-{e.tolerance:g}: two one-sided tests that it lies "
                f"within, p {test.equivalence_p(difference, e.tolerance):.3g}{beyond}")
    return (f"margin {statistics.fmean(e.margins):+.4g} {claim.unit}, 95% bound {test.bound:.3g}, p {p:.3g}, "
            f"noise {test.noise:.3g} ({source} {noise_floor:.3g}, {estimated}; {n} seed{'s' * (n != 1)}; {how})"
            f"{tost}; {EXCLUDES}{test.excluded_beyond(difference):.3g} {claim.unit}")  # fmt: skip


EXCLUDES = "cannot exclude a difference of "  # the narrowest equivalence bound the data support, in every note


def _more(reasons: Sequence[str]) -> str:
    return f" (and {len(reasons)} more run{'s' * (len(reasons) > 1)} or seeds)" if reasons else ""


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
    """The claim that run `candidate` is as good as `reference`: its `key` (x `scale_by`; higher is better) within
    `tolerance` of it, tested as an equivalence (two one-sided tests; `settle`). Margin: the difference plus the
    tolerance, per seed. `fails_because`: as `judge`'s."""
    difference = metric_margin(key, scale_by)
    margins = paired_margins(results, (candidate, reference),
                             lambda c, r: None if (d := difference(c, r)) is None else d + tolerance)  # fmt: skip
    within = f" (within {tolerance:g} {unit})" if tolerance else ""
    return judge(table, f"{candidate}_vs_{reference}", f"{statement}{within}", scale, margins, noise_floor, unit,
                 fails_because, runs=(candidate, reference), noise_metric=key, noise_scale=abs(scale_by),
                 unmatched=unmatched, tolerance=tolerance if tolerance else None)  # fmt: skip
