"""The cross-architecture comparison's arms, one typed record each: the preset whose shape the recipe overrides, the
fields that give it each size, the fields it sets beyond its shape on purpose (its parametrisation), what a scale
adds, its learning-rate grid at paper scale, and the claims it makes against another arm.

Adding an arm is adding a record here (with its architecture's file, registered). `check` refuses a record with a
field missing or a shape that does not fit its preset (a preset of another family), in one line that names the
record and the field, as soon as the experiment's runs are listed (`run cross_architecture --list`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from scaling_axes.experiments.cross_architecture.recipes import Recipe, Shape
from scaling_axes.harness.scales import Scale
from scaling_axes.modules import get_config
from scaling_axes.modules.architectures.transformer import STANDARD_PARAMETRISATION

CLAIM_KINDS = ("lower_loss", "as_good_as")  # `claims.verdicts.lower_loss`, `as_good_as` (the plan's tolerance)


@dataclasses.dataclass(frozen=True)
class Versus:
    """A claim an arm makes against arm `against`: `kind` one of CLAIM_KINDS (lower validation loss at equal tokens,
    or as good as: within the tolerance the scale's plan declares), its arms matched on `matched` parameters
    ("total", "non_embedding") or not held equal (None). `statement` may name {numerics}, the recipe's Tokenformer
    numerics."""

    kind: str
    against: str
    statement: str
    matched: str | None = None


def no_fields(scale: Scale, recipe: Recipe) -> dict[str, Any]:
    return {}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Arm:
    """One architecture of the comparison (its runs are `<name>_<size>`): `preset`, the registered preset its shape
    overrides; `shape(size's Shape, seq_len)`, the fields that give it a size; `parametrisation`, the fields beyond
    its shape it sets on purpose; `scale_fields(scale, recipe)`, what a scale adds (a byte table, numerics);
    `lr_grid`, its learning rates at paper scale (scaled by the recipe); `claims`, what it claims against others."""

    name: str
    preset: str = ""
    shape: Callable[[Shape, int], dict[str, Any]] | None = None
    lr_grid: tuple[float, ...] = ()
    parametrisation: tuple[str, ...] = ()
    scale_fields: Callable[[Scale, Recipe], dict[str, Any]] = no_fields
    claims: tuple[Versus, ...] = ()


def transformer_shape(shape: Shape, seq_len: int) -> dict[str, Any]:
    """In the standard parametrisation, as every other row: each is swept, none muP-tuned."""
    d = shape.d_model
    return {
        "n_layer": shape.n_layer,
        "max_seq_len": seq_len,
        "d_model": d,
        "n_head": d // shape.head_dim,
        "d_ff": 4 * d,
        **STANDARD_PARAMETRISATION,
    }


def tokenformer_shape(shape: Shape, seq_len: int) -> dict[str, Any]:
    """Its head untied, as the Transformer's: equal total parameters too, within 3%."""
    d, n = shape.d_model, 3 * shape.d_model // 4
    return {
        "n_layer": shape.n_layer,
        "max_seq_len": seq_len,
        "d_model": d,
        "n_head": d // shape.head_dim,
        "qkv_tokens": n,
        "proj_tokens": n,
        "ffn_tokens": 4 * n,
        "tie_embeddings": False,
    }


def rmt_shape(shape: Shape, seq_len: int) -> dict[str, Any]:
    d = shape.d_model
    return {
        "n_layer": shape.n_layer,
        "max_seq_len": seq_len,
        "rank": d // shape.head_dim,
        "d_value": shape.head_dim,
        "d_key": shape.rmt_d_key,
        "d_ff": 6 * d,
    }


def mot_shape(mixin: bool) -> Callable[[Shape, int], dict[str, Any]]:
    """The MoT on its modded-nanogpt backbone, with the byte mixin's widths or without (its backbone alone). The
    speedrun drops attention in layer 7 of 16: one layer, when the model is that deep."""

    def fields(shape: Shape, seq_len: int) -> dict[str, Any]:
        d, layers = shape.d_model, shape.n_layer
        d_token, d_byte = shape.mot_mixin if mixin else (d, d)
        return {
            "n_layer": layers,
            "max_seq_len": seq_len,
            "d_model": d,
            "n_head": d // shape.mot_head_dim,
            "head_dim": shape.mot_head_dim,
            "value_embeddings": min(3, layers // 2),
            "attention_free_layers": (layers // 2 - 1,) if layers >= 8 else (),
            "d_token": d_token,
            "d_byte": d_byte,
        }

    return fields


ARMS = (
    Arm(
        name="transformer",
        preset="transformer_rmt_405m",
        shape=transformer_shape,
        lr_grid=(3e-4, 1e-3, 3e-3),
        parametrisation=tuple(STANDARD_PARAMETRISATION),
    ),
    Arm(
        name="tokenformer",
        preset="tokenformer_150m",
        shape=tokenformer_shape,
        lr_grid=(3e-4, 1e-3, 3e-3),
        parametrisation=("tie_embeddings", "numerics"),
        scale_fields=lambda scale, recipe: {"numerics": recipe.tokenformer_numerics},
        claims=(
            Versus(
                "as_good_as",
                "transformer",
                "Tokenformer is as good as the Transformer at its parameters "
                "(Tokenformer paper; recipe: the {numerics} code's numerics, head untied)",
                "total",
            ),
        ),
    ),
    Arm(
        name="rmt",
        preset="rmt_305m",
        shape=rmt_shape,
        lr_grid=(1e-3, 3e-3, 1e-2),
        claims=(
            Versus(
                "lower_loss",
                "transformer",
                "the RMT reaches a lower loss than the Transformer (RMT paper)",
                "non_embedding",
            ),
        ),
    ),
    Arm(
        name="mot",
        preset="mot_concat_noop_256_48",
        shape=mot_shape(True),
        lr_grid=(3e-4, 1e-3, 3e-3),
        scale_fields=lambda scale, recipe: scale.byte_table(),
        claims=(Versus("lower_loss", "mot_backbone", "the byte mixin lowers its backbone's loss (MoT)"),),
    ),
    Arm(name="mot_backbone", preset="mot_noop_noop_1024", shape=mot_shape(False), lr_grid=(3e-4, 1e-3, 3e-3)),
)
ARM = {arm.name: arm for arm in ARMS}


def check(arms: tuple[Arm, ...], shapes: dict[str, Shape], seq_len: int) -> None:
    """Every arm complete and fitting its preset at each of `shapes`, and every claim naming an arm: else a
    ValueError of one line naming the arm and its field."""
    names = {arm.name for arm in arms}
    for arm in arms:
        where = f"cross-architecture arm {arm.name!r} (experiments/cross_architecture/arms.py)"
        for field, missing in (("preset", not arm.preset), ("shape", arm.shape is None), ("lr_grid", not arm.lr_grid)):
            if missing:
                raise ValueError(f"{where}: no {field}; every arm names a preset, a shape function and an lr_grid")
        if any(not isinstance(lr, float) or lr <= 0 for lr in arm.lr_grid):
            raise ValueError(f"{where}: lr_grid {arm.lr_grid} is not a tuple of positive rates")
        for size, shape in shapes.items():
            try:
                get_config(arm.preset, **arm.shape(shape, seq_len))
            except (KeyError, TypeError, ValueError) as error:
                why = str(error).partition("; valid fields")[0]
                raise ValueError(
                    f"{where}: its shape at {size} does not fit preset {arm.preset!r} (a preset of "
                    f"another family?): {why}"
                ) from None
        for claim in arm.claims:
            if claim.kind not in CLAIM_KINDS or claim.against not in names - {arm.name}:
                raise ValueError(
                    f"{where}: claim {claim.kind!r} against {claim.against!r}: kinds are "
                    f"{', '.join(CLAIM_KINDS)}, against another arm of {sorted(names)}"
                )
