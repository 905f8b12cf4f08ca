"""Residual Matrix Transformer (Mak & Flanigan, ICML 2025): the residual stream is a D_k x D_v matrix per token.

Sublayers read the matrix by contracting it with retrieval keys (r in R^{D_k}) and write to it with outer products
of their outputs and storage keys (w in R^{D_k}). Layout: X is [batch, seq, D_v, D_k] with D_k innermost (the
official code's order), so that every retrieval for all heads is one matrix product over D_k and every storage is
one product fused with the residual add (`torch.addmm` / `torch.baddbmm`); there is no loop over heads.

* Embedding (Eq. 18-19): X0 = sum_h w_E^(h) (x) W_E^(h)[token] + sum_h w_P^(h) (x) W_P^(h)[position].
* Attention (Eq. 20-22): R heads of size D_v; q, k, v of head h read with r_Q^(h), r_K^(h), r_V^(h); the head
  outputs are stored with w_O^(h). Logits scaled by 1/sqrt(D_v) and by 1/(layer + 1); the paper's fp32 attention is
  `attention_fp32=True` (off by default, as for the Transformer: see TransformerConfig).
* Feed-forward (Eq. 23-25): R retrievals concatenated (D_v * R), W1, GELU, W2, split into R data vectors, stored.
* Unembedding (Eq. 26-27): R retrievals concatenated, one (D_v * R) x V matrix (the R matrices W_U^(h) side by
  side). No biases, no weight tying.

`kernel` (as Tokenformer's): `triton` runs each sublayer's norm + retrieval as one fused kernel (`kernels/rmt.py`)
and its storage + residual add as another (`kernels/rmt_store.py`); `auto` picks it where it was measured faster
(`kernels.MEASURED_FASTER`).

Its config and presets are `configs/rmt_config.py`. Defaults follow the paper: pre-LayerNorm over the whole D_k * D_v
matrix (eps 1e-6, an elementwise weight and, as App. C.1 says "we do not use any bias terms", no bias unless
`norm_bias`), learned positions, exact GELU, N(0, 0.02) unembedding. The official code does otherwise, each an option:
RMSNorm over the matrix with a full-size gain (`norm="rmsnorm"`), ALiBi with slopes 2^(-8h/R) and document-blocked
masking (`position="alibi"`, `document_mask`), tanh GELU, a zero-initialised unembedding, and the muP multipliers
(`input_alpha`, `attention_alpha`, `output_alpha`, `init_std`). Init is the code's: N(0, init_std^2 / fan_in) for keys,
W1 and W2; storage keys of sublayers also scaled by 1/sqrt(2L).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from scaling_axes.kernels import Kernel, fused, use_triton
from scaling_axes.modules.architectures.layers import causal_attention, current_decoding, first_position
from scaling_axes.modules.configs.rmt_config import RMTConfig
from scaling_axes.modules.registry import register_model


def retrieve(x: Tensor, keys: Tensor) -> Tensor:
    """[..., D_v, D_k] contracted with keys [D_k, n] -> [..., D_v, n]: one product for all n retrievals."""
    return _contract_last(x, keys)


def outer_sum(data: Tensor, keys: Tensor) -> Tensor:
    """sum_h data[..., h] (x) keys[h]: data [..., D_v, R], keys [R, D_k] -> [..., D_v, D_k]."""
    return _contract_last(data, keys)


def _contract_last(t: Tensor, matrix: Tensor) -> Tensor:
    return (t.reshape(-1, t.shape[-1]) @ matrix).view(*t.shape[:-1], matrix.shape[1])


def store(x: Tensor, data: Tensor, keys: Tensor) -> Tensor:
    """x + sum_h data[..., h] (x) keys[h]: data [..., D_v, R], keys [R, D_k]; the add fused into the product."""
    return torch.addmm(x.reshape(-1, x.shape[-1]), data.reshape(-1, data.shape[-1]), keys).view(x.shape)


def normed_retrieval(x: Tensor, norm: MatrixNorm, keys: Tensor, kernel: str, heads_first: bool) -> Tensor:
    """retrieve(norm(x), keys) -> [B, T, D_v, n]; `heads_first`: stored n-major, so that q, k, v are [B, R, T, D_v]
    views with unit last stride. With the fused kernel the normalised matrix is never written to memory."""
    if use_triton(kernel, x, "rmt"):
        return fused("rmt:norm_retrieve")(x, keys, norm.weight, norm.bias, norm.eps, norm.layernorm, heads_first)
    xn = norm(x)
    if not heads_first:
        return retrieve(xn, keys)
    batch, seq, d_value, d_key = x.shape
    return (keys.T @ xn.reshape(-1, d_key).T).view(-1, batch, seq, d_value).permute(1, 2, 3, 0)


class Retrieval(nn.Module):
    """n retrieval keys (columns of `keys`, [D_k, n]); forward(x, norm) retrieves from norm(x)."""

    def __init__(self, d_key: int, n: int, kernel: Kernel = "torch") -> None:
        super().__init__()
        self.keys = nn.Parameter(torch.empty(d_key, n))
        self.kernel = kernel

    def forward(self, x: Tensor, norm: MatrixNorm) -> Tensor:
        return normed_retrieval(x, norm, self.keys, self.kernel, heads_first=False)


class Storage(nn.Module):
    """R storage keys (rows of `keys`, [R, D_k]); forward(x, data) returns the updated residual."""

    def __init__(self, rank: int, d_key: int, kernel: Kernel = "torch") -> None:
        super().__init__()
        self.keys = nn.Parameter(torch.empty(rank, d_key))
        self.kernel = kernel

    def forward(self, x: Tensor, data: Tensor) -> Tensor:
        if use_triton(self.kernel, x, "rmt"):
            return fused("rmt_store:store")(x, data, self.keys)
        return store(x, data, self.keys)


class MatrixNorm(nn.Module):
    """LayerNorm (or RMSNorm) over the whole D_v x D_k matrix of a token, with a full-size elementwise gain (and,
    for LayerNorm with `bias`, a bias), stored [D_v, D_k] as `nn.LayerNorm((D_v, D_k))` stores them.

    It normalises the flattened matrix with 1-D parameters: a 2-D normalized_shape under autocast made
    torch.compile's backward return the gain's gradient flattened (torch 2.11 on CUDA: "invalid gradient ... got
    [4096] but expected shape compatible with [64, 64]"); the view's own backward restores the shape."""

    def __init__(self, d_value: int, d_key: int, eps: float, layernorm: bool = True, bias: bool = False) -> None:
        super().__init__()
        self.eps, self.layernorm = eps, layernorm
        self.weight = nn.Parameter(torch.ones(d_value, d_key))
        self.bias = nn.Parameter(torch.zeros(d_value, d_key)) if layernorm and bias else None

    def forward(self, x: Tensor) -> Tensor:
        flat, size = x.flatten(-2), (self.weight.numel(),)
        if self.layernorm:
            bias = None if self.bias is None else self.bias.flatten()
            return F.layer_norm(flat, size, self.weight.flatten(), bias, self.eps).view_as(x)
        return F.rms_norm(flat, size, self.weight.flatten(), self.eps).view_as(x)


def matrix_norm(config: RMTConfig) -> MatrixNorm:
    layernorm = config.norm != "rmsnorm"
    return MatrixNorm(config.d_value, config.d_key, config.norm_eps, layernorm, bias=layernorm and config.norm_bias)


def alibi_bias(idx: Tensor, heads: int, document_mask: bool, bos_token_id: int, start: int = 0) -> Tensor:
    """Additive [batch, heads, seq - start, seq] bias of the queries from `start` on over every key: -m_h (i - j)
    with m_h = 2^(-8h/R), -inf where masked."""
    seq = idx.shape[1]
    pos = torch.arange(seq, device=idx.device)
    queries = pos[start:]
    allowed = (queries[:, None] >= pos[None, :]).expand(idx.shape[0], seq - start, seq)
    if document_mask:
        document = torch.cumsum(idx == bos_token_id, dim=1)
        allowed = allowed & (document[:, start:, None] == document[:, None, :])
    slopes = 2.0 ** (-8.0 * torch.arange(1, heads + 1, device=idx.device) / heads)
    distance = (queries[:, None] - pos[None, :]).float()
    bias = -slopes[:, None, None] * distance
    return bias[None].masked_fill(~allowed[:, None], float("-inf"))


class HeadRetrieval(Retrieval):
    """Q, K and V for all R heads from norm(x) in one product; returns q, k, v as [B, R, T, D_v] views."""

    def forward(self, x: Tensor, norm: MatrixNorm) -> Tensor:
        batch, seq, d_value, _ = x.shape
        qkv = normed_retrieval(x, norm, self.keys, self.kernel, heads_first=True).permute(3, 0, 1, 2)
        return qkv.view(3, -1, batch, seq, d_value).permute(0, 2, 1, 3, 4)  # [3, B, R, T, D_v]


class HeadStorage(Storage):
    """Stores the R head outputs [B, R, T, D_v] into x with one batched product (fused with the add)."""

    def forward(self, x: Tensor, heads: Tensor) -> Tensor:
        if use_triton(self.kernel, x, "rmt"):
            return super().forward(x, heads.permute(0, 2, 3, 1))  # the kernel reads any strides
        batch, rank, seq, d_value = heads.shape
        data = heads.reshape(batch, rank, seq * d_value).transpose(1, 2)
        keys = self.keys.expand(batch, *self.keys.shape)
        return torch.baddbmm(x.reshape(batch, seq * d_value, -1), data, keys).view(x.shape)


class RMTAttention(nn.Module):
    """Eq. 20-22. forward(x, norm, bias) returns x plus the head outputs computed from norm(x)."""

    def __init__(self, config: RMTConfig, layer: int) -> None:
        super().__init__()
        self.qkv = HeadRetrieval(config.d_key, 3 * config.rank, config.kernel)
        self.out = HeadStorage(config.rank, config.d_key, config.kernel)
        layer_scale = 1 / (layer + 1) if config.inverse_layer_scaling else 1.0
        self.scale = config.attention_alpha / math.sqrt(config.d_value) * layer_scale
        self.upcast = config.attention_fp32

    def forward(self, x: Tensor, norm: MatrixNorm, bias: Tensor | None) -> Tensor:
        q, k, v = self.qkv(x, norm)
        if (step := current_decoding()) is not None:
            k, v = step.extend(k, v)
        return self.out(x, causal_attention(q, k, v, scale=self.scale, upcast=self.upcast, bias=bias).to(x.dtype))


class RMTFeedForward(nn.Module):
    """Eq. 23-25: retrieve R vectors, concatenate, W1, GELU, W2, split into R vectors and store them."""

    def __init__(self, config: RMTConfig) -> None:
        super().__init__()
        width = config.d_value * config.rank
        self.retrieval = Retrieval(config.d_key, config.rank, config.kernel)
        self.up = nn.Linear(width, config.d_ff, bias=False)
        self.down = nn.Linear(config.d_ff, width, bias=False)
        self.storage = Storage(config.rank, config.d_key, config.kernel)
        self.gelu = config.gelu

    def forward(self, x: Tensor, norm: MatrixNorm) -> Tensor:
        batch, seq, d_value, _ = x.shape
        u = self.retrieval(x, norm).reshape(batch, seq, -1)  # (v, h) order: v major
        y = self.down(F.gelu(self.up(u), approximate=self.gelu))
        return self.storage(x, y.view(batch, seq, d_value, -1))


class RMTBlock(nn.Module):
    def __init__(self, config: RMTConfig, layer: int) -> None:
        super().__init__()
        self.attn_norm, self.attn = matrix_norm(config), RMTAttention(config, layer)
        self.ffn_norm, self.ffn = matrix_norm(config), RMTFeedForward(config)

    def forward(self, x: Tensor, bias: Tensor | None) -> Tensor:
        x = self.attn(x, self.attn_norm, bias)
        return self.ffn(x, self.ffn_norm)


class RMTEmbedding(nn.Module):
    """Eq. 18-19: R word vectors (and R position vectors) per token, each stored with its own key."""

    def __init__(self, config: RMTConfig) -> None:
        super().__init__()
        width = config.d_value * config.rank
        self.config = config
        self.token = nn.Embedding(config.vocab_size, width)
        self.token_storage = Storage(config.rank, config.d_key)
        learned = config.position == "learned"
        self.position = nn.Embedding(config.max_seq_len, width) if learned else None
        self.position_storage = Storage(config.rank, config.d_key) if learned else None

    def forward(self, idx: Tensor) -> Tensor:
        c = self.config
        batch, seq = idx.shape
        words = self.token(idx).view(batch, seq, c.d_value, c.rank) * c.input_alpha
        x = outer_sum(words, self.token_storage.keys)
        if self.position is not None:
            start = first_position()
            positions = self.position(torch.arange(start, start + seq, device=idx.device)).view(seq, c.d_value, c.rank)
            x = x + outer_sum(positions * c.input_alpha, self.position_storage.keys)  # broadcast over the batch
        return x


class RMT(nn.Module):
    def __init__(self, config: RMTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = RMTEmbedding(config)
        self.blocks = nn.ModuleList(RMTBlock(config, layer) for layer in range(config.n_layer))
        self.final_norm = matrix_norm(config)
        self.readout = Retrieval(config.d_key, config.rank, config.kernel)
        self.lm_head = nn.Linear(config.d_value * config.rank, config.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The official init (reference section 2): N(0, init_std^2 / fan_in); sublayer storage also / sqrt(2L); the
        unembedding N(0, init_std^2) (or zero). `init="lecun"` (Table 10, App. C.4): every matrix N(0, 1 / fan_in),
        embeddings N(0, 1), no depth scaling, the unembedding's fan_in D_v R included (init_std is then unused)."""
        c = self.config
        lecun = c.init == "lecun"
        std, depth = (1.0, 1.0) if lecun else (c.init_std, 1 / math.sqrt(2 * c.n_layer))
        for name, module in self.named_modules():
            if isinstance(module, Retrieval):
                nn.init.normal_(module.keys, 0.0, std / math.sqrt(c.d_key))
            elif isinstance(module, Storage):
                in_layer = name.startswith("blocks.")
                nn.init.normal_(module.keys, 0.0, std / math.sqrt(c.rank) * (depth if in_layer else 1.0))
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, std)
            elif isinstance(module, nn.Linear) and module is not self.lm_head:
                nn.init.normal_(module.weight, 0.0, std / math.sqrt(module.in_features))
        if c.zero_init_unembedding:
            nn.init.zeros_(self.lm_head.weight)
        else:
            nn.init.normal_(self.lm_head.weight, 0.0, std / math.sqrt(self.lm_head.in_features) if lecun else std)

    def forward(self, idx: Tensor) -> Tensor:
        """idx: [batch, seq] -> logits [batch, seq, vocab_size]."""
        c = self.config
        if idx.dim() != 2:
            raise ValueError(f"expected token ids of shape [batch, seq], got {tuple(idx.shape)}")
        start = first_position()
        if start + idx.shape[1] > c.max_seq_len and c.position == "learned":
            raise ValueError(f"sequence length {start + idx.shape[1]} exceeds max_seq_len={c.max_seq_len}")
        bias = self.alibi(idx, start) if c.position == "alibi" else None
        if bias is None and c.document_mask:
            raise ValueError("document_mask needs position='alibi' (with learned positions it is not implemented)")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x, bias)
        features = self.readout(x, self.final_norm).reshape(*idx.shape, -1)
        return self.lm_head(features) * c.output_alpha

    def alibi(self, idx: Tensor, start: int) -> Tensor:
        """The ALiBi bias of `idx`'s queries; while decoding, over the cached keys too (the document mask looks back
        at their ids; without it, any ids of the right length do)."""
        c = self.config
        if start:
            step = current_decoding()
            earlier = step.prefix_ids() if c.document_mask else idx.new_zeros(idx.shape[0], start)
            idx = torch.cat((earlier, idx), dim=1)
        return alibi_bias(idx, c.rank, c.document_mask, c.bos_token_id, start)


register_model(RMTConfig, RMT, norm_layers=(MatrixNorm,))
