"""Which decided verdicts hang on a threshold: every fixed threshold a verdict passes through, with where its value
came from, moved SHIFT down and up, and each decided claim judged again at each (from its per-seed file: its arms'
spikes, validation rises and final losses at every seed, the unigram floors, its tests). A verdict that changes is
marked as hanging on that threshold, in its note and in REPORT.md. The measured noise is held where it is: a seed that
turns unstable at a moved threshold blocks the claim, which is the larger change."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from scaling_axes.harness.stability import LEARNED_NATS, OUTLIER_NATS, OUTLIER_Z, SPIKE_NATS, VAL_RISE_NATS, outliers
from scaling_axes.significance import ALPHA, t_one_sided_p, t_two_sided_p

SHIFT = 0.25  # each threshold moved this fraction down and up


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A fixed threshold a verdict passes through: its name and value, and where the value came from."""

    name: str
    value: float
    source: str


THRESHOLDS = (
    Threshold(
        "SPIKE_NATS",
        SPIKE_NATS,
        "per-step curves (issue 46): stable runs' hardest batch rose up to 0.75 nats "
        "above the moving average, runs past the edge of stability from 0.90; set in that gap, on the runs "
        "it judges (docs/methodology.md)",
    ),
    Threshold(
        "VAL_RISE_NATS",
        VAL_RISE_NATS,
        "a few times the 0.02-0.03 nats a validation loss moves between evaluations of a stable run at cpu scale",
    ),
    Threshold(
        "OUTLIER_NATS",
        OUTLIER_NATS,
        "ten times the assumed one-run noise floor (0.02 nats), so that only a "
        "seed that trained differently, not one drawn wide, leaves the noise",
    ),
    Threshold("OUTLIER_Z", OUTLIER_Z, "the usual robust-outlier cut (Iglewicz and Hoaglin's modified z-score)"),
    Threshold(
        "LEARNED_NATS",
        LEARNED_NATS,
        "a bigram statistic gains about a nat below the unigram floor on these "
        "corpora, sampling noise a few hundredths: half of that gain",
    ),
    Threshold(
        "tolerance",
        math.nan,
        "the claim's own: the paper's word ('comparable', 'as good as') made a number in the experiment that states it",
    ),
)


def hangs_on(
    row: dict[str, str],
    seeds: list[dict[str, str]],
    floors: dict[str, float],
    redecide: Callable[[float, str], str],
) -> list[str]:
    """Why the decided claim `row` would change at a threshold moved SHIFT either way, one entry a threshold;
    `redecide(p, verdict)`: `verdict` where the family's control keeps it were its p `p`, else insufficient."""
    arms = row["run"].split(",")
    where = (row["table"], row["row"])
    evidence = {r["metric"]: r["value"] for r in seeds if r["kind"] == "evidence" and (r["table"], r["row"]) == where}
    per_seed: dict[tuple[str, str], dict[str, float]] = {}
    for r in seeds:
        if r["kind"] == "run" and r["run"] in arms:
            per_seed.setdefault((r["run"], r["seed"]), {})[r["metric"]] = float(r["value"])
    hangs = []
    for metric, threshold in (("spike_nats", SPIKE_NATS), ("val_rise_nats", VAL_RISE_NATS)):
        name = "SPIKE_NATS" if metric == "spike_nats" else "VAL_RISE_NATS"
        lower = threshold * (1 - SHIFT)
        if turned := [f"{run} seed {k}" for (run, k), values in per_seed.items() if values.get(metric, 0) > lower]:
            hangs.append(f"{name} at {lower:.3g}: {', '.join(turned)} turn{'s' * (len(turned) == 1)} unstable")
    for run in arms:
        finals = {k: v["val_loss"] for (each, k), v in per_seed.items() if each == run and "val_loss" in v}
        if outliers(finals, OUTLIER_NATS * (1 - SHIFT), OUTLIER_Z) or outliers(
            finals, OUTLIER_NATS, OUTLIER_Z * (1 - SHIFT)
        ):
            hangs.append(f"OUTLIER_NATS or OUTLIER_Z at -{SHIFT:.0%}: a seed of {run} turns an outlier")
    floor = next((value for data, value in floors.items() if f"data: {data}" in row["note"]), None)
    stricter = LEARNED_NATS * (1 + SHIFT)
    if floor is not None and (
        short := [
            f"{run} seed {k}" for (run, k), v in per_seed.items() if v.get("val_loss", -math.inf) > floor - stricter
        ]
    ):
        hangs.append(f"LEARNED_NATS at {stricter:.3g}: {', '.join(short)} not learning")
    if evidence.get("tolerance"):
        hangs += _tolerance(row, evidence, redecide)
    return hangs


def _tolerance(row: dict[str, str], evidence: dict[str, str], redecide: Callable[[float, str], str]) -> list[str]:
    """The claim's verdict with its tolerance moved SHIFT down and up: its tests again on the same differences."""
    tests = [tuple(map(float, t.split(":"))) for t in evidence.get("tests", "").split(";") if t]
    tolerance, mean = float(evidence["tolerance"]), float(row["ours"])
    difference, out = mean - tolerance, []
    for moved in (tolerance * (1 - SHIFT), tolerance * (1 + SHIFT)):
        if abs(difference) < moved:
            p = max(
                max(t_one_sided_p((difference + moved) / se, df), t_one_sided_p((moved - difference) / se, df))
                for se, df in tests
            )
            verdict = "claim_holds" if p < ALPHA else "insufficient"
        else:
            p = max(t_two_sided_p((abs(difference) - moved) / se, df) for se, df in tests)
            verdict = "claim_fails" if p < ALPHA else "insufficient"
        if (after := redecide(p, verdict)) != row["status"]:
            out.append(f"its tolerance at {moved:.3g}: {after}")
    return out
