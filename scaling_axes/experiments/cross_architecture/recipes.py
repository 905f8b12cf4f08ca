"""The cross-architecture comparison's recipes per scale: the shapes of each size, the budget, and how far each
arm's learning-rate grid (`arms.Arm.lr_grid`, the paper-scale grid) is scaled; the small plan's budget per arm."""

from __future__ import annotations

import dataclasses

from scaling_axes.harness.scales import CPU, PAPER, SMALL, SMOKE, Scale, recipe_for
from scaling_axes.harness.sweeps import STABLE_REGION, SweepRegion

SMALL_MINUTES_PER_ARM = 5.0  # the small plan's budget is per arm: each arm's sweeps and claim runs at both sizes
# (10-12 runs, most of their time the 20 s a run costs to start) take 4.0 H100-minutes at the measured MFU (4.8 for
# the MoT pair, with bytes and a second draw more), so the comparison's plan grows with its arms and a new arm fits
# by this rule, not by a constant it would break


@dataclasses.dataclass(frozen=True)
class Shape:
    """One size: depth and width shared by every architecture, and the few widths that are architecture-specific."""

    n_layer: int
    d_model: int
    head_dim: int
    rmt_d_key: int  # residual D_k x head_dim, 2.67-4 x d_model as in the RMT paper
    mot_head_dim: int
    mot_mixin: tuple[int, int]  # concat (d_token, d_byte)
    target: float  # the non-embedding parameters this size stands for


@dataclasses.dataclass(frozen=True)
class ShortBudget:
    """A fixed budget below paper scale (the RMT paper's schedule shape)."""

    steps: int
    batch: int
    seq_len: int
    val_windows: int
    val_every: int | None = None  # None: the schedule's about 20 validations
    checkpoints: int = 20  # along a run


@dataclasses.dataclass(frozen=True)
class Recipe:
    shapes: dict[str, Shape]  # the sizes keep their paper-scale names when shrunk
    budget: ShortBudget | None  # None: 20 tokens per non-embedding parameter (paper)
    lr_factor: float = 1.0  # the grid's scale: tiny models on a few steps barely move at the paper-scale rates
    seeds: int | None = None  # the claims' seeds (None: the scale's)
    tokenformer_numerics: str = "gpu"  # the released code whose numerics the Tokenformer follows (its family's: GPU)
    warmup_fraction: float = 0.05  # of the steps (the RMT paper's schedule)
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW's; 0.99 at batches of a few thousand tokens
    sweep_region: SweepRegion | None = None  # how its sweeps choose (None: as `Sweep` does by default)
    min_tokens_per_parameter: float = 0.0  # every arm trains at least this many tokens per non-embedding parameter


RECIPES: dict[Scale, Recipe] = {
    PAPER: Recipe(
        {"125m": Shape(18, 768, 64, 32, 128, (256, 48), 125e6), "350m": Shape(28, 1024, 64, 64, 128, (256, 48), 350e6)},
        None,
    ),
    SMALL: Recipe(
        {"125m": Shape(4, 256, 64, 16, 64, (64, 12), 125e6), "350m": Shape(6, 384, 64, 24, 64, (96, 18), 350e6)},
        ShortBudget(300, 32, 1024, val_windows=128),
        warmup_fraction=0.1,
    ),  # a fraction of training
    SMOKE: Recipe(  # one size, as cpu: the second's 15 runs were 37 s of make smoke's 10 minutes
        {"125m": Shape(2, 64, 16, 8, 16, (16, 1), 125e6)},
        ShortBudget(8, 4, 64, val_windows=8),
        lr_factor=10,
    ),
    # one size, every arm trained to at least 20 tokens per non-embedding parameter (issue 83: 200 steps were 4 of
    # them, and ranked how large a rate step each model tolerates): 1,056 steps of 2,048 tokens, 20.1 for the MoT's
    # 107,529 and 0.995 passes of the Wikipedia excerpt's 2,172,547 training tokens; the curve on 128 windows (16k
    # tokens), the final figures on the whole splits
    CPU: Recipe(
        {"125m": Shape(2, 64, 16, 8, 64, (16, 8), 125e6)},  # bytes of 8 dimensions: 2 are a circle after their norm
        ShortBudget(1056, 16, 128, val_windows=128, val_every=96, checkpoints=4),
        lr_factor=3,
        # the scale's three seeds: the five it took while one-draw sweeps chose rates past the edge of
        # stability (seeds spread 0.1-0.4 nats there) are not needed at stable rates (issue 46: 0.02)
        # the TPU code's numerics: the change of the recipe that the diagnosis found to move it most (its
        # margins, intervals and seeds: results/cpu/tokenformer_cpu_diagnosis.csv, `experiments/tokenformer/
        # diagnosis.py`); its `tied_head` row gains too, but the head stays untied, as the Transformer's
        tokenformer_numerics="tpu",
        # the RMT recipe's warmup at this scale (issue 46: 5% let seeds spike) and a beta2 that averages over more
        # than 20 steps of 2,048 tokens (issue 83)
        warmup_fraction=0.2,
        betas=(0.9, 0.99),
        sweep_region=STABLE_REGION,
        min_tokens_per_parameter=20.0,
    ),
}


def recipe_at(scale: Scale) -> Recipe:
    return recipe_for(RECIPES, scale, "the cross-architecture comparison")
