"""How a claim is measured: a margin per seed of the runs it compares, and the noise of margins whose arms share
each seed (the spread of an experiment's paired margins on one metric)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scaling_axes.harness.results import Row
from scaling_axes.significance import pooled_spread

# Noise floors of one run's metric, used as the least noise a margin can have (assumed, not measured here): the final
# validation loss of a small language model, and ImageNet top-1
LOSS_NOISE_FLOOR = 0.02  # nats/token
TOP1_NOISE_FLOOR = 0.3  # points


def seeds_of(done: dict | None) -> dict[int, dict]:
    """A finished run's done.json at each seed that finished: {1: the run, k: its repeat at seed k}."""
    return {} if done is None else {1: done, **done.get("seed_runs", {})}


def paired_margins(
    results: dict[str, dict], names: Sequence[str], margin: Callable[..., float | None]
) -> dict[int, float]:
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
