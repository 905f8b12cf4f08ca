"""What a GPU run adds to training, shared by the LightningModules: the default precision, gradient clipping that
works with fused optimizers under bf16-mixed, and `torch.compile` of the model."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the launch planner reads this module: torch and Lightning are imported by what trains
    import lightning as L
    import torch
    from torch import nn


def on_cuda(accelerator: str = "auto") -> bool:
    """Whether a Trainer with `accelerator` trains on a CUDA GPU."""
    if accelerator not in ("auto", "gpu", "cuda"):
        return False
    import torch  # here: a launch planned on the CPU imports no torch

    return torch.cuda.is_available()


def default_precision(accelerator: str = "auto") -> str:
    """bf16-mixed on a CUDA GPU (the papers trained in mixed precision), 32-true on the CPU."""
    return "bf16-mixed" if on_cuda(accelerator) else "32-true"


# glibc's mallopt parameters (malloc.h): allocations above M_MMAP_THRESHOLD get pages of their own, and a freed
# heap top above M_TRIM_THRESHOLD goes back to the operating system
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's ceiling on 64-bit systems


@functools.cache
def keep_freed_host_memory() -> bool:
    """Make glibc keep freed host memory for the next allocation instead of returning it to the system.

    PyTorch's CPU allocator is plain malloc: a step's large buffers (a cpu-scale batch's logits are 16 MB) are
    mapped fresh and freed every step, so each step page-faults and zeroes them again, a third of a cpu-scale
    Transformer step (50 -> 34 ms measured, 2 cores). Raising the mmap and trim thresholds keeps those pages in the
    heap. Returns whether it applied (False off glibc, where this is left to the system's allocator)."""
    libc = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(libc), "mallopt", None) if libc else None
    if mallopt is None:
        return False
    return all(
        mallopt(option, value) == 1
        for option, value in ((M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX), (M_TRIM_THRESHOLD, 2**30), (M_TOP_PAD, 2**26))
    )


def clip_gradients(
    module: L.LightningModule, optimizer: torch.optim.Optimizer, clip_val: float | None, algorithm: str | None
) -> None:
    """Clip the gradients to norm `clip_val` and log their norm before clipping as `train/grad_norm`.

    Lightning's mixed-precision plugin refuses to clip for an optimizer that unscales inside `step()` (fused AdamW):
    under fp16 its gradients would still be scaled. Under bf16-mixed and 32-true there is no scaler, the gradients
    are the true ones, and clipping them here is right. Under fp16-mixed Lightning's own path (unscale, then clip)
    runs, and still refuses a fused optimizer. Sharded (FSDP2) gradients are DTensors: their total norm is reduced
    over the ranks before it scales them, as torchtitan does.
    """
    if not clip_val:
        return
    if getattr(module.trainer.precision_plugin, "scaler", None) is not None or algorithm == "value":
        module.clip_gradients(optimizer, clip_val, algorithm)
        return
    import torch
    from torch.distributed.tensor import DTensor  # here: 1 s to import, and the launch planner reads this module

    params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True)
    if isinstance(norm, DTensor):
        norm = norm.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, clip_val, norm, foreach=True)
    module.log("train/grad_norm", norm)


def wants_compile(compile: bool | None, device: torch.device) -> bool:
    """`compile`, or when it is None (the default), whether the run is on a CUDA GPU."""
    return device.type == "cuda" if compile is None else compile


def compile_model(model: nn.Module) -> None:
    """`torch.compile` the model in place (`nn.Module.compile`: its state-dict keys, and so checkpoints, do not
    change). Under FSDP2 Dynamo runs the sharding hooks eagerly between the compiled blocks."""
    if getattr(model, "_compiled_call_impl", None) is None:  # validate() after fit() configures the model again
        model.compile()
