"""The RMT paper's Table 10 residual-path variants' config and presets (`architectures/variants.py` is the model and
says what each variant is): the paper's Transformer at GPT2-small shapes (12 x 768, 12 heads, D_FF 3072) with its
standard parametrisation, and the counts of each rewiring from the config alone."""

from __future__ import annotations

import dataclasses
from typing import Literal

from scaling_axes.modules.configs.decoder_config import SMOKE_SHAPE, decoder_lookup_params
from scaling_axes.modules.configs.transformer_config import (
    STANDARD_PARAMETRISATION,
    TransformerConfig,
    transformer_flops,
    transformer_params,
)
from scaling_axes.modules.registry import Architecture, Example, get_config, register

Variant = Literal["highway", "depth_lstm", "layer_aggregation"]


@dataclasses.dataclass(frozen=True)
class VariantConfig(TransformerConfig):
    variant: Variant = "highway"
    aggregation_stages: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.variant not in ("highway", "depth_lstm", "layer_aggregation"):
            raise ValueError(f"variant={self.variant!r}; allowed: 'highway', 'depth_lstm', 'layer_aggregation'")
        if self.variant == "layer_aggregation" and self.n_layer % self.aggregation_stages:
            raise ValueError(f"n_layer={self.n_layer} does not split into {self.aggregation_stages} stages")


_GPT2_SMALL = VariantConfig(**dataclasses.asdict(get_config("transformer_rmt_160m", **STANDARD_PARAMETRISATION)))


def _base(config: VariantConfig) -> TransformerConfig:
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(TransformerConfig)}
    return TransformerConfig(**fields)


def _variant(c: VariantConfig, base: dict[str, int], flops: bool) -> dict[str, int]:
    """The Transformer's counts changed by a Table 10 variant; FLOPs are 2 per weight (per token)."""
    per_weight, d, layers = (2 if flops else 1), c.d_model, c.n_layer
    out = dict(base)
    if c.variant == "highway":
        out["other"] = per_weight * layers * 4 * d * d
    elif c.variant == "depth_lstm":  # gates 2d -> 3d; the FFN's first matrix reads 2d; one norm per block
        out["other"] = per_weight * layers * 6 * d * d
        out["ffn"] = per_weight * layers * 3 * d * c.ffn_dim
        out["norms"] = 0 if flops else (layers + 1) * d * (1 + c.norm_bias)
    else:  # aggregation nodes: 2d -> d and a LayerNorm each
        out["other"] = (c.aggregation_stages - 1) * (per_weight * 2 * d * d + (0 if flops else d * (1 + c.norm_bias)))
    return out


register(
    Architecture(
        params=lambda c: _variant(c, transformer_params(_base(c)), flops=False),
        flops=lambda c, seq_len: _variant(c, transformer_flops(_base(c), seq_len), flops=True),
        lookup_params=decoder_lookup_params,
        components=((r"^aggregators\.", "other"),),
        examples={
            "highway": Example("highway_transformer_191m", SMOKE_SHAPE),
            "highway_rope": Example(  # rotary and no muP: every field GPT-NeoX has but its own (it is not one)
                "highway_transformer_191m",
                {**SMOKE_SHAPE, "position": "rope", "mup": False, "inverse_layer_scaling": False},
            ),
            "depthwise_lstm": Example("depthwise_lstm_233m", SMOKE_SHAPE),
            "hierarchical_aggregation": Example("hierarchical_aggregation_165m", {**SMOKE_SHAPE, "n_layer": 6}),
        },
    ),
    {
        "highway_transformer_191m": dataclasses.replace(_GPT2_SMALL, variant="highway"),
        "depthwise_lstm_233m": dataclasses.replace(_GPT2_SMALL, variant="depth_lstm"),
        "hierarchical_aggregation_165m": dataclasses.replace(_GPT2_SMALL, variant="layer_aggregation"),
    },
)
