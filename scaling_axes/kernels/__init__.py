"""Fused Triton kernels, each with the PyTorch reference it must match and a dispatch that falls back to it.

Importing this package does not import Triton; the kernel modules do, when a model first selects them (`fused`).
A model file names a kernel by string rather than importing its module, so that the file runs where only torch is
installed (an exported model's remote code copies this file and the model's, not the kernels).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from torch import Tensor

Kernel = Literal["auto", "triton", "torch"]
KERNELS = ("auto", "triton", "torch")
HAS_TRITON = importlib.util.find_spec("triton") is not None  # looked up once: torch.compile traces use_triton


def check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"kernel={kernel!r}; allowed: {', '.join(KERNELS)}")


# kernel="auto" runs a family's fused ops only on the GPUs where they were measured faster than eager PyTorch under
# torch.compile (`python -m scaling_axes bench-kernels` -> results/bench_kernels.csv, and the README's table);
# anywhere else eager, which torch.compile fuses. Names as torch.cuda.get_device_name gives them.
MEASURED_FASTER: dict[str, frozenset[str]] = {
    # H200 (torch 2.11, results/gpu/h200-call1): the bf16 GEMMs + fused-pass kernel 0.97-1.38x eager and slower than
    # compiled eager at 150M-1.5B; a Tokenformer-150M step 84.8 ms compiled with it, 81.6 ms compiled without
    "pattention": frozenset(),
    # H100 80GB (torch 2.11): a whole RMT-305M bf16 step 134 ms fused, 162 ms eager (compiled eager crashed). H200
    # (torch 2.11, results/gpu/h200-call2): 112.1 ms fused, 103.6 ms eager: not on the H200
    "rmt": frozenset({"NVIDIA H100 80GB HBM3"}),
}


def use_triton(kernel: str, x: Tensor, family: str) -> bool:
    """`triton` always (on the CPU only under TRITON_INTERPRET=1), `torch` never, `auto` on a CUDA GPU where
    `family`'s fused ops were measured fastest (`MEASURED_FASTER`)."""
    if kernel == "auto":
        return x.is_cuda and HAS_TRITON and _device_name(x.device.index) in MEASURED_FASTER[family]
    return kernel == "triton"


def fused(name: str) -> Callable:
    """The Triton op `module:function` of this package, e.g. `fused("rmt:norm_retrieve")`."""
    module, function = name.split(":")
    try:
        return getattr(importlib.import_module(f"{__name__}.{module}"), function)
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"the fused kernel {name} ships with scaling-axes ({error.msg}): set the model config's kernel='torch'"
        ) from None


def _device_name(index: int | None) -> str:
    import torch  # here: a config that names its kernel imports no torch

    return torch.cuda.get_device_name(index)


# torch.compile takes the name as a constant: the mark `torch.compiler.assume_constant_result` sets, set here without
# it, which imports TorchDynamo (1.6 s) into every command that reads a model (tests/test_kernels.py checks the mark)
_device_name._dynamo_marked_constant = True


if __name__ == "kernels":  # the checkout's top-level `kernels` link, imported by its bare name (an export copies
    # this file under another name, and no `scaling_axes` import, which its remote code could not carry)
    importlib.import_module("scaling_axes").bare_import(__name__)
