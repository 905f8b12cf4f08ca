"""The MoT's attention over bytes (reference 3.3): which byte may attend to which (causal, or every byte of its
token and of earlier ones, within a window), as FlexAttention's block-sparse mask on CUDA and a dense mask for SDPA
elsewhere."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from scaling_axes.modules.configs.mot_config import MaskKind


def byte_mask(n_bytes: int, bytes_per_token: int, window: int, kind: MaskKind, device=None) -> Tensor:
    """[n, n] boolean: query byte q may attend to key byte k (reference 3.3)."""
    q = torch.arange(n_bytes, device=device)[:, None]
    k = torch.arange(n_bytes, device=device)[None, :]
    return _mask_rule(q, k, bytes_per_token, window, kind)


def _mask_rule(q, k, bytes_per_token: int, window: int, kind: MaskKind):
    """Causal: k <= q within `window`. Within-token: every byte of a token and of earlier tokens in the window."""
    if kind == "causal":
        return (q >= k) & (q - k < window)
    return (q // bytes_per_token >= k // bytes_per_token) & (q - k < window)


@functools.lru_cache(maxsize=16)
def _flex_block_mask(n_bytes: int, bytes_per_token: int, window: int, kind: MaskKind, device: str):
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, k):
        return _mask_rule(q, k, bytes_per_token, window, kind)

    return create_block_mask(mask_mod, None, None, n_bytes, n_bytes, device=device)


@functools.cache
def _compiled_flex_attention():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def windowed_attention(
    q: Tensor, k: Tensor, v: Tensor, scale: float, bytes_per_token: int, window: int, kind: MaskKind
) -> Tensor:
    """Attention over [batch, heads, bytes, head_dim] under `byte_mask`: FlexAttention (block-sparse) on CUDA, the
    same mask as a dense boolean for SDPA elsewhere."""
    n = q.shape[-2]
    if q.is_cuda:
        block_mask = _flex_block_mask(n, bytes_per_token, window, kind, str(q.device))
        return _compiled_flex_attention()(q, k, v, block_mask=block_mask, scale=scale)
    mask = byte_mask(n, bytes_per_token, window, kind, q.device)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
