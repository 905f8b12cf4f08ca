"""Fused Triton kernels, each with the PyTorch reference it must match and a dispatch that falls back to it.

Importing this package does not import Triton; the kernel modules do, when a model first selects them.
"""

from __future__ import annotations

import importlib.util
from typing import Literal

from torch import Tensor

Kernel = Literal["auto", "triton", "torch"]
KERNELS = ("auto", "triton", "torch")
HAS_TRITON = importlib.util.find_spec("triton") is not None  # looked up once: torch.compile traces use_triton


def check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r}; allowed: {', '.join(KERNELS)}")


def use_triton(kernel: str, x: Tensor) -> bool:
    """`triton` always (on the CPU only under TRITON_INTERPRET=1), `torch` never, `auto` on CUDA with Triton."""
    if kernel == "auto":
        return x.is_cuda and HAS_TRITON
    return kernel == "triton"
