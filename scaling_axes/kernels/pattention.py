"""Fused Pattention, ``GELU(sqrt(tau) * S / (||S||_row + eps)) V`` with ``S = X K^T`` (Tokenformer Eq. 3-4).

The three products of each direction are cuBLAS GEMMs in the input's dtype (bf16 and fp16 on tensor cores, fp32
accumulation); what lies between them, the row norm, scaling and GELU, and their gradient, is one memory-bound
Triton pass over input-dtype tiles, in fp32 registers:

* forward: S = X K^T; a kernel reads each block of rows of S twice (the norm, then the normalised GELU) and writes
  G = GELU(A), A = c S / (||S|| + eps), and the fp32 row norms; Y = G V.
* backward: dG = dY V^T; a kernel reads S and dG twice (the row dot D = sum_j dA_j S_j, then dS) and writes dS and
  G, recomputed: dS = c/(r+eps) dA - c S D / (r (r+eps)^2), dA = dG GELU'(A); then dX = dS K, dK = dS^T X and
  dV = G^T dY.

Saved for backward: X, K, V, S (a GEMM to recompute) and the fp32 row norms. Nothing of size [tokens, n] is ever
fp32 in memory, and no product takes fp32 operands unless the inputs are fp32.

`pattention(x, keys, values, tau_tokens, eps)` takes any leading shape and fp32 / bf16 / fp16 inputs; sizes need not
be multiples of the blocks. `grouped_pattention` runs G Pattentions of one input and shape (a layer's Q, K and V)
together: one GEMM for all G score matrices, a group axis in each Triton grid, one batched GEMM for the G outputs
(written side by side, the concatenation the attention wants) and in backward one GEMM for dX that also sums the G
contributions. Runs on CUDA, or anywhere under TRITON_INTERPRET=1.

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
from scaling_axes.kernels.common import compute_dtype


def _blocks() -> list[triton.Config]:
    """Rows per program (BLOCK_M) and score columns per step of its two passes (BLOCK_N): chosen per n by timing
    them on the GPU (Triton's autotuner, once per n); one under the interpreter, which cannot time."""
    if common.interpreted():
        return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 128})]
    return [
        triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w) for m in (4, 8, 16) for n in (128, 256) for w in (4, 8)
    ]


@triton.jit
def _gelu(a):
    return 0.5 * a * (1 + tl.math.erf(a * 0.7071067811865476))


@triton.jit
def _gelu_grad(a):
    return 0.5 * (1 + tl.math.erf(a * 0.7071067811865476)) + a * 0.3989422804014327 * tl.exp(-0.5 * a * a)


@triton.jit
def _factor(norm, scale, eps):
    """c / (r + eps), with padding and all-zero rows (r + eps = 0) given 0 scores, not 0 / 0."""
    return scale / tl.where(norm + eps > 0, norm + eps, 1.0)


@triton.autotune(_blocks(), key=["N"])
@triton.jit
def _forward_kernel(
    S, G, R, M, N, s_row, s_group, g_row, g_group, scale, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """Group g (program axis 1), rows [m0, m0 + BLOCK_M): the rows' norms into R [G, M], then
    G = GELU(c S / (r + eps))."""
    group = tl.program_id(1)
    S, G, R = S + group * s_group, G + group * g_group, R + group * M
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    sumsq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols[None, :] < N)
        s = tl.load(S + rows[:, None] * s_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        sumsq += tl.sum(s * s, axis=1)
    norm = tl.sqrt(sumsq)
    factor = _factor(norm, scale, eps)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols[None, :] < N)
        s = tl.load(S + rows[:, None] * s_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        g = _gelu(s * factor[:, None])
        tl.store(G + rows[:, None] * g_row + cols[None, :], g.to(G.dtype.element_ty), mask=mask)
    tl.store(R + rows, norm, mask=row_ok)


@triton.autotune(_blocks(), key=["N"])
@triton.jit
def _backward_kernel(
    S,
    DG,
    R,
    DS,
    G,
    M,
    N,
    s_row,
    s_group,
    dg_row,
    dg_group,
    g_row,
    g_group,
    scale,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Group g, rows [m0, m0 + BLOCK_M): the row dot D over the scores in a first pass, then dS (S's layout) and G
    (recomputed) in a second."""
    group = tl.program_id(1)
    S, DS, R = S + group * s_group, DS + group * s_group, R + group * M
    DG, G = DG + group * dg_group, G + group * g_group
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    norm = tl.load(R + rows, mask=row_ok, other=1.0)
    factor = _factor(norm, scale, eps)
    row_dot = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols[None, :] < N)
        s = tl.load(S + rows[:, None] * s_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        d_g = tl.load(DG + rows[:, None] * dg_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        row_dot += tl.sum(d_g * _gelu_grad(s * factor[:, None]) * s, axis=1)
    # the norm's share of the gradient; a zero row (norm 0) has none
    through_norm = tl.where(norm > 0, scale * row_dot / (tl.maximum(norm, 1e-30) * (norm + eps) * (norm + eps)), 0.0)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = row_ok[:, None] & (cols[None, :] < N)
        s = tl.load(S + rows[:, None] * s_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        d_g = tl.load(DG + rows[:, None] * dg_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        a = s * factor[:, None]
        d_s = factor[:, None] * d_g * _gelu_grad(a) - through_norm[:, None] * s
        tl.store(DS + rows[:, None] * s_row + cols[None, :], d_s.to(DS.dtype.element_ty), mask=mask)
        tl.store(G + rows[:, None] * g_row + cols[None, :], _gelu(a).to(G.dtype.element_ty), mask=mask)


def _per_group(t: Tensor, groups: int) -> Tensor:
    """[M, G k] (the groups side by side) -> [G, M, k], a view."""
    return t.view(t.shape[0], groups, -1).transpose(0, 1)


@torch.library.custom_op("scaling_axes::pattention", mutates_args=())
def pattention_op(
    x: Tensor, keys: Tensor, values: Tensor, groups: int, scale: float, eps: float
) -> tuple[Tensor, Tensor, Tensor]:
    """x [M, d_in]; keys [G n, d_in] and values [G n, d_out], the G groups stacked, all of one dtype -> (out
    [M, G d_out], the scores S [M, G n] kept for backward, fp32 row norms [G, M])."""
    scores = x @ keys.T
    rows, slots, d_out = x.shape[0], keys.shape[0] // groups, values.shape[1]
    gelu_scores = common.alloc(groups, rows, slots, device=x.device, dtype=x.dtype)
    norms = common.alloc(groups, rows, device=x.device)
    _forward_kernel[lambda blocks: (triton.cdiv(rows, blocks["BLOCK_M"]), groups)](
        scores, gelu_scores, norms, rows, slots, scores.stride(0), slots, slots, rows * slots, scale, eps
    )
    out = torch.bmm(gelu_scores, values.view(groups, slots, d_out))
    return out.transpose(0, 1).reshape(rows, groups * d_out), scores, norms


@pattention_op.register_fake
def _(x: Tensor, keys: Tensor, values: Tensor, groups: int, scale: float, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    rows = x.shape[0]
    return (
        x.new_empty(rows, groups * values.shape[1]),
        x.new_empty(rows, keys.shape[0]),
        x.new_empty(groups, rows, dtype=torch.float32),
    )


@torch.library.custom_op("scaling_axes::pattention_backward", mutates_args=())
def pattention_backward_op(
    x: Tensor,
    keys: Tensor,
    values: Tensor,
    scores: Tensor,
    norms: Tensor,
    d_out: Tensor,
    groups: int,
    scale: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dx, d_keys, d_values) of `pattention_op` from the saved x, keys, values, scores and row norms."""
    rows, slots, d_value = x.shape[0], keys.shape[0] // groups, values.shape[1]
    d_out = _per_group(d_out.to(x.dtype), groups)  # [G, M, d_out]
    d_gelu = torch.bmm(d_out, values.view(groups, slots, d_value).transpose(1, 2))  # [G, M, n]
    d_scores = common.alloc(rows, groups * slots, device=x.device, dtype=x.dtype)
    gelu_scores = common.alloc(groups, rows, slots, device=x.device, dtype=x.dtype)
    _backward_kernel[lambda blocks: (triton.cdiv(rows, blocks["BLOCK_M"]), groups)](
        scores,
        d_gelu,
        norms,
        d_scores,
        gelu_scores,
        rows,
        slots,
        scores.stride(0),
        slots,
        slots,
        rows * slots,
        slots,
        rows * slots,
        scale,
        eps,
    )
    d_values = torch.bmm(gelu_scores.transpose(1, 2), d_out)  # [G, n, d_out]
    return d_scores @ keys, d_scores.T @ x, d_values.reshape(values.shape)  # dX sums the G groups' contributions


@pattention_backward_op.register_fake
def _(
    x: Tensor,
    keys: Tensor,
    values: Tensor,
    scores: Tensor,
    norms: Tensor,
    d_out: Tensor,
    groups: int,
    scale: float,
    eps: float,
) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(keys), torch.empty_like(values)


def _save_for_backward(ctx, inputs: tuple, output: tuple[Tensor, Tensor, Tensor]) -> None:
    x, keys, values, ctx.groups, ctx.scale, ctx.eps = inputs
    ctx.save_for_backward(x, keys, values, output[1], output[2])
    ctx.mark_non_differentiable(output[1], output[2])


def _backward(ctx, d_out: Tensor, _d_scores: Tensor, _d_norms: Tensor) -> tuple:
    grads = pattention_backward_op(*ctx.saved_tensors, d_out, ctx.groups, ctx.scale, ctx.eps)
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
    out, _, _ = pattention_op(flat, stacked_keys.to(dtype), stacked_values.to(dtype), len(keys), scale, eps)
    return out.reshape(*x.shape[:-1], len(keys) * value_shape[1])


def pattention(x: Tensor, keys: Tensor, values: Tensor, tau_tokens: int | None = None, eps: float = 0.0) -> Tensor:
    """Fused `l2_norm_gelu` Pattention: x [..., d_in], keys [n, d_in], values [n, d_out] -> [..., d_out]."""
    return grouped_pattention(x, [keys], [values], tau_tokens, eps)
