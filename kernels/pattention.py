"""Fused Pattention, ``GELU(sqrt(tau) * S / (||S||_row + eps)) V`` with ``S = X K^T`` (Tokenformer Eq. 3-4).

The eager module runs matmul, norm, divide, GELU, matmul and keeps every n-wide intermediate for backward. Here:

* forward: one GEMM for S (materialised once), then one Triton kernel per block of rows that reads its S rows
  twice (row norm, then normalise + GELU + multiply by V) and writes the output and the row norm, nothing n-wide;
* backward: saved are X, K, V and the row norms only. S is recomputed by a GEMM; a Triton kernel recomputes the
  normalised and GELU scores, forms dG = dY V^T blockwise, reduces the row dot D = sum_j dA_j S_j (the only other
  per-row state the normalisation's gradient needs) and writes dS and G; three GEMMs give dX, dK and dV:
  dS = c/(r+eps) dA - c S D / (r (r+eps)^2), with A = c S / (r+eps) and dA = dG GELU'(A).

`pattention(x, keys, values, tau_tokens, eps)` takes any leading shape and fp32 / bf16 / fp16 inputs (the kernel
accumulates in fp32); sizes need not be multiples of the blocks. `grouped_pattention` runs G Pattentions of the same
input and shape (a layer's Q, K and V) as one launch: one GEMM for all G score matrices, a third grid axis for the
groups, the outputs written side by side (the concatenation the attention wants), and in backward one GEMM for dX
that also sums the G contributions. Runs on CUDA, or anywhere under TRITON_INTERPRET=1.

Forward and backward are `torch.library` custom ops (`scaling_axes::pattention`, `..._backward`) with fake
implementations and an autograd formula, so `torch.compile` calls them inside its graphs instead of tracing a raw
Triton launch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from torch import Tensor

from scaling_axes.kernels import common
from scaling_axes.kernels.common import compute_dtype, dot, dot_dtype

BLOCK_M, BLOCK_N, BLOCK_D = 32, 32, 32


@triton.jit
def _gelu(a):
    return 0.5 * a * (1 + tl.math.erf(a * 0.7071067811865476))


@triton.jit
def _gelu_grad(a):
    return 0.5 * (1 + tl.math.erf(a * 0.7071067811865476)) + a * 0.3989422804014327 * tl.exp(-0.5 * a * a)


@triton.jit
def _forward_kernel(S, V, Y, R, M, N, D_OUT, scale, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_D: tl.constexpr, DOT_DTYPE: tl.constexpr):  # fmt: skip
    """Group g, rows [m0, m0 + BLOCK_M), output columns [d0, d0 + BLOCK_D): Y_g = GELU(scale S_g / (||S_g|| + eps)) V_g.

    S is [M, G N] and Y [M, G D_OUT] (group g in columns g N... and g D_OUT...), V is [G N, D_OUT], R is [G, M].
    """
    group, groups = tl.program_id(2), tl.num_programs(2)
    S, V, Y, R = S + group * N, V + group * N * D_OUT, Y + group * D_OUT, R + group * M
    stride_s, stride_y = groups * N, groups * D_OUT
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < M, cols < D_OUT
    sumsq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        s = tl.load(
            S + rows[:, None] * stride_s + slots[None, :], mask=row_ok[:, None] & (slots[None, :] < N), other=0.0
        )
        sumsq += tl.sum(s * s, axis=1)
    norm = tl.sqrt(sumsq)
    factor = scale / tl.where(row_ok & (norm + eps > 0), norm + eps, 1.0)  # padding and all-zero rows: no 0 / 0
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        slot_ok = slots < N
        s = tl.load(S + rows[:, None] * stride_s + slots[None, :], mask=row_ok[:, None] & slot_ok[None, :], other=0.0)
        g = _gelu(s * factor[:, None])
        v = tl.load(V + slots[:, None] * D_OUT + cols[None, :], mask=slot_ok[:, None] & col_ok[None, :], other=0.0)
        acc += dot(g, v, DOT_DTYPE)
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], acc, mask=row_ok[:, None] & col_ok[None, :])
    tl.store(R + rows, norm, mask=row_ok & (tl.program_id(1) == 0))


@triton.jit
def _score_grad_block(
    S,
    V,
    DY,
    rows,
    slots,
    row_ok,
    slot_ok,
    factor,
    stride_s,
    stride_y,
    D_OUT,
    BLOCK_D: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """For one [rows, slots] block: S, A = factor S, G = GELU(A) and dA = (dY V^T) GELU'(A)."""
    s = tl.load(S + rows[:, None] * stride_s + slots[None, :], mask=row_ok[:, None] & slot_ok[None, :], other=0.0)
    a = s * factor[:, None]
    d_g = tl.zeros(s.shape, dtype=tl.float32)
    for d0 in range(0, D_OUT, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        col_ok = cols < D_OUT
        dy = tl.load(DY + rows[:, None] * stride_y + cols[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        v = tl.load(V + slots[:, None] * D_OUT + cols[None, :], mask=slot_ok[:, None] & col_ok[None, :], other=0.0)
        d_g += dot(dy, tl.trans(v), DOT_DTYPE)
    return s, _gelu(a), d_g * _gelu_grad(a)


@triton.jit
def _backward_kernel(S, V, DY, R, DS, G, M, N, D_OUT, scale, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr, DOT_DTYPE: tl.constexpr):  # fmt: skip
    """Group g, rows [m0, m0 + BLOCK_M): the row dot D in a first pass over the slots, then dS and G in a second.

    Layouts as in the forward; DS and G are [M, G N] like S, DY is [M, G D_OUT] like Y.
    """
    group, groups = tl.program_id(1), tl.num_programs(1)
    S, DS, G, R = S + group * N, DS + group * N, G + group * N, R + group * M
    V, DY = V + group * N * D_OUT, DY + group * D_OUT
    stride_s, stride_y = groups * N, groups * D_OUT
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    norm = tl.load(R + rows, mask=row_ok, other=1.0)
    factor = scale / tl.where(norm + eps > 0, norm + eps, 1.0)
    row_dot = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        s, g, d_a = _score_grad_block(
            S, V, DY, rows, slots, row_ok, slots < N, factor, stride_s, stride_y, D_OUT, BLOCK_D, DOT_DTYPE
        )
        row_dot += tl.sum(d_a * s, axis=1)
    # the norm's share of the gradient; a zero row (norm 0) has none
    through_norm = tl.where(norm > 0, scale * row_dot / (tl.maximum(norm, 1e-30) * (norm + eps) * (norm + eps)), 0.0)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        slot_ok = slots < N
        s, g, d_a = _score_grad_block(
            S, V, DY, rows, slots, row_ok, slot_ok, factor, stride_s, stride_y, D_OUT, BLOCK_D, DOT_DTYPE
        )
        d_s = factor[:, None] * d_a - through_norm[:, None] * s
        mask = row_ok[:, None] & slot_ok[None, :]
        tl.store(DS + rows[:, None] * stride_s + slots[None, :], d_s, mask=mask)
        tl.store(G + rows[:, None] * stride_s + slots[None, :], g, mask=mask)


@torch.library.custom_op("scaling_axes::pattention", mutates_args=())
def pattention_op(
    x: Tensor, keys: Tensor, values: Tensor, groups: int, scale: float, eps: float
) -> tuple[Tensor, Tensor]:
    """x [M, d_in]; keys [G n, d_in] and values [G n, d_out], the G groups stacked -> (out [M, G d_out] in x's dtype,
    fp32 row norms [G, M]). An op that `torch.compile` calls as it is (a raw Triton launch cannot be traced)."""
    scores = (x @ keys.T).float().contiguous()
    rows, slots, d_out = scores.shape[0], keys.shape[0] // groups, values.shape[1]
    out = common.alloc(rows, groups * d_out, device=x.device)
    norms = common.alloc(groups, rows, device=x.device)
    grid = (triton.cdiv(rows, BLOCK_M), triton.cdiv(d_out, BLOCK_D), groups)
    _forward_kernel[grid](scores, values.contiguous(), out, norms, rows, slots, d_out, scale, eps, BLOCK_M=BLOCK_M,
                          BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, DOT_DTYPE=dot_dtype(x.dtype))  # fmt: skip
    return out.to(x.dtype), norms


@pattention_op.register_fake
def _(x: Tensor, keys: Tensor, values: Tensor, groups: int, scale: float, eps: float) -> tuple[Tensor, Tensor]:
    rows = x.shape[0]
    return x.new_empty(rows, groups * values.shape[1]), x.new_empty(groups, rows, dtype=torch.float32)


@torch.library.custom_op("scaling_axes::pattention_backward", mutates_args=())
def pattention_backward_op(x: Tensor, keys: Tensor, values: Tensor, norms: Tensor, d_out: Tensor, groups: int,
                           scale: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """(dx, d_keys, d_values) of `pattention_op` from the saved x, keys, values and row norms."""
    slots, d_value = keys.shape[0] // groups, values.shape[1]
    scores = (x @ keys.T).float().contiguous()
    rows = scores.shape[0]
    d_scores = common.alloc(*scores.shape, device=x.device)
    gelu_scores = common.alloc(*scores.shape, device=x.device)
    _backward_kernel[(triton.cdiv(rows, BLOCK_M), groups)](
        scores, values.contiguous(), d_out.contiguous(), norms, d_scores, gelu_scores, rows, slots, d_value, scale,
        eps, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D, DOT_DTYPE=dot_dtype(x.dtype),
    )  # fmt: skip
    d_x = (d_scores @ keys.float()).to(x.dtype)  # sums the G groups' contributions
    d_keys = (d_scores.T @ x.float()).to(keys.dtype)
    per_group = gelu_scores.view(rows, groups, slots).permute(1, 2, 0)
    d_values = per_group @ d_out.float().view(rows, groups, d_value).transpose(0, 1)
    return d_x, d_keys, d_values.reshape(values.shape).to(values.dtype)


@pattention_backward_op.register_fake
def _(x: Tensor, keys: Tensor, values: Tensor, norms: Tensor, d_out: Tensor, groups: int, scale: float,
      eps: float) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    return torch.empty_like(x), torch.empty_like(keys), torch.empty_like(values)


def _save_for_backward(ctx, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:
    x, keys, values, ctx.groups, ctx.scale, ctx.eps = inputs
    ctx.save_for_backward(x, keys, values, output[1])
    ctx.mark_non_differentiable(output[1])


def _backward(ctx, d_out: Tensor, _d_norms: Tensor) -> tuple:
    x, keys, values, norms = ctx.saved_tensors
    grads = pattention_backward_op(x, keys, values, norms, d_out, ctx.groups, ctx.scale, ctx.eps)
    return *grads, None, None, None


pattention_op.register_autograd(_backward, setup_context=_save_for_backward)


def grouped_pattention(
    x: Tensor, keys: Sequence[Tensor], values: Sequence[Tensor], tau_tokens: int | None = None, eps: float = 0.0
) -> Tensor:
    """G fused Pattentions of one input in one launch: [..., d_in] -> [..., G d_out], outputs side by side.

    keys[g] is [n, d_in] and values[g] [n, d_out], the same n and d_out for every g.
    """
    if len(keys) != len(values) or not keys:
        raise ValueError(f"grouped_pattention: {len(keys)} key and {len(values)} value matrices; need G >= 1 of each")
    shapes = {(tuple(k.shape), tuple(v.shape)) for k, v in zip(keys, values, strict=True)}
    (key_shape, value_shape), *others = shapes
    if others or key_shape[1] != x.shape[-1] or value_shape[0] != key_shape[0]:
        raise ValueError(
            f"pattention: x [..., {x.shape[-1]}], keys {', '.join(str(tuple(k.shape)) for k in keys)} and values "
            f"{', '.join(str(tuple(v.shape)) for v in values)} do not fit; need keys [n, d_in] and values [n, d_out], "
            "the same for every group"
        )
    scale = math.sqrt(tau_tokens or key_shape[0])
    dtype = compute_dtype(x)
    stacked_keys, stacked_values = (keys[0], values[0]) if len(keys) == 1 else (torch.cat(keys), torch.cat(values))
    flat = x.reshape(-1, x.shape[-1]).to(dtype)
    out, _ = pattention_op(flat, stacked_keys.to(dtype), stacked_values.to(dtype), len(keys), scale, eps)
    return out.reshape(*x.shape[:-1], len(keys) * value_shape[1])


def pattention(x: Tensor, keys: Tensor, values: Tensor, tau_tokens: int | None = None, eps: float = 0.0) -> Tensor:
    """Fused `l2_norm_gelu` Pattention: x [..., d_in], keys [n, d_in], values [n, d_out] -> [..., d_out]."""
    return grouped_pattention(x, [keys], [values], tau_tokens, eps)
