"""The residual-path variants of the RMT paper's Table 10 (Highway, depth-wise LSTM, hierarchical aggregation).

Its presets are at GPT2-small shapes (12 x 768, 12 heads, D_FF 3072).

Each is the RMT paper's Transformer (`transformer_rmt_160m`: learned positions, untied, no biases) with its residual
path rewired. The papers' exact layer designs are not in the material this suite was built from; these follow
their published descriptions and are sized to the parameter counts of the RMT paper's Table 10:

* Highway Transformer (Chai et al. 2020): a self-dependency unit beside each sublayer,
  SDU(u) = tanh(u W_t) * sigmoid(u W_g), added to the residual with the sublayer's output. 191M.
* Depth-wise LSTM (Xu et al. 2024): an LSTM over depth replaces the residual connections and absorbs the FFN: from
  the attention output a and the previous hidden state h, gates i, f, o = sigmoid(W [a; h]) and the candidate
  W2 GELU(W1 [a; h]) (hidden 4D); c = f * c + i * candidate, h = o * tanh(c). 233M.
* Hierarchical layer aggregation (Dou et al. 2018): the 12 layers form 3 stages of 4; stage outputs are merged by
  aggregation nodes LayerNorm(W [left; right]) in a chain, the last node feeding the final norm. 165M.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import torch
from torch import Tensor, nn

from scaling_axes.modules.architectures.layers import (
    SMOKE_SHAPE,
    PreNormBlock,
    RotaryEmbedding,
    decoder_lookup_params,
    layer_norm,
)
from scaling_axes.modules.architectures.transformer import (
    MLP,
    STANDARD_PARAMETRISATION,
    Transformer,
    TransformerConfig,
    make_attention,
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


class SelfDependencyUnit(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.transform, self.gate = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, u: Tensor) -> Tensor:
        return torch.tanh(self.transform(u)) * torch.sigmoid(self.gate(u))


class HighwayBlock(PreNormBlock):
    def __init__(self, attn: nn.Module, ffn: nn.Module, config: TransformerConfig) -> None:
        super().__init__(attn, ffn, config)
        self.attn_sdu, self.ffn_sdu = SelfDependencyUnit(config.d_model), SelfDependencyUnit(config.d_model)

    def forward(self, x: Tensor) -> Tensor:
        u = self.attn_norm(x)
        x = x + self.attn(u) + self.attn_sdu(u)
        u = self.ffn_norm(x)
        return x + self.ffn(u) + self.ffn_sdu(u)


class DepthLSTMBlock(nn.Module):
    """One step of the depth-wise LSTM: attention, then gates and an FFN candidate over [attention; hidden]."""

    def __init__(self, attn: nn.Module, config: TransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.attn_norm, self.attn = layer_norm(d, True, config.norm_eps, config.norm_bias), attn
        self.gates = nn.Linear(2 * d, 3 * d, bias=False)
        self.candidate = nn.Sequential(
            nn.Linear(2 * d, config.ffn_dim, bias=False), nn.GELU(), nn.Linear(config.ffn_dim, d, bias=False)
        )

    def forward(self, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        hidden, cell = state
        both = torch.cat((self.attn(self.attn_norm(hidden)), hidden), dim=-1)
        i, f, o = torch.sigmoid(self.gates(both)).chunk(3, dim=-1)
        cell = f * cell + i * self.candidate(both)
        return o * torch.tanh(cell), cell


class TransformerVariant(Transformer):
    def __init__(self, config: VariantConfig) -> None:
        self.variant = config.variant
        super().__init__(config)
        if config.variant == "layer_aggregation":
            d = config.d_model
            self.aggregators = nn.ModuleList(
                nn.Sequential(nn.Linear(2 * d, d, bias=False), layer_norm(d, True, config.norm_eps, config.norm_bias))
                for _ in range(config.aggregation_stages - 1)
            )
            self.reset_parameters()

    def make_block(self, layer: int, rotary: RotaryEmbedding | None) -> nn.Module:
        attn = make_attention(self.config, layer, rotary)
        if self.variant == "depth_lstm":
            return DepthLSTMBlock(attn, self.config)
        block = HighwayBlock if self.variant == "highway" else PreNormBlock
        return block(attn, MLP(self.config.d_model, self.config.ffn_dim, self.config.bias), self.config)

    def run_blocks(self, x: Tensor) -> Tensor:
        if self.variant == "depth_lstm":
            state = (x, torch.zeros_like(x))
            for block in self.blocks:
                state = block(state)
            return state[0]
        if self.variant == "highway":
            return super().run_blocks(x)
        stage_length = len(self.blocks) // (len(self.aggregators) + 1)
        stages = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if (i + 1) % stage_length == 0:
                stages.append(x)
        merged = stages[0]
        for aggregator, stage in zip(self.aggregators, stages[1:], strict=True):
            merged = aggregator(torch.cat((merged, stage), dim=-1))
        return merged


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
        build=TransformerVariant,
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
