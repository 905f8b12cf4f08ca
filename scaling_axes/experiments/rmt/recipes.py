"""The RMT paper's recipes per scale: what each scale trains, in one place.

The paper scale is App. C.1 and Tables 8-9 (its budgets are read from `results/published/rmt.csv` by `setup`);
the rows below shrink both families (same options, four sizes each) to a short budget. The RMT's rank R times D_v is
the matching Transformer's width. None of these is a reproduction.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from scaling_axes.harness.scales import CPU, SMALL, SMOKE, Corpus, Scale, recipe_for
from scaling_axes.harness.sweeps import STABLE_REGION, SweepRegion

PAPER_LR = {"transformer": 6.5e-3, "rmt": 1e-2}  # the Transformer's tuned muP lr; the RMT's official default
UNTUNED_LR = 1e-2  # Fig. 6 and Table 10: the paper's untuned recipe (App. C.4)
PAPER_SEQ = 512
OPENWEBTEXT = Corpus("openwebtext", tiny_stand_in="embedded_news")  # every RMT run's data (App. C.1)
PAPER_VAL_WINDOWS = 1024


MupProxy = Literal["paper", "own", "smallest"]


@dataclasses.dataclass(frozen=True)
class Shrunk:
    """A scale below the paper's: both families shrunk, four sizes each, on a short budget."""

    n_layer: int
    widths: tuple[int, int, int, int]  # the Transformers' d_model
    n_head: int | None  # None: heads of 64
    ranks: tuple[int, int, int, int]  # the RMTs' R
    d_value: int
    d_key: int
    seq_len: int
    steps: int
    batch: int
    lr: float | None  # None: the family's paper lr
    mup_proxy: MupProxy  # the Transformers' muP base: the paper's (256), each model's own width, or the smallest
    val_windows: int  # validation windows per evaluation
    variants_shape: tuple[int, int]  # Table 10's rows: layers (three stages), d_model
    residual_d_keys: tuple[int, ...] | None = None  # Fig. 6's D_k sweep (None: the paper's 6 ... 64)
    lr_grid: tuple[float, ...] | None = None  # each model's lr sweep (None: the paper's lr, unswept)
    validations: int = 20  # along a run (the paper's cadence)
    checkpoints: int = 20  # along a run: each bounds the work an interruption loses
    warmup_fraction: float = 0.05  # of the steps (the paper's 5%)
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW's (App. C.1); 0.99 at batches of a few thousand tokens
    sweep_region: SweepRegion | None = None  # how its sweeps choose (None: as `Sweep` does by default)
    d_values: tuple[int, int, int, int] | None = None  # the RMTs' D_v per size (None: `d_value` at every size)
    d_keys: tuple[int, int, int, int] | None = None  # and D_k (None: `d_key`)
    tokens_per_parameter: float | None = None  # Fig. 2's and Table 4's runs: this many tokens per non-embedding
    # parameter of each model, the largest RMT on the largest Transformer's (Tables 3, 8-9); None: `steps` for all


# Below paper scale each family is swept (`lr_grid`, about the code's 1e-2; smoke, a pipeline check, is not): the
# declared lr is the sweep's middle. Smoke uses the code's lr 1e-2 for every family (at a lower lr 20 steps barely
# move the RMT from its tiny initial signal) and each model as its own muP proxy. At cpu the proxy is the smallest
# width (the paper's 256 would multiply the hidden lr of widths 32-96 by up to 8), so that muP carries the lr swept
# at the largest size to the others, as the paper's muP does (`setup.family_sweep`)
SHRUNK: dict[Scale, Shrunk] = {
    SMOKE: Shrunk(
        n_layer=2,
        widths=(32, 48, 64, 96),
        n_head=4,
        ranks=(2, 3, 4, 6),
        d_value=16,
        d_key=8,
        seq_len=64,
        steps=20,
        batch=4,
        lr=1e-2,
        mup_proxy="own",
        val_windows=32,
        variants_shape=(3, 48),
        residual_d_keys=(2, 4, 6, 8, 12, 16),
    ),
    # Issue 83's ladder, as the paper's and the Transformers' cpu ladders scale (the diagnosis in docs/models.md):
    # two layers, Transformers 24-64 wide in 4 heads, RMTs of 4 heads whose D_v = d / 4 grows with the matching
    # Transformer's width and D_k = 2 D_v; every model trained on 20 tokens per non-embedding parameter (the largest
    # Transformer's 98,624 take 0.91 passes of the 2,172,547 training tokens; the 305m RMT trains on them too, as
    # the paper's did), 8 x 128 tokens a step, so that the smallest rung still runs 202 steps with a warmup of 40
    # (at 16 x 128 it was 101 with 20: a review before the plan). Fig. 6 and Table 10 (not planned at cpu) keep
    # `steps`. A warmup of 20%: after 5% and 10% seeds spiked (issue 46); beta2 0.99 averages over about 100 steps
    CPU: Shrunk(
        n_layer=2,
        widths=(24, 32, 48, 64),
        n_head=4,
        ranks=(4, 4, 4, 4),
        d_value=16,
        d_key=32,
        seq_len=128,
        steps=250,
        batch=8,
        lr=1e-2,
        mup_proxy="smallest",
        val_windows=128,
        variants_shape=(3, 48),
        lr_grid=(3e-3, 1e-2, 3e-2),
        validations=10,
        checkpoints=4,
        warmup_fraction=0.2,
        betas=(0.9, 0.99),  # 0.95 averages over about 20 steps of 2,048 tokens (issue 83)
        sweep_region=STABLE_REGION,
        d_values=(6, 8, 12, 16),
        d_keys=(12, 16, 24, 32),
        tokens_per_parameter=20.0,
    ),
    SMALL: Shrunk(
        n_layer=6,
        widths=(192, 256, 384, 512),
        n_head=None,
        ranks=(6, 8, 12, 16),
        d_value=32,
        d_key=32,
        seq_len=256,
        steps=3000,
        batch=32,
        lr=None,
        mup_proxy="paper",
        val_windows=256,
        variants_shape=(6, 256),
        lr_grid=(3e-3, 1e-2, 3e-2),
        warmup_fraction=0.1,
        betas=(0.9, 0.99),
    ),
}


def shrunk_at(scale: Scale) -> Shrunk:
    return recipe_for(SHRUNK, scale, "the RMT paper")
