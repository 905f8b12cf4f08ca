"""Pattention speed on a CUDA GPU: ``python -m kernels.bench`` -> ``results/bench_kernels.csv``.

Forward + backward, bf16, tokens = 8 x 2048, at the Tokenformer 150M / 450M / 1.5B widths (d = n_qkv = 768 / 1024 /
2048, and the FFN's n = 4d): (a) the eager module, (b) the eager module under `torch.compile`, (c) the fused Triton
kernel, (d) an `nn.Linear` MLP d -> n -> d with the same matmul FLOPs. Median of `--repeats` timings with CUDA events
after warm-up, random inputs. Targets (issue 7): (c) at least 1.5x faster than (a) and within 1.15x of (d).
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from modules.atomic import atomic_write
from modules.tokenformer import Pattention

SHAPES = {"tokenformer_150m": 768, "tokenformer_450m": 1024, "tokenformer_1_5b": 2048}
TOKENS = 8 * 2048
COLUMNS = ("gpu", "model", "layer", "d", "slots", "variant", "median_ms", "tflops", "speedup_vs_eager")


def time_ms(step: Callable[[], None], repeats: int, warmup: int = 5) -> float:
    """Median milliseconds of `step` by CUDA events, after `warmup` untimed calls."""
    for _ in range(warmup):
        step()
    timings = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        timings.append(start.elapsed_time(end))
    return statistics.median(timings)


def variants(d: int, slots: int) -> dict[str, nn.Module]:
    eager = Pattention(d, d, slots, kernel="torch")
    fused = Pattention(d, d, slots, kernel="triton")
    fused.load_state_dict(eager.state_dict())
    mlp = nn.Sequential(nn.Linear(d, slots, bias=False), nn.GELU(), nn.Linear(slots, d, bias=False))
    return {"eager": eager, "compiled": torch.compile(eager), "triton": fused, "linear_mlp": mlp}


def bench(repeats: int) -> list[dict]:
    gpu, rows = torch.cuda.get_device_name(), []
    for model, d in SHAPES.items():
        for layer, slots in (("qkv", d), ("ffn", 4 * d)):
            flops = 3 * 2 * 2 * TOKENS * d * slots  # two matmuls, forward + backward = 3 x forward
            eager_ms = None
            for name, module in variants(d, slots).items():
                for p in module.parameters():
                    nn.init.normal_(p, std=0.02)
                module = module.cuda().to(torch.bfloat16)
                x = torch.randn(TOKENS, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                grad = torch.randn(TOKENS, d, device="cuda", dtype=torch.bfloat16)

                def step(module=module, x=x, grad=grad) -> None:
                    module(x).backward(grad)

                ms = time_ms(step, repeats)
                eager_ms = eager_ms or ms
                rows.append({"gpu": gpu, "model": model, "layer": layer, "d": d, "slots": slots, "variant": name,
                             "median_ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 2),
                             "speedup_vs_eager": round(eager_ms / ms, 3)})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path("results/bench_kernels.csv"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kernels.bench measures speed on a CUDA GPU; none is visible here (timings on the CPU or "
                         "under TRITON_INTERPRET mean nothing)")  # fmt: skip
    rows = bench(args.repeats)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(args.out, buffer.getvalue())
    print(buffer.getvalue())


if __name__ == "__main__":
    main()
