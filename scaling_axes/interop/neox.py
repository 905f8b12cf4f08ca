"""The suite's Transformer as GPT-NeoX, which `transformers` runs natively: where its layout matches (pre-LN,
sequential residual, partial rotary or none, exact GELU, 1/sqrt(d_head) attention), its weights under GPT-NeoX's
names, with per-head interleaved QKV rows, a non-parametric norm as LayerNorm(1, 0) and absent biases as zeros."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from scaling_axes.datamodules.tokenizers import Tokenizer
from scaling_axes.modules.architectures.transformer import TransformerConfig


def neox_mismatch(config: Any) -> str | None:
    """Why GPT-NeoX cannot hold a model of `config` exactly, or None when it can."""
    if not isinstance(config, TransformerConfig):
        return f"{type(config).__name__} has no native transformers architecture"
    reasons = {
        "muP multipliers": config.mup,
        "inverse layer scaling": config.inverse_layer_scaling,
        "learned positions": config.position == "learned",
        "an attention width other than d_model": config.n_head * config.d_head != config.d_model,
    }
    found = [reason for reason, present in reasons.items() if present]
    return "a Transformer with " + ", ".join(found) if found else None


def as_neox(model: nn.Module, tokenizer: Tokenizer) -> nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    c = model.config
    rotary = c.rotary_pct if c.position == "rope" else 0.0  # NoPE: no dims rotated
    config = GPTNeoXConfig(
        vocab_size=c.vocab_size,
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
    hf = GPTNeoXForCausalLM(config)
    missing, unexpected = hf.load_state_dict(neox_state(model), strict=False)
    buffers = {name for name, _ in hf.named_buffers()}
    if unexpected or set(missing) - buffers:
        raise RuntimeError(
            f"GPT-NeoX layout mismatch: missing {sorted(set(missing) - buffers)}, unexpected {sorted(unexpected)}"
        )
    return hf


def neox_state(model: nn.Module) -> dict[str, Tensor]:
    """The Transformer's weights under GPT-NeoX's names: QKV rows from [Q; K; V] to per-head [q_h; k_h; v_h]."""
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
        "gpt_neox.embed_in.weight": ours["token_embedding.weight"],
        "lm_head.weight": ours.get("lm_head.weight", ours["token_embedding.weight"]),
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
