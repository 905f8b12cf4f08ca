"""The GPUs the planner prices runs on, and the MFU it assumes: what `plan` and `run --dry-run` offer as options,
kept apart from the planning code so that the command line's help needs nothing else."""

GPUS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "l40s": 362.0}  # dense bf16 TFLOP/s per device (vendor peak)

# The whole-step MFU of a bf16 training step, torch.compile'd, measured on an H100 80GB (torch 2.11): the lowest of
# the suite's presets measured (the RMT paper's Transformer-405M, 16 x 512; Tokenformer-150M was 23%,
# transformer_124m 30%; issue 23's table). `python -m scaling_axes bench-training` measures them on your GPU.
MEASURED_MFU = 0.20
MEASURED_MFU_SOURCE = "Transformer-405M step measured on an H100, bf16, compiled"


class CpuRun:
    """One cpu-scale run's time on this suite's build machine, one thread: a fixed part plus its training FLOPs at a
    rate (measured: cross-architecture Transformer 6.4e11 FLOPs in 16.4 s, RMT-305M 1.28e12 in 31 s, Tokenformer
    Fig. 7 354M 1.61e12 in 38.4 s; x86_64, torch 2.14.1, 2026-11-28)."""

    flops_per_s = 4.4e10
    fixed_s = 2.0

    @classmethod
    def seconds(cls, train_flops: float) -> float:
        return cls.fixed_s + train_flops / cls.flops_per_s


def dense_bf16_tflops(device_name: str) -> float | None:
    """`GPUS`' dense bf16 peak of the GPU whose key the device's name holds ("NVIDIA H200" -> h200), else None."""
    name = device_name.lower()
    return next((tflops for key, tflops in GPUS.items() if key in name), None)
