"""The cross-architecture comparison's arms, one typed record each: the preset whose shape the recipe overrides, the
fields that give it each size, the fields it sets beyond its shape on purpose (its parametrisation), what a scale
adds, its learning-rate grid at paper scale, and the claims it makes against another arm.

Adding an arm is adding a record here (with its architecture's file, registered): nothing else names the arms.
A record takes any keyword, so that a mistake in one is not a traceback at import: `check` refuses, as soon as the
experiment's runs are listed (`run cross_architecture --list`), a misspelt field, a missing one, and any value of
the wrong type or outside what is allowed (a preset not registered, a parametrisation field its preset lacks, a
claim of an unknown kind or against no other arm, a shape that does not fit its preset), each in one line of at
most 200 characters naming the record, the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from scaling_axes.experiments.cross_architecture.recipes import Recipe, Shape
from scaling_axes.harness.scales import Scale
from scaling_axes.modules import get_config, list_models
from scaling_axes.modules.configs.transformer_config import STANDARD_PARAMETRISATION, mup_at_own_width

CLAIM_KINDS = ("lower_loss", "as_good_as")  # `claims.verdicts.lower_loss`, `as_good_as` (the plan's tolerance)


MATCHES = (None, "total", "non_embedding")  # what a claim's arms are matched on (`claims.verdicts.parameter_match`)


@dataclasses.dataclass(frozen=True, init=False)
class Versus:
    """A claim an arm makes against arm `against`: `kind` one of CLAIM_KINDS (lower validation loss at equal tokens,
    or as good as: within the tolerance the scale's plan declares), its arms matched on `matched` parameters (one
    of MATCHES: "total", "non_embedding", or None: not held equal). `statement` may name {numerics}, the recipe's
    Tokenformer numerics."""

    kind: str
    against: str
    statement: str
    matched: str | None = None
    differs: tuple[str, ...] = ()  # recipe fields its arms differ in besides the architecture (`Comparison.differs`)
    why: str = ""  # and why
    unknown: tuple[str, ...] = ()  # keywords that name no field: a misspelling `check` names

    def __init__(self, *values: Any, **fields: Any) -> None:
        _take(self, values, fields)


def no_fields(scale: Scale, recipe: Recipe) -> dict[str, Any]:
    return {}


@dataclasses.dataclass(frozen=True, init=False)
class Arm:
    """One architecture of the comparison (its runs are `<name>_<size>`): `preset`, the registered preset its shape
    overrides; `shape(size's Shape, seq_len)`, the fields that give it a size; `parametrisation`, the fields beyond
    its shape it sets on purpose; `scale_fields(scale, recipe)`, what a scale adds (a byte table, numerics);
    `lr_grid`, its learning rates at paper scale (scaled by the recipe), or the factors on its optimiser's rates
    that `optimiser` names as `rate_option`; `optimiser`, LanguageModel options of its own (every arm of a claim
    shares them); `claims`, what it claims against others; `control_of`, the arm whose positive control it is."""

    name: str = ""
    preset: str = ""
    shape: Callable[[Shape, int], dict[str, Any]] | None = None
    lr_grid: tuple[float, ...] = ()
    optimiser: dict[str, Any] = dataclasses.field(default_factory=dict)
    parametrisation: tuple[str, ...] = ()
    scale_fields: Callable[[Scale, Recipe], dict[str, Any]] = no_fields
    claims: tuple[Versus, ...] = ()
    control_of: str | None = None  # a positive control's arm: the arm it is the control of (never matched or ranked)
    unknown: tuple[str, ...] = ()  # keywords that name no field: a misspelling `check` names

    def __init__(self, **fields: Any) -> None:
        _take(self, (), fields)


def _take(record: Any, values: tuple[Any, ...], fields: dict[str, Any]) -> None:
    """A record's fields from `values` (in field order) and `fields`, a missing one None or its default; keywords
    that name no field kept in `unknown`, for `check` to name in one line."""
    carried = fields.pop("unknown", ())  # `dataclasses.replace` passes the record's own on
    declared = [f for f in dataclasses.fields(record) if f.name != "unknown"]
    extra = {f"value {i + 1} of {len(values)} given in order": v for i, v in enumerate(values) if i >= len(declared)}
    given = {**dict(zip((f.name for f in declared), values, strict=False)), **fields, **extra}
    for f in declared:
        default = None if f.default is dataclasses.MISSING else f.default
        default = default if f.default_factory is dataclasses.MISSING else f.default_factory()
        object.__setattr__(record, f.name, given.pop(f.name, default))
    object.__setattr__(record, "unknown", (*carried, *sorted(given)))


def transformer_shape(shape: Shape, seq_len: int) -> dict[str, Any]:
    """The RMT paper's GPT-2 baseline at L x D, FFN 4D, heads of 64, in the standard parametrisation as every other
    arm: each is swept, none muP-tuned."""
    d = shape.d_model
    return {
        "n_layer": shape.n_layer,
        "max_seq_len": seq_len,
        "d_model": d,
        "n_head": d // shape.head_dim,
        "d_ff": 4 * d,
        **STANDARD_PARAMETRISATION,
    }


def mup_transformer_shape(shape: Shape, seq_len: int) -> dict[str, Any]:
    """The Transformer under the RMT code's rules: muP at its own width, every multiplier 1, init 0.02 (the RMT's
    comparator: the same parametrisation as the RMT's defaults, issue 83)."""
    fields = transformer_shape(shape, seq_len)
    return {**fields, **mup_at_own_width(shape.d_model, shape.head_dim, fields["d_ff"])}


def narrow_transformer_shape(shape: Shape, seq_len: int) -> dict[str, Any]:
    """The Transformer at three quarters of the size's width in whole heads of the same size: the positive
    control's arm, a difference the comparison's recipe must resolve (issue 83)."""
    heads = 3 * shape.d_model // 4 // shape.head_dim
    return transformer_shape(dataclasses.replace(shape, d_model=heads * shape.head_dim), seq_len)


def tokenformer_shape(shape: Shape, seq_len: int) -> dict[str, Any]:
    """The Pile Tokenformer (RoPE on 25%) at L x D, n = 3D/4 parameter tokens for Q/K/V/O and 3D for the FFN:
    2D(3n + n + 4n) = 12D^2, the Transformer's count; its head untied, as the Transformer's: equal totals too."""
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
    """The RMT (residual D_k x D_v, learned positions) at L layers, R = D/64 heads of D_v = 64, D_k as the paper's
    134M/305M; an FFN of 6D, since the keys replace the 4D^2 of Q/K/V/O with a few thousand."""
    d = shape.d_model
    return {
        "n_layer": shape.n_layer,
        "max_seq_len": seq_len,
        "rank": d // shape.head_dim,
        "d_value": shape.head_dim,
        "d_key": shape.rmt_d_key,
        "d_ff": 6 * d,
        "zero_init_unembedding": True,  # the RMT code's (reference rmt.md section 8, row 5)
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


MUON = {"optimizer": "muon", "rate_option": "group_lr_scale"}  # the speedrun's groups, its rates x the grid


ARMS = (
    Arm(
        name="transformer",
        preset="transformer_rmt_405m",
        shape=transformer_shape,
        lr_grid=(3e-4, 1e-3, 3e-3),
        parametrisation=tuple(STANDARD_PARAMETRISATION),
        claims=(
            Versus(
                "lower_loss",
                "transformer_narrow",
                "the Transformer reaches a lower loss than at three quarters of its width (the positive control: a "
                "difference this recipe must resolve before any of its claims is judged)",
            ),
        ),
    ),
    Arm(
        name="transformer_mup",
        preset="transformer_rmt_405m",
        shape=mup_transformer_shape,
        lr_grid=(1e-3, 3e-3, 1e-2),
        parametrisation=(*STANDARD_PARAMETRISATION, "mup_base_width", "mup_base_head_dim", "mup_base_ffn"),
    ),
    Arm(
        name="transformer_narrow",
        preset="transformer_rmt_405m",
        shape=narrow_transformer_shape,
        lr_grid=(3e-4, 1e-3, 3e-3),
        parametrisation=tuple(STANDARD_PARAMETRISATION),
        control_of="transformer",
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
                differs=("parametrisation",),
                why="the Tokenformer keeps its code's numerics (below paper scale the TPU code's: embeddings N(0, 1), "
                "logits / sqrt(d), chosen by the cpu diagnosis, docs/models.md); the Transformer is GPT-2's standard",
            ),
        ),
    ),
    Arm(
        name="rmt",
        preset="rmt_305m",
        shape=rmt_shape,
        lr_grid=(1e-3, 3e-3, 1e-2),
        parametrisation=("zero_init_unembedding",),
        claims=(
            Versus(
                "lower_loss",
                "transformer_mup",
                "the RMT reaches a lower loss than the Transformer, both under the RMT code's parametrisation (RMT "
                "paper)",
                "non_embedding",
            ),
        ),
    ),
    Arm(
        name="mot",
        preset="mot_concat_noop_256_48",
        shape=mot_shape(True),
        lr_grid=(1 / 3, 1.0, 3.0),
        optimiser=MUON,
        scale_fields=lambda scale, recipe: scale.byte_table(),
        claims=(Versus("lower_loss", "mot_backbone", "the byte mixin lowers its backbone's loss (MoT)"),),
    ),
    Arm(
        name="mot_backbone",
        preset="mot_noop_noop_1024",
        shape=mot_shape(False),
        lr_grid=(1 / 3, 1.0, 3.0),
        optimiser=MUON,
    ),
)
ARM = {arm.name: arm for arm in ARMS}


def _is_rates(value: Any) -> bool:
    return isinstance(value, tuple) and bool(value) and all(isinstance(v, float) and v > 0 for v in value)


ARM_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {  # field -> (its check, what it allows)
    "name": (lambda v: isinstance(v, str) and v.isidentifier(), "a name of letters, digits and _"),
    "preset": (lambda v: isinstance(v, str) and v in list_models(), "a registered preset (modules.list_models())"),
    "shape": (callable, "a function (Shape, seq_len) -> config fields"),
    "lr_grid": (_is_rates, "a tuple of positive floats, e.g. (3e-4, 1e-3, 3e-3)"),
    "optimiser": (
        lambda v: isinstance(v, dict) and set(v) <= {"optimizer", "rate_option"},
        "a dict of optimizer and rate_option, e.g. MUON",
    ),
    "parametrisation": (
        lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
        "a tuple of field names",
    ),
    "scale_fields": (callable, "a function (Scale, Recipe) -> config fields"),
    "claims": (lambda v: isinstance(v, tuple) and all(isinstance(x, Versus) for x in v), "a tuple of Versus records"),
    "control_of": (lambda v: v is None or isinstance(v, str), "None, or the name of the arm it is the control of"),
}
VERSUS_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "kind": (lambda v: v in CLAIM_KINDS, f"one of {', '.join(CLAIM_KINDS)}"),
    "against": (lambda v: isinstance(v, str), "another arm's name"),
    "statement": (lambda v: isinstance(v, str) and bool(v), "the claim in words"),
    "matched": (lambda v: v in MATCHES, "None, 'total' or 'non_embedding'"),
    "differs": (lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v), "a tuple of recipe fields"),
    "why": (lambda v: isinstance(v, str), "why its arms differ in them"),
}


def check(arms: tuple[Arm, ...], shapes: dict[str, Shape], seq_len: int) -> None:
    """Every arm's every field of its type and allowed value, its shape fitting its preset at each of `shapes`,
    and every claim against another arm: else a ValueError of one line naming the arm and the field."""
    names = [arm.name for arm in arms]
    for arm in arms:
        where = f"cross-architecture arm {_short(arm.name)} (experiments/cross_architecture/arms.py)"
        _fields(arm, ARM_FIELDS, where)
        if (duplicate := names.count(arm.name) > 1) or not set(arm.parametrisation) <= _config_fields(arm.preset):
            what = "its name is another arm's" if duplicate else f"parametrisation {_short(arm.parametrisation)}"
            _refuse(f"{where}: {what}; allowed: fields of preset {arm.preset}'s config, one arm per name")
        for size, shape in shapes.items():
            try:
                get_config(arm.preset, **arm.shape(shape, seq_len))
            except (KeyError, TypeError, ValueError) as error:
                _refuse(f"{where}: shape at {size} does not fit preset {arm.preset}: {str(error).partition('; ')[0]}")
        for claim in arm.claims:
            _fields(claim, VERSUS_FIELDS, f"{where}, claim {_short(claim.kind)}")
            if claim.against not in set(names) - {arm.name}:
                _refuse(f"{where}: claim against {_short(claim.against)}; allowed: another arm, of {names}")


def _fields(record: Any, checks: dict[str, tuple[Callable[[Any], bool], str]], where: str) -> None:
    if record.unknown:
        _refuse(f"{where}: no field {record.unknown[0]!r}; fields: {', '.join(checks)}")
    for field, (valid, allowed) in checks.items():
        if not valid(getattr(record, field)):
            _refuse(f"{where}: {field} {_short(getattr(record, field))}; allowed: {allowed}")


def _config_fields(preset: str) -> set[str]:
    return {f.name for f in dataclasses.fields(get_config(preset))}


def _short(value: Any, most: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


def _refuse(message: str) -> None:
    raise ValueError(message if len(message) <= 200 else message[:197] + "...")
