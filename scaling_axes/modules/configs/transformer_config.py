"""The standard decoder-only Transformer baseline (GPT-2 / GPT-NeoX family), pre-LN.

Presets are the Transformer rows of Tokenformer's progressive-scaling comparison (paper Fig. 3, App. D/E): the
TPU runs with the GPT-NeoX tokenizer (vocab 50,304), no positional encoding and, in every size, logits computed
through the embedding (tied). App. E grows the 354M into the 757M in width *and* heads, so the heads stay 64 wide and
their count follows d (which Net2Net can also grow exactly). The material this suite is built from gives no more of
the shapes than that, so the widths are the standard ones for the named sizes (counted by `tests/test_models.py`,
biases and norms included):

==================  ======  ======  =====  ======  =====================
preset              layers  d       heads  tied    parameters
==================  ======  ======  =====  ======  =====================
transformer_124m    12      768     12     yes     123,689,472 (GPT-2 small)
transformer_354m    24      1024    16     yes     353,822,720 (GPT-2 medium)
transformer_757m    24      1536    24     yes     757,226,496 (354M widened in d and heads: App. E)
transformer_1_4b    24      2048    32     yes     1,311,625,216 (tied, as App. D/E; 6.3% below tokenformer_1_4b)
==================  ======  ======  =====  ======  =====================

The `transformer_rmt_*` presets are the RMT paper's Table 8 baselines (see `_RMT_PAPER_TRANSFORMER`), muP-parametrised
with the paper's tuned values (App. C.2.1).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from scaling_axes.modules.configs.decoder_config import (
    SMOKE_SHAPE,
    DecoderConfig,
    decoder_flops,
    decoder_lookup_params,
    decoder_params,
)
from scaling_axes.modules.registry import Architecture, Example, register


@dataclasses.dataclass(frozen=True)
class TransformerConfig(DecoderConfig):
    """Baseline Transformer. `d_ff` = 0 means 4 * d_model; `bias` adds biases to every Linear; `head_dim` = 0 means
    d_model / n_head, and otherwise fixes the attention width n_head * head_dim whatever d_model (RMT Fig. 1 varies
    the residual size D alone).

    The RMT paper's stability tweaks (from Mistral's GPT-2 runs): `attention_fp32` computes attention in fp32 (the
    paper's "attention upcasting"; off in every preset: SDPA's flash/cuDNN kernels in bf16 already accumulate QK^T
    and keep the softmax statistics in fp32, and the fp32 path held the RMT-paper Transformer at 10-11% MFU at
    8 x 2048 tokens on an H100) and `inverse_layer_scaling` divides the logits of layer i (0-based) by i + 1.

    `mup`: the maximal-update parametrisation as the RMT code implements it (reference rmt.md section 2, "Table 8 of
    the muP paper"), relative to a proxy of width `mup_base_width`, head size `mup_base_head_dim` and FFN
    `mup_base_ffn` (the paper's tuning proxy: D 256, heads of 32, D_FF 1024). Embeddings N(0, init_std), times
    `input_multiplier` in the forward; hidden matrices N(0, init_std^2 / fan_in) (residual outputs also / sqrt(2L),
    as the code's Transformer W2) with Adam lr / width ratio (`lr_scales`, ratio = fan_in / the proxy's); the
    unembedding zero, its logits times `output_multiplier` / (d_model / base width); attention logits scaled by
    `attention_multiplier` sqrt(base head) / d_head (1/d attention).

    `init`: "gpt2" (N(0, init_std), residual outputs / sqrt(2L); muP's rules when `mup`), or "lecun" (the RMT paper's
    Table 10, App. C.4: every matrix N(0, 1 / fan_in), embeddings N(0, 1), nothing depth-scaled).
    """

    d_ff: int = 0
    head_dim: int = 0
    bias: bool = True
    attention_fp32: bool = False
    inverse_layer_scaling: bool = False
    init: Literal["gpt2", "lecun"] = "gpt2"
    mup: bool = False
    mup_base_width: int = 256
    mup_base_head_dim: int = 32
    mup_base_ffn: int = 1024
    input_multiplier: float = 1.0
    attention_multiplier: float = 1.0
    output_multiplier: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init not in ("gpt2", "lecun"):
            raise ValueError(f"init={self.init!r}; allowed: 'gpt2', 'lecun'")
        if self.init == "lecun" and self.mup:
            raise ValueError("init='lecun' is the untuned recipe; it does not combine with mup=True")

    @property
    def ffn_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_head


_TOKENFORMER_PAPER_TRANSFORMER = TransformerConfig(position="none", max_seq_len=1024)
# RMT paper, Table 8 and App. C.1: GPT-2 tokenizer, learned positions over 512 tokens, untied, no biases (the
# LayerNorms' included, as the RMT's), pre-LN with eps 1e-6 and inverse layer scaling (z-loss 1e-4 is the
# LanguageModel's); its attention upcasting is `attention_fp32=True` (see TransformerConfig).
# muP with the values tuned for it (App. C.2.1): init std 0.15, alpha_in 9.76, alpha_attn 0.25, alpha_out 5.52.
_RMT_PAPER_TRANSFORMER = TransformerConfig(
    vocab_size=50257,
    max_seq_len=512,
    position="learned",
    tie_embeddings=False,
    bias=False,
    norm_bias=False,
    norm_eps=1e-6,
    inverse_layer_scaling=True,
    mup=True,
    init_std=0.15,
    input_multiplier=9.76,
    attention_multiplier=0.25,
    output_multiplier=5.52,
)


def mup_at_own_width(d_model: int, d_head: int, ffn: int) -> dict:
    """muP's rules with every base dimension the model's own and every multiplier 1, init 0.02: what the RMT code's
    defaults are for the RMT (reference rmt.md section 2), for a Transformer (issue 83's matched comparisons)."""
    multipliers = {"input_multiplier": 1.0, "attention_multiplier": 1.0, "output_multiplier": 1.0}
    return {
        "mup": True,
        "init_std": 0.02,
        **multipliers,
        "mup_base_width": d_model,
        "mup_base_head_dim": d_head,
        "mup_base_ffn": ffn,
    }


# The RMT paper's "standard (untuned) hyperparameters" (App. C.4, Table 10): its Transformer without muP
STANDARD_PARAMETRISATION = {
    "mup": False,
    "init_std": 0.02,
    "input_multiplier": 1.0,
    "attention_multiplier": 1.0,
    "output_multiplier": 1.0,
}


def _block_weights(c: TransformerConfig) -> tuple[int, int, int]:
    """Weights of one block's Q/K/V, output projection and MLP (attention width n_head x d_head)."""
    width = c.n_head * c.d_head
    return 3 * c.d_model * width, width * c.d_model, 2 * c.d_model * c.ffn_dim


def transformer_params(c: TransformerConfig) -> dict[str, int]:
    qkv, out, ffn = _block_weights(c)
    bias, width = int(c.bias), c.n_head * c.d_head
    return decoder_params(c, qkv + 3 * width * bias, out + c.d_model * bias, ffn + (c.ffn_dim + c.d_model) * bias)


def transformer_flops(c: TransformerConfig, seq_len: int) -> dict[str, int]:
    return decoder_flops(c, seq_len, *_block_weights(c))


ARCHITECTURE = Architecture(
    params=transformer_params,
    flops=transformer_flops,
    lookup_params=decoder_lookup_params,
    grow="scaling_axes.modules.growth.net2net:grow_transformer",
    growing_fields=("d_model", "n_head", "d_ff", "norm_eps", "tie_embeddings"),
    examples={
        "transformer_nope": Example("transformer_124m", SMOKE_SHAPE),
        "transformer_rope_untied": Example(
            "transformer_124m", {**SMOKE_SHAPE, "position": "rope", "tie_embeddings": False}
        ),
        "transformer_rmt_paper": Example("transformer_rmt_49m", SMOKE_SHAPE),  # learned positions, muP, no biases
    },
)

register(
    ARCHITECTURE,
    {
        "transformer_124m": _TOKENFORMER_PAPER_TRANSFORMER,
        "transformer_354m": dataclasses.replace(_TOKENFORMER_PAPER_TRANSFORMER, n_layer=24, d_model=1024, n_head=16),
        "transformer_757m": dataclasses.replace(_TOKENFORMER_PAPER_TRANSFORMER, n_layer=24, d_model=1536, n_head=24),
        "transformer_1_4b": dataclasses.replace(_TOKENFORMER_PAPER_TRANSFORMER, n_layer=24, d_model=2048, n_head=32),
        "transformer_rmt_49m": dataclasses.replace(_RMT_PAPER_TRANSFORMER, n_layer=6, d_model=384, n_head=12),
        "transformer_rmt_160m": dataclasses.replace(_RMT_PAPER_TRANSFORMER, n_layer=12, d_model=768, n_head=12),
        "transformer_rmt_260m": dataclasses.replace(_RMT_PAPER_TRANSFORMER, n_layer=18, d_model=896, n_head=14),
        "transformer_rmt_405m": dataclasses.replace(_RMT_PAPER_TRANSFORMER, n_layer=24, d_model=1024, n_head=16),
    },
)
