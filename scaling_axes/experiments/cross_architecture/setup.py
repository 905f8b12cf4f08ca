"""The cross-architecture comparison's setup: each family's preset, the overrides that give every architecture a
size of its recipe (`recipes`: the shapes per scale that match the Transformer's non-embedding parameters,
budgets and learning-rate grids), and the sweep (the table is `table`; the training benchmark times the same
shapes)."""

from __future__ import annotations

import dataclasses
from typing import Any

from scaling_axes.experiments.cross_architecture.recipes import LR_GRID, Shape, recipe_at
from scaling_axes.experiments.rmt import setup as rmt_setup
from scaling_axes.harness.runs import Budget, Run, fitted
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import Sweep
from scaling_axes.modules.architectures.transformer import STANDARD_PARAMETRISATION
from scaling_axes.modules.flops import non_embedding_params

FAMILIES = {
    "transformer": "transformer_rmt_405m",
    "tokenformer": "tokenformer_150m",
    "rmt": "rmt_305m",
    "mot": "mot_concat_noop_256_48",
    "mot_backbone": "mot_noop_noop_1024",
}

ARCHITECTURES = tuple(FAMILIES)

LM = {"weight_decay": 0.1, "decay_embeddings": False, "z_loss": 1e-4}


SIZES = ("125m", "350m")


def sizes(scale: Scale) -> tuple[str, ...]:
    """The sizes trained at `scale` (SIZES, as far as the scale's recipe goes)."""
    return tuple(size for size in SIZES if size in recipe_at(scale).shapes)


def overrides(arch: str, shape: Shape, seq_len: int) -> dict[str, Any]:
    """The config fields that give `arch` this size (see the module docstring's table)."""
    depth, d = {"n_layer": shape.n_layer, "max_seq_len": seq_len}, shape.d_model
    if arch == "transformer":  # in the standard parametrisation, as every other row: each is swept, none muP-tuned
        return {**depth, "d_model": d, "n_head": d // shape.head_dim, "d_ff": 4 * d, **STANDARD_PARAMETRISATION}
    if arch == "tokenformer":
        n = 3 * d // 4  # its head untied, as the Transformer's: equal total parameters too, within 3%
        return {**depth, "d_model": d, "n_head": d // shape.head_dim, "qkv_tokens": n, "proj_tokens": n,
                "ffn_tokens": 4 * n, "tie_embeddings": False}  # fmt: skip
    if arch == "rmt":
        return {**depth, "rank": d // shape.head_dim, "d_value": shape.head_dim, "d_key": shape.rmt_d_key,
                "d_ff": 6 * d}  # fmt: skip
    d_token, d_byte = shape.mot_mixin if arch == "mot" else (d, d)
    layers = shape.n_layer  # the speedrun drops attention in layer 7 of 16: one layer, when the model is that deep
    return {**depth, "d_model": d, "n_head": d // shape.mot_head_dim, "head_dim": shape.mot_head_dim,
            "value_embeddings": min(3, layers // 2), "attention_free_layers": (layers // 2 - 1,) if layers >= 8 else (),
            "d_token": d_token, "d_byte": d_byte}  # fmt: skip


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
    return tuple(round(lr * recipe_at(scale).lr_factor, 12) for lr in LR_GRID[arch])


def make_run(scale: Scale, arch: str, size: str, lr: float | None = None) -> Run:
    """`arch` at `size`, trained at the rate its sweep chooses (`lr`, where given, is only the declared one: a
    benchmark's)."""
    grid = sweep(scale, arch)
    b = budget(scale, size, grid[len(grid) // 2] if lr is None else lr)
    recipe = recipe_at(scale)
    shape = {**overrides(arch, recipe.shapes[size], b.seq_len), **scale.vocabulary(),
             **(scale.byte_table() if arch == "mot" else {}),
             **({"numerics": recipe.tokenformer_numerics} if arch == "tokenformer" else {})}  # fmt: skip
    return Run(f"{arch}_{size}", FAMILIES[arch], b, shape, corpus=rmt_setup.corpus(scale),
               tokenizer=scale.tokenizer_for("gpt2"), lm=LM, lr_sweep=True, sweep=Sweep(grid))  # fmt: skip


@fitted
def runs(scale: Scale) -> list[Run]:
    return [make_run(scale, a, s) for s in sizes(scale) for a in ARCHITECTURES]


def matched(scale: Scale, size: str) -> dict[str, int]:
    """Non-embedding parameters of every architecture at this size."""
    return {arch: non_embedding_params(make_run(scale, arch, size).config) for arch in ARCHITECTURES}
