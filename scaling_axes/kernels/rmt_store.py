"""The RMT's fused write (reference `rmt.md` section 7): `store(x, data, keys)` = x + sum_h data[..., h] (x) keys[h]
(Eq. 22, 25) in one pass, reading X once and writing the new residual once, a few tokens per program (their rows
stacked into one product; how many is timed per shape on the GPU); `data` may be any strided [B, T, D_v, R] view
(the attention's [B, R, T, D_v] heads). Its backward is two GEMMs (dX is the incoming gradient itself). A
`torch.library` custom op (`scaling_axes::rmt_store`) with a fake implementation, as `kernels/rmt.py`'s read."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from scaling_axes.kernels import common
from scaling_axes.kernels.common import compute_dtype, dot, dot_dtype
from scaling_axes.kernels.rmt import tiles, tokens_per_program


@triton.autotune(tokens_per_program(), key=["D_V", "D_K", "R"])
@triton.jit
def _store_kernel(
    X,
    DATA,
    K,
    OUT,
    TOTAL,
    T,
    D_V,
    D_K,
    R,
    s_b,
    s_t,
    s_v,
    s_r,
    DOT_DTYPE: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_R: tl.constexpr,
    TOKENS: tl.constexpr,
):
    """TOKENS tokens: OUT = X + DATA @ K for each, DATA [D_v, R] read through its strides, K [R, D_k]; the tokens'
    D_v rows are stacked as the rows of one [TOKENS BLOCK_V, BLOCK_R] x [BLOCK_R, BLOCK_K] product."""
    rows = tl.arange(0, TOKENS * BLOCK_V)
    token = tl.program_id(0).to(tl.int64) * TOKENS + rows // BLOCK_V  # int64: token x D_v x D_k outgrows int32
    v, k, r = rows % BLOCK_V, tl.arange(0, BLOCK_K), tl.arange(0, BLOCK_R)
    row_ok = (v < D_V) & (token < TOTAL)
    data_offsets = (token // T)[:, None] * s_b + (token % T)[:, None] * s_t + v[:, None] * s_v + r[None, :] * s_r
    data = tl.load(DATA + data_offsets, mask=row_ok[:, None] & (r[None, :] < R), other=0.0)
    keys = tl.load(K + r[:, None] * D_K + k[None, :], mask=(r[:, None] < R) & (k[None, :] < D_K), other=0.0)
    mask = row_ok[:, None] & (k[None, :] < D_K)
    offsets = (token * D_V + v)[:, None] * D_K + k[None, :]
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(OUT + offsets, x + dot(data, keys, DOT_DTYPE), mask=mask)


@torch.library.custom_op("scaling_axes::rmt_store", mutates_args=())
def store_op(x: Tensor, data: Tensor, keys: Tensor) -> Tensor:
    """x + data @ keys per token, `data` read through its strides."""
    batch, seq, d_value, d_key = x.shape
    rank = keys.shape[0]
    blocks = tiles(d_value, d_key, rank)
    out = common.alloc(*x.shape, device=x.device, dtype=x.dtype)
    tokens = batch * seq
    _store_kernel[lambda meta: (triton.cdiv(tokens, meta["TOKENS"]),)](
        x,
        data,
        keys,
        out,
        tokens,
        seq,
        d_value,
        d_key,
        rank,
        *data.stride(),
        DOT_DTYPE=dot_dtype(x.dtype),
        BLOCK_V=blocks["BLOCK_V"],
        BLOCK_K=blocks["BLOCK_K"],
        BLOCK_R=blocks["BLOCK_N"],
    )
    return out


@store_op.register_fake
def _(x: Tensor, data: Tensor, keys: Tensor) -> Tensor:
    return torch.empty_like(x)


def _store_context(ctx, inputs: tuple, output: Tensor) -> None:
    _, data, keys = inputs
    ctx.save_for_backward(data, keys)


def _store_backward(ctx, d_out: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Two GEMMs; dX is the incoming gradient itself."""
    data, keys = ctx.saved_tensors
    rows = d_out.reshape(-1, d_out.shape[-1])
    d_data = (rows @ keys.T).view(data.shape)
    d_keys = data.reshape(-1, data.shape[-1]).T @ rows
    return d_out, d_data, d_keys


store_op.register_autograd(_store_backward, setup_context=_store_context)


def store(x: Tensor, data: Tensor, keys: Tensor) -> Tensor:
    """x + sum_h data[..., h] (x) keys[h]: x [B, T, D_v, D_k], data [B, T, D_v, R] (any strides), keys [R, D_k]."""
    if x.dim() != 4 or data.shape[:3] != x.shape[:3] or keys.shape != (data.shape[3], x.shape[3]):
        raise ValueError(
            f"store: x {tuple(x.shape)}, data {tuple(data.shape)} and keys {tuple(keys.shape)} do not fit; need "
            "x [B, T, D_v, D_k], data [B, T, D_v, R] and keys [R, D_k]"
        )
    dtype = compute_dtype(x)
    return store_op(x.to(dtype).contiguous(), data.to(dtype), keys.to(dtype).contiguous())
