"""The cross-architecture comparison's setup: each arm (`arms.ARMS`) at each size of its recipe (`recipes`: the
shapes per scale that match the Transformer's non-embedding parameters, budgets and learning-rate grids), and the
sweep (the table is `table`; the training benchmark times the same shapes)."""

from __future__ import annotations

import dataclasses
from typing import Any

from scaling_axes.experiments.cross_architecture.arms import ARM, ARMS, check
from scaling_axes.experiments.cross_architecture.recipes import recipe_at
from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.harness.experiment.comparisons import Comparison
from scaling_axes.harness.runs import Budget, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import Sweep
from scaling_axes.modules.flops import non_embedding_params

ARCHITECTURES = tuple(ARM)  # every arm trained
COMPARED = tuple(name for name, arm in ARM.items() if arm.control_of is None)  # the architectures: matched, ranked

LM = {"weight_decay": 0.1, "decay_embeddings": False, "z_loss": 1e-4}


SIZES = ("125m", "350m")


def sizes(scale: Scale) -> tuple[str, ...]:
    """The sizes trained at `scale` (SIZES, as far as the scale's recipe goes)."""
    return tuple(size for size in SIZES if size in recipe_at(scale).shapes)


def budget(scale: Scale, size: str, lr: float) -> Budget:
    """The recipe's short budget, or 20 tokens per non-embedding parameter of the size (paper)."""
    recipe = recipe_at(scale)
    warmup = recipe.warmup_fraction
    if (short := recipe.budget) is None:
        batch, seq = 512, 1024
        steps = round(20 * recipe.shapes[size].target / (batch * seq))
        return rmt_setup.schedule(steps, batch, seq, lr, micro_batch=8, warmup_fraction=warmup)
    budget = rmt_setup.schedule(
        short.steps,
        short.batch,
        short.seq_len,
        lr,
        short.val_windows,
        checkpoints=short.checkpoints,
        warmup_fraction=warmup,
    )
    return dataclasses.replace(budget, val_every=short.val_every) if short.val_every else budget


def sweep(scale: Scale, arch: str) -> tuple[float, ...]:
    return tuple(round(lr * recipe_at(scale).lr_factor, 12) for lr in ARM[arch].lr_grid)


def lm_options(scale: Scale, arch: str) -> dict[str, Any]:
    """The comparison's options: `LM` and the recipe's betas, or the arm's own optimiser (Muon, its momentum warmed
    up over a tenth of the run below paper scale: the record's 300 steps are a whole short run)."""
    optimiser = {k: v for k, v in ARM[arch].optimiser.items() if k != "rate_option"}
    if optimiser.get("optimizer") == "muon":
        return {**optimiser, **({} if scale.paper_configs else {"momentum_warmup": 0.1})}
    return {**LM, "betas": recipe_at(scale).betas, **optimiser}


def make_run(scale: Scale, arch: str, size: str, lr: float | None = None) -> Run:
    """`arch` at `size`, trained at the rate its sweep chooses (`lr`, where given, is only the declared one: a
    benchmark's)."""
    grid, arm = sweep(scale, arch), ARM[arch]
    option = arm.optimiser.get("rate_option")
    b = budget(scale, size, grid[len(grid) // 2] if lr is None or option else lr)
    recipe = recipe_at(scale)
    shape = {**arm.shape(recipe.shapes[size], b.seq_len), **scale.vocabulary(), **arm.scale_fields(scale, recipe)}
    lm, declared = lm_options(scale, arch), Sweep(grid, rate_option=option)
    if option:
        lm[option] = grid[len(grid) // 2]
    return Run(
        f"{arch}_{size}",
        arm.preset,
        b,
        shape,
        corpus=rmt_setup.corpus(scale),
        tokenizer=scale.tokenizer_for("gpt2"),
        lm=lm,
        lr_sweep=True,
        sweep=region.applied(declared) if (region := recipe.sweep_region) else declared,
    )


@fitted
def runs(scale: Scale) -> list[Run]:
    """Every arm at every size of the scale's recipe, once each arm is checked complete (`arms.check`)."""
    shapes = {size: recipe_at(scale).shapes[size] for size in sizes(scale)}
    check(tuple(ARM.values()), shapes, budget(scale, SIZES[0], 1e-3).seq_len)
    return [make_run(scale, a, s) for s in sizes(scale) for a in ARCHITECTURES]


def matched(scale: Scale, size: str) -> dict[str, int]:
    """Non-embedding parameters of every architecture compared at this size (a positive control is not matched)."""
    return {arch: non_embedding_params(make_run(scale, arch, size).config) for arch in COMPARED}


def comparisons(scale: Scale) -> list[Comparison]:
    """Each arm's claims at each size: the arm against the one it names, nothing but the architecture and what the
    claim names different, each trained to at least the recipe's tokens per non-embedding parameter."""
    floor = recipe_at(scale).min_tokens_per_parameter
    return [
        Comparison(
            f"{arm.name}_vs_{claim.against}_{size}",
            (f"{arm.name}_{size}", f"{claim.against}_{size}"),
            claim.differs,
            claim.why,
            min_tokens_per_parameter=floor,
        )
        for size in sizes(scale)
        for arm in ARMS
        for claim in arm.claims
    ]
