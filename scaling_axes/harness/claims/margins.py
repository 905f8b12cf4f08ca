"""How a claim is measured: a margin per seed of the runs it compares, positive in the paper's direction; where the
margin is a contrast of its arms' values of one measure (a loser's loss minus a winner's), those values per seed too,
which the experiment's arm x seed model pools (`claims.contrasts`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

# Noise floors of one run's metric (assumed, not measured here): the final validation loss of a small language model,
# and ImageNet top-1. A sweep's ties and a scale's design (what it cannot detect, before any run) rest on them; no
# claim's test does
LOSS_NOISE_FLOOR = 0.02  # nats/token
TOP1_NOISE_FLOOR = 0.3  # points


def seeds_of(done: dict | None) -> dict[int, dict]:
    """A finished run's done.json at each seed that finished: {k0: the run, k: its repeat at seed k}, k0 its own
    seed number (1 for a run as declared; a plan's first fresh seed for its confirmatory runs)."""
    return {} if done is None else {done.get("seed_index", 1): done, **done.get("seed_runs", {})}


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


def arm_values(
    results: dict[str, dict], arms: Sequence[str], value: Callable[[str, dict], float | None]
) -> dict[str, dict[int, float]]:
    """arm -> seed -> `value(arm, done)`, at the seeds where every arm has one."""
    per_arm = {arm: seeds_of(results.get(arm)) for arm in arms}
    common = sorted(set.intersection(*(set(seeds) for seeds in per_arm.values()))) if per_arm else []
    values = {arm: {k: value(arm, per_arm[arm][k]) for k in common} for arm in arms}
    kept = [k for k in common if all(values[arm][k] is not None for arm in arms)]
    return {arm: {k: float(values[arm][k]) for k in kept} for arm in arms}


def contrast_margins(values: Mapping[str, Mapping[int, float]], contrast: Mapping[str, float]) -> dict[int, float]:
    """seed -> sum over arms of coefficient x value: a contrast's margin at each seed every arm has."""
    seeds = sorted(set.intersection(*(set(values[arm]) for arm in contrast))) if contrast else []
    return {k: sum(c * values[arm][k] for arm, c in contrast.items()) for k in seeds}
