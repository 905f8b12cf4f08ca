"""The grammar of run names: every name the harness gives a run beyond the one an experiment declares is formatted
and parsed here, and nowhere else.

    <run>                          the declared run: its first claim seed
    <run>_seed<k>                  its repeat at seed k >= 2 (`runs.seed_run`)
    <run>_sweep_lr<x>              its sweep point at rate x, on the seed before the run's (`sweeps.sweep_point`)
    <run>_sweep_lr<x>_draw<k>      the k-th draw (k >= 2) of that point, on the k-th seed before the run's
    <run>_stable_lr<x>             its claim seeds at rate x below the sweep's choice (`sweeps.stable_run`), and
    <run>_stable_lr<x>_seed<k>     their repeats

A rate is written with six significant digits (`rate`), so that a sweep extended past its grid lands on the names
it had.
"""

from __future__ import annotations

import math

SEED_SUFFIX = "_seed"
SWEEP_INFIX = "_sweep_lr"
STABLE_INFIX = "_stable_lr"
DRAW_INFIX = "_draw"


def rate(lr: float) -> float:
    """A rate as names carry it: six significant digits."""
    return float(f"{lr:.6g}")


def seed_name(name: str, k: int) -> str:
    """`name`'s repeat at seed `k` (the name itself at seed 1)."""
    return name if k == 1 else f"{name}{SEED_SUFFIX}{k}"


def sweep_name(name: str, lr: float, draw: int = 1) -> str:
    return f"{name}{SWEEP_INFIX}{rate(lr):g}{f'{DRAW_INFIX}{draw}' if draw > 1 else ''}"


def stable_name(name: str, lr: float) -> str:
    return f"{name}{STABLE_INFIX}{rate(lr):g}"


def seed_glob(name: str) -> str:
    """A glob for the directories of `name`'s repeats at seeds k >= 2 (`parse_seed` tells which match)."""
    return f"{name}{SEED_SUFFIX}*"


def sweep_glob(name: str) -> str:
    """A glob for the directories of `name`'s sweep points (`parse_sweep` tells which match)."""
    return f"{name}{SWEEP_INFIX}*"


def _count(text: str) -> int | None:
    """A seed or draw number k >= 2 as names carry it, else None."""
    return int(text) if text.isdigit() and int(text) >= 2 else None


def is_rate(text: str) -> bool:
    """Whether `text` is a finite number (a rate in a name)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def parse_seed(name: str) -> tuple[str, int]:
    """(the name at seed 1, k) of `name`; (name, 1) where it names no repeat."""
    base, _, k = name.rpartition(SEED_SUFFIX)
    seed = _count(k)
    return (base, seed) if base and seed else (name, 1)


def parse_sweep(name: str) -> tuple[str, float, int] | None:
    """(swept run, rate, draw) of a sweep point's name, else None."""
    return _parse(name, SWEEP_INFIX, DRAW_INFIX)


def parse_stable(name: str) -> tuple[str, float, int] | None:
    """(settled run, rate, seed) of a name of claim seeds below their sweep's choice, else None."""
    return _parse(name, STABLE_INFIX, SEED_SUFFIX)


def _parse(name: str, infix: str, counted: str) -> tuple[str, float, int] | None:
    """(run, rate, k) of `<run><infix><rate>` or `<run><infix><rate><counted><k>` (k >= 2), else None."""
    run, found, rest = name.rpartition(infix)
    lr, _, k = rest.partition(counted)
    if not found or not is_rate(lr) or (k and _count(k) is None):
        return None
    return run, float(lr), _count(k) or 1
