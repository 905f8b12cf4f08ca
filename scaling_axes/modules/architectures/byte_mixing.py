"""The Mixture of Tokenizers' byte layers (MoT reference sections 2-3, 6): the byte self-attention layer, the mixins
that embed each token with its bytes (`concat`, `cross_attn`) and the byte mixout that turns token states into byte
states (`split`, `copy`). The model that uses them is `mot.py`."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from scaling_axes.modules.architectures.byte_attention import windowed_attention
from scaling_axes.modules.architectures.layers import RotaryEmbedding
from scaling_axes.modules.architectures.modded_gpt import Attention, rms_norm, speedrun_linear
from scaling_axes.modules.configs.mot_config import MoTConfig


class ByteLayer(nn.Module):
    """The original `ByteSelfAttn`: y + attn(y) over the byte stream, heads of `byte_head_dim`; unwired (as in
    every reported run) it returns y unchanged and has no parameters."""

    def __init__(self, d: int, config: MoTConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.bytes_per_token, self.window, self.kind = config.bytes_per_token, config.byte_window, config.byte_mask
        heads = max(1, d // config.byte_head_dim)
        self.attn = (
            Attention(d, heads, config.byte_head_dim, config.attention_scale, rotary)
            if config.byte_attention_wired
            else None
        )

    def forward(self, y: Tensor) -> Tensor:
        if self.attn is None:
            return y
        return y + self.attn(y, attend=self._attend)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return windowed_attention(q, k, v, self.attn.scale, self.bytes_per_token, self.window, self.kind)


def _byte_rotary(config: MoTConfig) -> RotaryEmbedding:
    return RotaryEmbedding(config.byte_head_dim, config.rope_min_period, ladder="half_truncated")


class ConcatMixin(nn.Module):
    """x0 = norm(W [norm(E_tok t), norm(E_byte c_1) ... norm(E_byte c_16)]) (reference 2.2). `proj` is trained
    with the embeddings' Adam, as in the original."""

    def __init__(self, config: MoTConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.d_token)
        self.bytes = nn.Embedding(config.byte_vocab.size, config.d_byte)
        self.byte_layer = ByteLayer(config.d_byte, config, _byte_rotary(config)) if config.byte_attention_in else None
        self.proj = speedrun_linear(config.d_token + config.bytes_per_token * config.d_byte, config.d_model)

    def forward(self, idx: Tensor, byte_ids: Tensor) -> Tensor:
        batch, seq = idx.shape
        byte_embeddings = rms_norm(self.bytes(byte_ids.reshape(batch, -1)))
        if self.byte_layer is not None:
            byte_embeddings = self.byte_layer(byte_embeddings)
        mixed = torch.cat((rms_norm(self.tokens(idx)), byte_embeddings.reshape(batch, seq, -1)), dim=-1)
        return rms_norm(self.proj(mixed))


class CrossAttentionMixin(nn.Module):
    """Each token's embedding queries its own bytes (reference 2.3): QK RMS-norm, rotary over token positions for
    queries and byte positions for keys, V scaled by a learned factor, softmax over the token's bytes, scale
    1/sqrt(head_dim), no residual, x0 = c_proj(output) with no norm. K and V are separate matrices, as the
    original's [2, d, d] `kv_w`, so Muon orthogonalises each on its own. An optional byte self-attention layer
    (`byte_attention_in`) runs on the bytes first. The original asserted batch size 1; this batches.
    `cross_attn_output_norm` RMS-norms the output (this suite's earlier variant)."""

    def __init__(self, config: MoTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_head, self.head_dim = d // config.byte_head_dim, config.byte_head_dim
        self.tokens = nn.Embedding(config.vocab_size, d)
        self.bytes = nn.Embedding(config.byte_vocab.size, d)
        self.byte_layer = ByteLayer(d, config, _byte_rotary(config)) if config.byte_attention_in else None
        self.q, self.k, self.v = speedrun_linear(d, d), speedrun_linear(d, d), speedrun_linear(d, d)
        self.out = speedrun_linear(d, d)
        self.value_scale = nn.Parameter(torch.tensor(0.5))
        self.rotary = _byte_rotary(config)
        self.output_norm = config.cross_attn_output_norm

    def forward(self, idx: Tensor, byte_ids: Tensor) -> Tensor:
        batch, seq, width = byte_ids.shape
        heads, dim = self.n_head, self.head_dim
        q = self.q(rms_norm(self.tokens(idx))).view(batch, seq, heads, dim).transpose(1, 2)
        byte_embeddings = rms_norm(self.bytes(byte_ids.reshape(batch, -1)))
        if self.byte_layer is not None:
            byte_embeddings = self.byte_layer(byte_embeddings)
        k, v = (
            t.view(batch, seq * width, heads, dim).transpose(1, 2)
            for t in (self.k(byte_embeddings), self.v(byte_embeddings))
        )
        q, k = self.rotary(rms_norm(q)), self.rotary(rms_norm(k))
        k, v = k.view(batch, heads, seq, width, dim), self.value_scale * v.view(batch, heads, seq, width, dim)
        weights = torch.einsum("bhtd,bhtsd->bhts", q, k).div(math.sqrt(dim)).softmax(-1)
        y = self.out(torch.einsum("bhts,bhtsd->bhtd", weights, v).transpose(1, 2).reshape(batch, seq, heads * dim))
        return rms_norm(y) if self.output_norm else y


class ByteMixout(nn.Module):
    """[B, T, d_model] -> [B, 16T, d] byte states: `split` hands byte slot j the dims [jd, (j+1)d); `copy` gives
    every slot the whole state. Then `byte_layers_out` times x + layer(norm(x)) (reference 3.1-3.2)."""

    def __init__(self, config: MoTConfig) -> None:
        super().__init__()
        self.kind, self.bytes_per_token = config.mixout, config.bytes_per_token
        rotary = _byte_rotary(config)
        self.layers = nn.ModuleList(ByteLayer(config.d_byte_out, config, rotary) for _ in range(config.byte_layers_out))

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, d = x.shape
        if self.kind == "split":
            x = x.reshape(batch, seq * self.bytes_per_token, d // self.bytes_per_token)
        else:
            x = x.repeat_interleave(self.bytes_per_token, dim=1)
        for layer in self.layers:
            x = x + layer(rms_norm(x))
        return x
