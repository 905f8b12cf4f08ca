"""The cross-architecture comparison's setup: each arm (`arms.ARMS`) at each size of its recipe (`recipes`: the
shapes per scale that match the Transformer's non-embedding parameters, budgets and learning-rate grids), and the
sweep (the table is `table`; the training benchmark times the same shapes)."""

from __future__ import annotations

import dataclasses

from scaling_axes.experiments.cross_architecture.arms import ARM, check
from scaling_axes.experiments.cross_architecture.recipes import recipe_at
from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.harness.runs import Budget, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import Sweep
from scaling_axes.modules.flops import non_embedding_params

ARCHITECTURES = tuple(ARM)

LM = {"weight_decay": 0.1, "decay_embeddings": False, "z_loss": 1e-4}


SIZES = ("125m", "350m")


def sizes(scale: Scale) -> tuple[str, ...]:
    """The sizes trained at `scale` (SIZES, as far as the scale's recipe goes)."""
    return tuple(size for size in SIZES if size in recipe_at(scale).shapes)


def budget(scale: Scale, size: str, lr: float) -> Budget:
    """The recipe's short budget, or 20 tokens per non-embedding parameter of the size (paper)."""
    recipe = recipe_at(scale)
    if (short := recipe.budget) is None:
        batch, seq = 512, 1024
        steps = round(20 * recipe.shapes[size].target / (batch * seq))
        return rmt_setup.schedule(steps, batch, seq, lr, micro_batch=8)
    budget = rmt_setup.schedule(
        short.steps, short.batch, short.seq_len, lr, short.val_windows, checkpoints=short.checkpoints
    )
    return dataclasses.replace(budget, val_every=short.val_every) if short.val_every else budget


def sweep(scale: Scale, arch: str) -> tuple[float, ...]:
    return tuple(round(lr * recipe_at(scale).lr_factor, 12) for lr in ARM[arch].lr_grid)


def make_run(scale: Scale, arch: str, size: str, lr: float | None = None) -> Run:
    """`arch` at `size`, trained at the rate its sweep chooses (`lr`, where given, is only the declared one: a
    benchmark's)."""
    grid = sweep(scale, arch)
    b = budget(scale, size, grid[len(grid) // 2] if lr is None else lr)
    recipe, arm = recipe_at(scale), ARM[arch]
    shape = {**arm.shape(recipe.shapes[size], b.seq_len), **scale.vocabulary(), **arm.scale_fields(scale, recipe)}
    return Run(
        f"{arch}_{size}",
        arm.preset,
        b,
        shape,
        corpus=rmt_setup.corpus(scale),
        tokenizer=scale.tokenizer_for("gpt2"),
        lm=LM,
        lr_sweep=True,
        sweep=Sweep(grid),
    )


@fitted
def runs(scale: Scale) -> list[Run]:
    """Every arm at every size of the scale's recipe, once each arm is checked complete (`arms.check`)."""
    shapes = {size: recipe_at(scale).shapes[size] for size in sizes(scale)}
    check(tuple(ARM.values()), shapes, budget(scale, SIZES[0], 1e-3).seq_len)
    return [make_run(scale, a, s) for s in sizes(scale) for a in ARCHITECTURES]


def matched(scale: Scale, size: str) -> dict[str, int]:
    """Non-embedding parameters of every architecture at this size."""
    return {arch: non_embedding_params(make_run(scale, arch, size).config) for arch in ARCHITECTURES}
