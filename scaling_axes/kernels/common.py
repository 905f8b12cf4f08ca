"""What the Triton kernels share: the dtype they compute in, their output buffers and their one matrix-product
helper."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import Tensor

_TRITON_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype the kernels see: autocast's (bf16-mixed training) where it is on, else the input's."""
    device = x.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
    if dtype not in _TRITON_DTYPES:
        raise ValueError(f"the fused kernels take float32, bfloat16 or float16 inputs, not {dtype}")
    return dtype


def alloc(*shape: int, device: torch.device, dtype: torch.dtype = torch.float32) -> Tensor:
    """Kernel outputs (called as `common.alloc`, so that tests can poison them and an unwritten element shows)."""
    return torch.empty(*shape, device=device, dtype=dtype)


def interpreted() -> bool:
    """Whether Triton runs its kernels in the interpreter (TRITON_INTERPRET=1): on the CPU, in numpy, untimeable."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def dot_dtype(dtype: torch.dtype) -> tl.dtype:
    """Operand dtype of the kernels' products: half inputs on tensor cores, fp32 exactly (IEEE, not TF32).

    The interpreter (numpy) multiplies bf16 tiles wrongly, so under TRITON_INTERPRET=1 bf16 products run in fp32.
    """
    if dtype == torch.bfloat16 and interpreted():
        return tl.float32
    return _TRITON_DTYPES[dtype]


@triton.jit
def dot(a, b, DOT_DTYPE: tl.constexpr):
    """a @ b accumulated in fp32, the operands cast to DOT_DTYPE."""
    return tl.dot(a.to(DOT_DTYPE), b.to(DOT_DTYPE), input_precision="ieee")
