"""The suite's Transformer as GPT-NeoX, which `transformers` runs natively: where its layout matches (pre-LN,
sequential residual, partial rotary or none, exact GELU, 1/sqrt(d_head) attention), its weights under GPT-NeoX's
names, with per-head interleaved QKV rows, a non-parametric norm as LayerNorm(1, 0) and absent biases as zeros."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from scaling_axes.datamodules.tokenizers import Tokenizer
from scaling_axes.modules.configs.transformer_config import TransformerConfig

NEOX_HELD = (  # the Transformer's fields GPT-NeoX holds whatever their value (`as_neox` maps them), or that change
    # only the initialisation, or that are read only under muP (refused on its own, below)
    *("vocab_size", "n_layer", "d_model", "n_head", "max_seq_len", "rotary_pct", "rope_base", "tie_embeddings"),
    *("block_norm_parametric", "final_norm_parametric", "norm_bias", "norm_eps", "d_ff", "bias", "init_std", "init"),
    *("mup_base_width", "mup_base_head_dim", "mup_base_ffn"),
    *("input_multiplier", "attention_multiplier", "output_multiplier"),
)
NEOX_REFUSED: dict[str, Callable[[Any], str | None]] = {  # the fields GPT-NeoX holds only at some values: why not
    "position": lambda c: "learned positions" if c.position == "learned" else None,
    "head_dim": lambda c: "an attention width other than d_model" if c.n_head * c.d_head != c.d_model else None,
    "attention_fp32": lambda c: "attention upcast to fp32" if c.attention_fp32 else None,
    "inverse_layer_scaling": lambda c: "inverse layer scaling" if c.inverse_layer_scaling else None,
    "mup": lambda c: "muP multipliers" if c.mup else None,
}


def neox_mismatch(config: Any) -> str | None:
    """Why GPT-NeoX cannot hold a model of `config` exactly, or None when it can: a Transformer config each of whose
    fields GPT-NeoX represents (`NEOX_HELD`, `NEOX_REFUSED`), checked field by field, so that a subclass's own
    fields (a parallel block, a variant's aggregation) are refused by name rather than exported as something
    else."""
    if not isinstance(config, TransformerConfig):
        return f"{type(config).__name__} has no native transformers architecture"
    unknown = [f.name for f in dataclasses.fields(config) if f.name not in (*NEOX_HELD, *NEOX_REFUSED)]
    if unknown:
        return f"a {type(config).__name__} with fields GPT-NeoX has no counterpart for ({', '.join(unknown)})"
    found = [why for check in NEOX_REFUSED.values() if (why := check(config))]
    return "a Transformer with " + ", ".join(found) if found else None


def as_neox(model: nn.Module, tokenizer: Tokenizer) -> nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    c = model.config
    rotary = c.rotary_pct if c.position == "rope" else 0.0  # NoPE: no dims rotated
    vocab = min(tokenizer.vocab_size, c.vocab_size)  # a vocabulary padded past the tokenizer's: its rows cut
    config = GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=c.d_model,
        num_hidden_layers=c.n_layer,
        num_attention_heads=c.n_head,
        intermediate_size=c.ffn_dim,
        hidden_act="gelu",
        max_position_embeddings=c.max_seq_len,
        layer_norm_eps=c.norm_eps,
        tie_word_embeddings=c.tie_embeddings,
        use_parallel_residual=False,
        attention_bias=c.bias,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_base, "partial_rotary_factor": rotary},
        bos_token_id=tokenizer.eot_id,
        eos_token_id=tokenizer.eot_id,
    )
    config.rotary_pct, config.rotary_emb_base = rotary, c.rope_base  # what transformers 4.x reads (else 0.25)
    hf = GPTNeoXForCausalLM(config)
    missing, unexpected = hf.load_state_dict(neox_state(model, vocab), strict=False)
    buffers = {name for name, _ in hf.named_buffers()}
    if unexpected or set(missing) - buffers:
        raise RuntimeError(
            f"GPT-NeoX layout mismatch: missing {sorted(set(missing) - buffers)}, unexpected {sorted(unexpected)}"
        )
    return hf


def neox_state(model: nn.Module, vocab: int) -> dict[str, Tensor]:
    """The Transformer's weights under GPT-NeoX's names: QKV rows from [Q; K; V] to per-head [q_h; k_h; v_h]; the
    embedding and unembedding cut to the tokenizer's `vocab` rows."""
    c, ours = model.config, model.state_dict()
    heads, width = c.n_head, c.d_model

    def per_head(t: Tensor) -> Tensor:
        return t.reshape(3, heads, c.d_head, *t.shape[1:]).transpose(0, 1).reshape(3 * width, *t.shape[1:])

    def linear(theirs: str, name: str, size: int, interleave: bool = False) -> dict[str, Tensor]:
        weight, bias = ours[f"{name}.weight"], ours.get(f"{name}.bias", torch.zeros(size))
        return {
            f"{theirs}.weight": per_head(weight) if interleave else weight,
            f"{theirs}.bias": per_head(bias) if interleave else bias,
        }

    def norm(theirs: str, name: str) -> dict[str, Tensor]:
        return {
            f"{theirs}.weight": ours.get(f"{name}.weight", torch.ones(width)),
            f"{theirs}.bias": ours.get(f"{name}.bias", torch.zeros(width)),
        }

    state = {
        "gpt_neox.embed_in.weight": ours["token_embedding.weight"][:vocab],
        "lm_head.weight": ours.get("lm_head.weight", ours["token_embedding.weight"])[:vocab],
        **norm("gpt_neox.final_layer_norm", "final_norm"),
    }
    for i in range(c.n_layer):
        block, layer = f"blocks.{i}", f"gpt_neox.layers.{i}"
        state |= norm(f"{layer}.input_layernorm", f"{block}.attn_norm")
        state |= norm(f"{layer}.post_attention_layernorm", f"{block}.ffn_norm")
        state |= linear(f"{layer}.attention.query_key_value", f"{block}.attn.qkv", 3 * width, interleave=True)
        state |= linear(f"{layer}.attention.dense", f"{block}.attn.out", width)
        state |= linear(f"{layer}.mlp.dense_h_to_4h", f"{block}.ffn.0", c.ffn_dim)
        state |= linear(f"{layer}.mlp.dense_4h_to_h", f"{block}.ffn.2", width)
    if not c.bias:  # GPT-NeoX has no attention biases then
        state = {k: v for k, v in state.items() if not (k.endswith(".bias") and ".attention." in k)}
    return state
