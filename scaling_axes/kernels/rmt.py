"""Fused residual-matrix operations of the RMT (reference `rmt.md` section 7; paper App. E names runtime its limit).

The residual is X [B, T, D_v, D_k] (D_k innermost). Eagerly, a sublayer's read is a norm over the whole matrix
(write Xn, read it back) then one GEMM, and its write is a GEMM plus an add. Here each is one kernel, each token's
D_v x D_k matrix one tile:

* `norm_retrieve(x, keys, weight, bias, eps, layernorm, heads_first)`: LayerNorm or RMSNorm (elementwise weight,
  optional bias) over the matrix, then the contraction with all n retrieval keys [D_k, n] (Eq. 20, 23, 26). The
  normalised matrix lives in registers only; saved for backward are X and the per-token mean and 1/std. The result
  is [B, T, D_v, n], laid out n-major (`heads_first`: q, k, v become [B, R, T, D_v] views with no copy, as the
  attention wants) or n-innermost (the FF's W1 input). A few tokens per program, how many timed per shape on the
  GPU. Backward is one kernel per block of tokens: it recomputes
  the normalised tile, writes dX, and sums the key, weight and bias gradients of its tokens (a second, tiny
  reduction over the blocks finishes them; deterministic, no atomics).
* `store(x, data, keys)`: its write, the other kernel (`kernels/rmt_store.py`).

fp32, bf16 and fp16 (fp32 statistics and accumulation); D_v, D_k, n, R need not be powers of two (tiles are padded
to at least 16, the tensor-core minimum). Runs on CUDA, or anywhere under TRITON_INTERPRET=1. Both are
`torch.library` custom ops (`scaling_axes::rmt_norm_retrieve`, `scaling_axes::rmt_store`) with fake implementations
that give the real strides and autograd formulas, so `torch.compile` calls them inside its graphs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from scaling_axes.kernels import common
from scaling_axes.kernels.common import compute_dtype, dot, dot_dtype

TOKENS_PER_PROGRAM = 16  # backward: tokens whose parameter gradients one program sums
MAX_TILE = 128 * 128  # one token's padded D_v x D_k matrix must fit one program


def _block(size: int) -> int:
    return max(16, triton.next_power_of_2(size))


def tokens_per_program() -> list[triton.Config]:
    """Tokens per program of the read and the store (their D_v rows stacked into one product), chosen per shape by
    timing on the GPU (Triton's autotuner); two under the interpreter, which cannot time, so that the tests cover
    several tokens and a partial last block."""
    if common.interpreted():
        return [triton.Config({"TOKENS": 2})]
    return [triton.Config({"TOKENS": t}, num_warps=w) for t in (1, 2, 4, 8) for w in (4, 8)]


@triton.jit
def _load_matrix(X, token, v, k, D_V, D_K):
    """The token's D_v x D_k matrix as a zero-padded fp32 [BLOCK_V, BLOCK_K] tile, and its mask."""
    mask = (v[:, None] < D_V) & (k[None, :] < D_K)
    return tl.load(X + token * D_V * D_K + v[:, None] * D_K + k[None, :], mask=mask, other=0.0).to(tl.float32), mask


@triton.jit
def _normalize(x, mask, mean, rstd, W, Bias, v, k, D_K, HAS_BIAS: tl.constexpr):
    """xhat = (x - mean) * rstd and xn = xhat * w (+ b), zero on the padding; also returns w."""
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    w = tl.load(W + v[:, None] * D_K + k[None, :], mask=mask, other=0.0).to(tl.float32)
    xn = xhat * w
    if HAS_BIAS:
        xn += tl.load(Bias + v[:, None] * D_K + k[None, :], mask=mask, other=0.0).to(tl.float32)
    return xhat, w, xn


@triton.autotune(tokens_per_program(), key=["D_V", "D_K", "N"])
@triton.jit
def _norm_retrieve_kernel(
    X,
    W,
    Bias,
    K,
    OUT,
    MEAN,
    RSTD,
    TOTAL,
    T,
    D_V,
    D_K,
    N,
    eps,
    so_b,
    so_t,
    so_v,
    so_n,
    LAYERNORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
    TOKENS: tl.constexpr,
):
    """TOKENS tokens, their D_v rows stacked: per token the mean (LayerNorm; 0 for RMSNorm) and 1/std over its
    matrix, then the normalised rows' product with the keys, written in OUT's strides."""
    rows = tl.arange(0, TOKENS * BLOCK_V)
    first = tl.program_id(0).to(tl.int64) * TOKENS  # int64: token x D_v x D_k outgrows int32 at large batches
    token, v, k, n = first + rows // BLOCK_V, rows % BLOCK_V, tl.arange(0, BLOCK_K), tl.arange(0, BLOCK_N)
    mask = ((v < D_V) & (token < TOTAL))[:, None] & (k[None, :] < D_K)
    x = tl.load(X + (token * D_V + v)[:, None] * D_K + k[None, :], mask=mask, other=0.0).to(tl.float32)
    count = D_V * D_K
    mean = _per_token(tl.sum(x, axis=1), TOKENS, BLOCK_V) / count
    if not LAYERNORM:
        mean = mean * 0.0
    row_mean = _per_row(mean, TOKENS, BLOCK_V)[:, None]
    centred = tl.where(mask, x - row_mean, 0.0)
    rstd = 1.0 / tl.sqrt(_per_token(tl.sum(centred * centred, axis=1), TOKENS, BLOCK_V) / count + eps)
    tokens = first + tl.arange(0, TOKENS)
    tl.store(MEAN + tokens, mean, mask=tokens < TOTAL)
    tl.store(RSTD + tokens, rstd, mask=tokens < TOTAL)
    _, _, xn = _normalize(x, mask, row_mean, _per_row(rstd, TOKENS, BLOCK_V)[:, None], W, Bias, v, k, D_K, HAS_BIAS)
    keys = tl.load(K + k[:, None] * N + n[None, :], mask=(k[:, None] < D_K) & (n[None, :] < N), other=0.0)
    offsets = (token // T)[:, None] * so_b + (token % T)[:, None] * so_t + v[:, None] * so_v + n[None, :] * so_n
    tl.store(OUT + offsets, dot(xn, keys, DOT_DTYPE), mask=((v < D_V) & (token < TOTAL))[:, None] & (n[None, :] < N))


@triton.jit
def _per_token(row_values, TOKENS: tl.constexpr, BLOCK_V: tl.constexpr):
    """[TOKENS BLOCK_V] per-row values -> [TOKENS] sums over each token's rows."""
    return tl.sum(tl.reshape(row_values, (TOKENS, BLOCK_V)), axis=1)


@triton.jit
def _per_row(token_values, TOKENS: tl.constexpr, BLOCK_V: tl.constexpr):
    """[TOKENS] per-token values -> [TOKENS BLOCK_V], each token's value on each of its rows."""
    return tl.reshape(tl.broadcast_to(token_values[:, None], (TOKENS, BLOCK_V)), (TOKENS * BLOCK_V,))


@triton.jit
def _norm_retrieve_backward_kernel(
    X,
    W,
    Bias,
    K,
    D_OUT,
    MEAN,
    RSTD,
    DX,
    DW,
    DB,
    DK,
    TOKENS,
    T,
    D_V,
    D_K,
    N,
    sd_b,
    sd_t,
    sd_v,
    sd_n,
    LAYERNORM: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    TOKENS_PER_PROGRAM: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """A block of tokens: dX per token; this block's partial sums of dW, dB ([D_v, D_k]) and dKeys ([D_k, n])."""
    block = tl.program_id(0)
    v, k, n = tl.arange(0, BLOCK_V), tl.arange(0, BLOCK_K), tl.arange(0, BLOCK_N)
    vk_mask, kn_mask = (v[:, None] < D_V) & (k[None, :] < D_K), (k[:, None] < D_K) & (n[None, :] < N)
    keys = tl.load(K + k[:, None] * N + n[None, :], mask=kn_mask, other=0.0)
    d_weight = tl.zeros((BLOCK_V, BLOCK_K), dtype=tl.float32)
    d_bias = tl.zeros((BLOCK_V, BLOCK_K), dtype=tl.float32)
    d_keys = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    count = D_V * D_K
    for i in range(TOKENS_PER_PROGRAM):
        token = tl.minimum(block * TOKENS_PER_PROGRAM + i, TOKENS - 1).to(tl.int64)
        live = block * TOKENS_PER_PROGRAM + i < TOKENS  # the last block's surplus iterations add nothing
        x, _ = _load_matrix(X, token, v, k, D_V, D_K)
        rstd = tl.load(RSTD + token)
        xhat, w, xn = _normalize(x, vk_mask, tl.load(MEAN + token), rstd, W, Bias, v, k, D_K, HAS_BIAS)
        offsets = (token // T) * sd_b + (token % T) * sd_t + v[:, None] * sd_v + n[None, :] * sd_n
        d_out = tl.load(D_OUT + offsets, mask=(v[:, None] < D_V) & (n[None, :] < N) & live, other=0.0)
        d_xn = dot(d_out, tl.trans(keys), DOT_DTYPE)
        d_xhat = d_xn * w
        through_var = tl.sum(tl.sum(d_xhat * xhat, axis=1), axis=0) / count
        d_x = d_xhat - xhat * through_var
        if LAYERNORM:  # the mean's share
            d_x -= tl.sum(tl.sum(d_xhat, axis=1), axis=0) / count
        d_x = tl.where(vk_mask, d_x * rstd, 0.0)
        tl.store(DX + token * count + v[:, None] * D_K + k[None, :], d_x, mask=vk_mask & live)
        d_weight += d_xn * xhat
        d_bias += d_xn
        d_keys += dot(tl.trans(xn), d_out, DOT_DTYPE)
    tile = block * BLOCK_V * BLOCK_K + v[:, None] * BLOCK_K + k[None, :]
    tl.store(DW + tile, d_weight)
    tl.store(DB + tile, d_bias)
    tl.store(DK + block * BLOCK_K * BLOCK_N + k[:, None] * BLOCK_N + n[None, :], d_keys)


def tiles(d_value: int, d_key: int, n: int) -> dict[str, int]:
    blocks = {"BLOCK_V": _block(d_value), "BLOCK_K": _block(d_key), "BLOCK_N": _block(n)}
    if blocks["BLOCK_V"] * blocks["BLOCK_K"] > MAX_TILE:
        raise ValueError(
            f"fused RMT kernels hold one token's D_v x D_k = {d_value} x {d_key} matrix in one program (at most "
            f"{MAX_TILE} padded elements); use kernel='torch' for this shape"
        )
    return blocks


@torch.library.custom_op("scaling_axes::rmt_norm_retrieve", mutates_args=())
def norm_retrieve_op(
    x: Tensor, keys: Tensor, weight: Tensor, bias: Tensor | None, eps: float, layernorm: bool, heads_first: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """(retrieved [B, T, D_v, n] in the layout `heads_first` asks for, per-token mean, per-token 1/std)."""
    batch, seq, d_value, d_key = x.shape
    n, tokens, blocks = keys.shape[1], batch * seq, tiles(d_value, d_key, keys.shape[1])
    out = _retrieved(x, n, heads_first, common.alloc)
    mean, rstd = common.alloc(tokens, device=x.device), common.alloc(tokens, device=x.device)
    _norm_retrieve_kernel[lambda meta: (triton.cdiv(tokens, meta["TOKENS"]),)](
        x,
        weight,
        bias if bias is not None else weight,
        keys,
        out,
        mean,
        rstd,
        tokens,
        seq,
        d_value,
        d_key,
        n,
        eps,
        *out.stride(),
        LAYERNORM=layernorm,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype(x.dtype),
        **blocks,
    )
    return out, mean, rstd


def _retrieved(x: Tensor, n: int, heads_first: bool, alloc) -> Tensor:
    """The retrieval's output buffer; `heads_first` stores it n-major and returns the [B, T, D_v, n] view."""
    batch, seq, d_value, _ = x.shape
    if heads_first:
        return alloc(n, batch, seq, d_value, device=x.device, dtype=x.dtype).permute(1, 2, 3, 0)
    return alloc(batch, seq, d_value, n, device=x.device, dtype=x.dtype)


@norm_retrieve_op.register_fake
def _(
    x: Tensor, keys: Tensor, weight: Tensor, bias: Tensor | None, eps: float, layernorm: bool, heads_first: bool
) -> tuple[Tensor, Tensor, Tensor]:
    tokens = x.shape[0] * x.shape[1]
    out = _retrieved(x, keys.shape[1], heads_first, lambda *s, device, dtype: x.new_empty(s, dtype=dtype))
    return out, x.new_empty(tokens, dtype=torch.float32), x.new_empty(tokens, dtype=torch.float32)


@torch.library.custom_op("scaling_axes::rmt_norm_retrieve_backward", mutates_args=())
def norm_retrieve_backward_op(
    x: Tensor,
    keys: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    d_out: Tensor,
    layernorm: bool,
) -> list[Tensor]:
    """[dx, d_keys, d_weight] (+ d_bias when there is a bias) of `norm_retrieve_op`."""
    batch, seq, d_value, d_key = x.shape
    n, tokens, blocks = keys.shape[1], batch * seq, tiles(d_value, d_key, keys.shape[1])
    programs = triton.cdiv(tokens, TOKENS_PER_PROGRAM)
    d_x = common.alloc(*x.shape, device=x.device, dtype=x.dtype)
    d_weight = common.alloc(programs, blocks["BLOCK_V"], blocks["BLOCK_K"], device=x.device)
    d_bias = common.alloc(programs, blocks["BLOCK_V"], blocks["BLOCK_K"], device=x.device)
    d_keys = common.alloc(programs, blocks["BLOCK_K"], blocks["BLOCK_N"], device=x.device)
    # num_warps 8: eight tile-sized fp32 accumulators and operands per program
    _norm_retrieve_backward_kernel[(programs,)](
        x,
        weight,
        bias if bias is not None else weight,
        keys,
        d_out,
        mean,
        rstd,
        d_x,
        d_weight,
        d_bias,
        d_keys,
        tokens,
        seq,
        d_value,
        d_key,
        n,
        *d_out.stride(),
        LAYERNORM=layernorm,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=dot_dtype(x.dtype),
        TOKENS_PER_PROGRAM=TOKENS_PER_PROGRAM,
        num_warps=8,
        **blocks,
    )
    grads = [d_x, _unpad(d_keys, d_key, n, keys.dtype), _unpad(d_weight, d_value, d_key, weight.dtype)]
    return grads + ([_unpad(d_bias, d_value, d_key, bias.dtype)] if bias is not None else [])


def _unpad(partial_sums: Tensor, rows: int, cols: int, dtype: torch.dtype) -> Tensor:
    """The blocks' partial sums added up and cut to the real size, contiguous as the op's fake says."""
    return partial_sums.sum(0)[:rows, :cols].to(dtype).contiguous()


@norm_retrieve_backward_op.register_fake
def _(
    x: Tensor,
    keys: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    d_out: Tensor,
    layernorm: bool,
) -> list[Tensor]:
    grads = [torch.empty_like(x), torch.empty_like(keys), torch.empty_like(weight)]
    return grads + ([torch.empty_like(bias)] if bias is not None else [])


def _norm_retrieve_context(ctx, inputs: tuple, output: tuple[Tensor, Tensor, Tensor]) -> None:
    x, keys, weight, bias, _eps, ctx.layernorm, _heads_first = inputs
    _, mean, rstd = output
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x, keys, weight, bias, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)


def _norm_retrieve_backward(ctx, d_out: Tensor, _d_mean: Tensor, _d_rstd: Tensor) -> tuple:
    x, keys, weight, bias, mean, rstd = ctx.saved_tensors
    d_x, d_keys, d_weight, *d_bias = norm_retrieve_backward_op(x, keys, weight, bias, mean, rstd, d_out, ctx.layernorm)
    return d_x, d_keys, d_weight, (d_bias[0] if d_bias else None), None, None, None


norm_retrieve_op.register_autograd(_norm_retrieve_backward, setup_context=_norm_retrieve_context)


def norm_retrieve(
    x: Tensor,
    keys: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    eps: float,
    layernorm: bool = True,
    heads_first: bool = False,
) -> Tensor:
    """LayerNorm (or RMSNorm) of each token's matrix, then retrieval: x [B, T, D_v, D_k], keys [D_k, n] ->
    [B, T, D_v, n]; `heads_first` lays the result out as n x [B, T, D_v] (see the module doc)."""
    if x.dim() != 4 or weight.shape != x.shape[2:] or keys.shape[0] != x.shape[3]:
        raise ValueError(
            f"norm_retrieve: x {tuple(x.shape)}, weight {tuple(weight.shape)} and keys {tuple(keys.shape)} do not "
            "fit; need x [B, T, D_v, D_k], weight [D_v, D_k] and keys [D_k, n]"
        )
    dtype = compute_dtype(x)
    x = x.to(dtype).contiguous()
    keys = keys.to(dtype).contiguous()
    bias = None if bias is None else bias.contiguous()
    return norm_retrieve_op(x, keys, weight.contiguous(), bias, eps, layernorm, heads_first)[0]
