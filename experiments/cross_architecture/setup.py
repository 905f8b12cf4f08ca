"""The cross-architecture comparison's setup: each family's preset, the shapes per scale that match the
Transformer's non-embedding parameters, budgets and learning-rate sweeps (the table is `table`; the training
benchmark times the same shapes)."""

from __future__ import annotations

import dataclasses
from typing import Any

from scaling_axes.datamodules.stand_ins import byte_table_at, tokenizer_at, vocabulary_at
from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.harness.runs import Budget, Run, within_epochs
from scaling_axes.modules.flops import non_embedding_params
from scaling_axes.modules.transformer import STANDARD_PARAMETRISATION

FAMILIES = {
    "transformer": "transformer_rmt_405m",
    "tokenformer": "tokenformer_150m",
    "rmt": "rmt_305m",
    "mot": "mot_concat_noop_256_48",
    "mot_backbone": "mot_noop_noop_1024",
}

ARCHITECTURES = tuple(FAMILIES)

LR_GRID = {"transformer": (3e-4, 1e-3, 3e-3), "tokenformer": (3e-4, 1e-3, 3e-3), "rmt": (1e-3, 3e-3, 1e-2),
           "mot": (3e-4, 1e-3, 3e-3), "mot_backbone": (3e-4, 1e-3, 3e-3)}  # fmt: skip

SMOKE_LR_FACTOR = 10  # tiny models on a dozen steps barely move at the paper-scale rates
CPU_LR_FACTOR = 3  # widths of 64-96 on 300 steps take larger steps too

MATCH_TOLERANCE = 0.03

LM = {"weight_decay": 0.1, "decay_embeddings": False, "z_loss": 1e-4}


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


SHAPES = {  # the sizes keep their paper-scale names when shrunk
    "paper": {"125m": Shape(18, 768, 64, 32, 128, (256, 48), 125e6),
              "350m": Shape(28, 1024, 64, 64, 128, (256, 48), 350e6)},
    "small": {"125m": Shape(4, 256, 64, 16, 64, (64, 12), 125e6),
              "350m": Shape(6, 384, 64, 24, 64, (96, 18), 350e6)},
    "smoke": {"125m": Shape(2, 64, 16, 8, 16, (16, 1), 125e6),
              "350m": Shape(2, 96, 16, 12, 16, (24, 2), 350e6)},
    "cpu": {"125m": Shape(2, 64, 16, 8, 64, (16, 2), 125e6)},  # one size: three seeds of 15 runs fit the 2 cores
}  # fmt: skip

SIZES = ("125m", "350m")


def sizes(scale: str) -> tuple[str, ...]:
    """The sizes trained at `scale` (SIZES, as far as the scale's SHAPES go)."""
    return tuple(size for size in SIZES if size in SHAPES[scale])


def overrides(arch: str, shape: Shape, seq_len: int) -> dict[str, Any]:
    """The config fields that give `arch` this size (see the module docstring's table)."""
    depth, d = {"n_layer": shape.n_layer, "max_seq_len": seq_len}, shape.d_model
    if arch == "transformer":  # in the standard parametrisation, as every other row: each is swept, none muP-tuned
        return {**depth, "d_model": d, "n_head": d // shape.head_dim, "d_ff": 4 * d, **STANDARD_PARAMETRISATION}
    if arch == "tokenformer":
        n = 3 * d // 4
        return {**depth, "d_model": d, "n_head": d // shape.head_dim, "qkv_tokens": n, "proj_tokens": n,
                "ffn_tokens": 4 * n}  # fmt: skip
    if arch == "rmt":
        return {**depth, "rank": d // shape.head_dim, "d_value": shape.head_dim, "d_key": shape.rmt_d_key,
                "d_ff": 6 * d}  # fmt: skip
    d_token, d_byte = shape.mot_mixin if arch == "mot" else (d, d)
    layers = shape.n_layer  # the speedrun drops attention in layer 7 of 16: one layer, when the model is that deep
    return {**depth, "d_model": d, "n_head": d // shape.mot_head_dim, "head_dim": shape.mot_head_dim,
            "value_embeddings": min(3, layers // 2), "attention_free_layers": (layers // 2 - 1,) if layers >= 8 else (),
            "d_token": d_token, "d_byte": d_byte}  # fmt: skip


def budget(scale: str, size: str, lr: float) -> Budget:
    """20 tokens per non-embedding parameter of the size at paper scale; fixed short budgets below it."""
    if scale == "paper":
        batch, seq = 512, 1024
        steps = round(20 * SHAPES[scale][size].target / (batch * seq))
        return rmt_setup.schedule(steps, batch, seq, lr, micro_batch=8)
    if scale == "smoke":
        return dataclasses.replace(rmt_setup.schedule(8, 4, 64, lr), val_windows=8)
    if scale == "cpu":  # 0.19 passes of the Wikipedia excerpt
        return dataclasses.replace(rmt_setup.schedule(200, 16, 128, lr), val_every=40, val_windows=64)
    small = dataclasses.replace(rmt_setup.schedule(300, 32, 1024, lr), val_windows=128)  # a fraction of training
    return within_epochs(small, rmt_setup.corpus(scale), "gpt2")


def sweep(scale: str, arch: str) -> tuple[float, ...]:
    factor = {"smoke": SMOKE_LR_FACTOR, "cpu": CPU_LR_FACTOR}.get(scale, 1)
    return tuple(round(lr * factor, 12) for lr in LR_GRID[arch])


def make_run(scale: str, arch: str, size: str, lr: float) -> Run:
    b = budget(scale, size, lr)
    shape = {**overrides(arch, SHAPES[scale][size], b.seq_len), **vocabulary_at(scale),
             **(byte_table_at(scale) if arch == "mot" else {})}  # fmt: skip
    return Run(f"{arch}_{size}_lr{lr:g}", FAMILIES[arch], b, shape, corpus=rmt_setup.corpus(scale),
               tokenizer=tokenizer_at(scale, "gpt2"), lm=LM, lr_sweep=True)  # fmt: skip


def runs(scale: str) -> list[Run]:
    return [make_run(scale, a, s, lr) for s in sizes(scale) for a in ARCHITECTURES for lr in sweep(scale, a)]


def matched(scale: str, size: str) -> dict[str, int]:
    """Non-embedding parameters of every architecture at this size."""
    return {arch: non_embedding_params(make_run(scale, arch, size, 1.0).config) for arch in ARCHITECTURES}
