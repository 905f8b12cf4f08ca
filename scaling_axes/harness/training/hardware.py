"""The GPUs the planner prices runs on, and the MFU it assumes: what `plan` and `run --dry-run` offer as options,
kept apart from the planning code so that the command line's help needs nothing else."""

GPUS = {"h100": 989.0, "h200": 989.0, "a100": 312.0, "l40s": 362.0}  # dense bf16 TFLOP/s per device (vendor peak)

# The whole-step MFU of a bf16 training step, the lowest of the suite's presets measured on a GPU, each at its
# fastest variant: RMT-305M, 16 x 512, eager, 13.8% on an H200 (torch 2.11; Transformer-405M 30.5% compiled,
# Tokenformer-150M 23.1%, transformer_124m 22.9%; results/gpu/h200-call2/training.csv). An H100 measured 20% for
# Transformer-405M before. `python -m scaling_axes bench-training` measures them on your GPU.
MEASURED_MFU = 0.138
MEASURED_MFU_SOURCE = "the lowest whole-step MFU measured, RMT-305M on an H200, bf16, eager"


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
