"""Fused Pattention, ``GELU(sqrt(tau) * S / (||S||_row + eps)) V`` with ``S = X K^T`` (Tokenformer Eq. 3-4).

The eager module runs matmul, norm, divide, GELU, matmul and keeps every n-wide intermediate for backward. Here:

* forward: one GEMM for S (materialised once), then one Triton kernel per block of rows that reads its S rows
  twice (row norm, then normalise + GELU + multiply by V) and writes the output and the row norm, nothing n-wide;
* backward: saved are X, K, V and the row norms only. S is recomputed by a GEMM; a Triton kernel recomputes the
  normalised and GELU scores, forms dG = dY V^T blockwise, reduces the row dot D = sum_j dA_j S_j (the only other
  per-row state the normalisation's gradient needs) and writes dS and G; three GEMMs give dX, dK and dV:
  dS = c/(r+eps) dA - c S D / (r (r+eps)^2), with A = c S / (r+eps) and dA = dG GELU'(A).

`pattention(x, keys, values, tau_tokens, eps)` takes any leading shape and fp32 / bf16 / fp16 inputs (the kernel
accumulates in fp32); sizes need not be multiples of the blocks. Runs on CUDA, or anywhere under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch import Tensor

BLOCK_M, BLOCK_N, BLOCK_D = 32, 32, 32


def _alloc(*shape: int, device: torch.device) -> Tensor:
    """Kernel outputs (tests replace this to poison them, so that an unwritten element shows)."""
    return torch.empty(*shape, device=device, dtype=torch.float32)


@triton.jit
def _gelu(a):
    return 0.5 * a * (1 + tl.math.erf(a * 0.7071067811865476))


@triton.jit
def _gelu_grad(a):
    return 0.5 * (1 + tl.math.erf(a * 0.7071067811865476)) + a * 0.3989422804014327 * tl.exp(-0.5 * a * a)


@triton.jit
def _forward_kernel(S, V, Y, R, M, N, D_OUT, scale, eps,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Rows [m0, m0 + BLOCK_M), output columns [d0, d0 + BLOCK_D): Y = GELU(scale S / (||S|| + eps)) V."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    row_ok, col_ok = rows < M, cols < D_OUT
    sumsq = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        s = tl.load(S + rows[:, None] * N + slots[None, :], mask=row_ok[:, None] & (slots[None, :] < N), other=0.0)
        sumsq += tl.sum(s * s, axis=1)
    norm = tl.sqrt(sumsq)
    factor = scale / tl.where(row_ok, norm + eps, 1.0)  # padding rows: no 0 / 0
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        slot_ok = slots < N
        s = tl.load(S + rows[:, None] * N + slots[None, :], mask=row_ok[:, None] & slot_ok[None, :], other=0.0)
        g = _gelu(s * factor[:, None])
        v = tl.load(V + slots[:, None] * D_OUT + cols[None, :], mask=slot_ok[:, None] & col_ok[None, :], other=0.0)
        acc += tl.dot(g, v.to(tl.float32), input_precision="ieee")
    tl.store(Y + rows[:, None] * D_OUT + cols[None, :], acc, mask=row_ok[:, None] & col_ok[None, :])
    tl.store(R + rows, norm, mask=row_ok & (tl.program_id(1) == 0))


@triton.jit
def _score_grad_block(S, V, DY, rows, slots, row_ok, slot_ok, factor, N, D_OUT, BLOCK_D: tl.constexpr):
    """For one [rows, slots] block: S, A = factor S, G = GELU(A) and dA = (dY V^T) GELU'(A)."""
    s = tl.load(S + rows[:, None] * N + slots[None, :], mask=row_ok[:, None] & slot_ok[None, :], other=0.0)
    a = s * factor[:, None]
    d_g = tl.zeros(s.shape, dtype=tl.float32)
    for d0 in range(0, D_OUT, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        col_ok = cols < D_OUT
        dy = tl.load(DY + rows[:, None] * D_OUT + cols[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        v = tl.load(V + slots[:, None] * D_OUT + cols[None, :], mask=slot_ok[:, None] & col_ok[None, :], other=0.0)
        d_g += tl.dot(dy.to(tl.float32), tl.trans(v.to(tl.float32)), input_precision="ieee")
    return s, _gelu(a), d_g * _gelu_grad(a)


@triton.jit
def _backward_kernel(S, V, DY, R, DS, G, M, N, D_OUT, scale, eps,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Rows [m0, m0 + BLOCK_M): the row dot D in a first pass over the slots, then dS and G in a second."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    norm = tl.load(R + rows, mask=row_ok, other=1.0)
    factor = scale / (norm + eps)
    row_dot = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        s, g, d_a = _score_grad_block(S, V, DY, rows, slots, row_ok, slots < N, factor, N, D_OUT, BLOCK_D)
        row_dot += tl.sum(d_a * s, axis=1)
    # the norm's share of the gradient; a zero row (norm 0) has none
    through_norm = tl.where(norm > 0, scale * row_dot / (tl.maximum(norm, 1e-30) * (norm + eps) * (norm + eps)), 0.0)
    for n0 in range(0, N, BLOCK_N):
        slots = n0 + tl.arange(0, BLOCK_N)
        slot_ok = slots < N
        s, g, d_a = _score_grad_block(S, V, DY, rows, slots, row_ok, slot_ok, factor, N, D_OUT, BLOCK_D)
        d_s = factor[:, None] * d_a - through_norm[:, None] * s
        mask = row_ok[:, None] & slot_ok[None, :]
        tl.store(DS + rows[:, None] * N + slots[None, :], d_s, mask=mask)
        tl.store(G + rows[:, None] * N + slots[None, :], g, mask=mask)


class _FusedPattention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, keys: Tensor, values: Tensor, scale: float, eps: float) -> Tensor:
        scores = (x @ keys.T).float().contiguous()
        rows, slots, d_out = scores.shape[0], scores.shape[1], values.shape[1]
        out, norms = _alloc(rows, d_out, device=x.device), _alloc(rows, device=x.device)
        grid = (triton.cdiv(rows, BLOCK_M), triton.cdiv(d_out, BLOCK_D))
        _forward_kernel[grid](scores, values.contiguous(), out, norms, rows, slots, d_out, scale, eps,
                              BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D)  # fmt: skip
        ctx.save_for_backward(x, keys, values, norms)
        ctx.scale, ctx.eps = scale, eps
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        x, keys, values, norms = ctx.saved_tensors
        scores = (x @ keys.T).float().contiguous()
        rows, slots = scores.shape
        d_scores, gelu_scores = _alloc(rows, slots, device=x.device), _alloc(rows, slots, device=x.device)
        _backward_kernel[(triton.cdiv(rows, BLOCK_M),)](
            scores, values.contiguous(), d_out.contiguous(), norms, d_scores, gelu_scores, rows, slots,
            values.shape[1], ctx.scale, ctx.eps, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_D=BLOCK_D,
        )  # fmt: skip
        d_x = (d_scores @ keys.float()).to(x.dtype)
        d_keys = (d_scores.T @ x.float()).to(keys.dtype)
        d_values = (gelu_scores.T @ d_out.float()).to(values.dtype)
        return d_x, d_keys, d_values, None, None


def pattention(x: Tensor, keys: Tensor, values: Tensor, tau_tokens: int | None = None, eps: float = 0.0) -> Tensor:
    """Fused `l2_norm_gelu` Pattention: x [..., d_in], keys [n, d_in], values [n, d_out] -> [..., d_out]."""
    if keys.shape[1] != x.shape[-1] or values.shape[0] != keys.shape[0]:
        raise ValueError(
            f"pattention: x [..., {x.shape[-1]}], keys {tuple(keys.shape)} and values {tuple(values.shape)} do not "
            "fit; need keys [n, d_in] and values [n, d_out]"
        )
    scale = math.sqrt(tau_tokens or keys.shape[0])
    flat = x.reshape(-1, x.shape[-1])
    out = _FusedPattention.apply(flat, keys, values, scale, eps)
    return out.reshape(*x.shape[:-1], values.shape[1])
