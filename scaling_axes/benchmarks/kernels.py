"""Kernel speed on a CUDA GPU: ``python -m scaling_axes bench-kernels`` -> ``results/bench_kernels.csv``.

Forward + backward in bf16, median of `--repeats` timings with CUDA events after warm-up, random inputs.

* Pattention at the Tokenformer 150M / 450M / 1.5B widths (d = n_qkv = 768 / 1024 / 2048, and the FFN's n = 4d),
  tokens = 8 x 2048: (a) the eager module, (b) the eager module under `torch.compile`, (c) the fused Triton kernel,
  (d) an `nn.Linear` MLP d -> n -> d with the same matmul FLOPs; and the three Q/K/V Pattentions of a layer, eager
  vs one grouped launch. Targets: the FFN's (c) at least 1.5x faster than (a) and within 1.15x of (d); the grouped
  launch faster than the three eager calls.
* The RMT-305M sublayers (D_k = D_v = 64, R = 16, D_FF = 4096), tokens = 16 x 512 (the paper's window): the
  attention and FF reads (norm + retrieval), the attention write (storage + residual add), and whole attention and
  FF sublayers, eager vs `torch.compile` vs fused. Targets: each fused read and write faster than eager and than
  compiled eager; each fused sublayer at least 1.3x faster than eager.

After the CSV, one line per target: the ratio measured, the target, met or NOT met.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Hashable, Iterator, Mapping
from functools import partial
from pathlib import Path

import torch
from torch import Tensor, nn

from scaling_axes.benchmarks.common import add_keep_option, failure, kept_rows, time_ms
from scaling_axes.harness.scales import in_range
from scaling_axes.io import write_csv
from scaling_axes.modules.architectures.rmt import RMTAttention, RMTFeedForward, matrix_norm
from scaling_axes.modules.architectures.tokenformer import Pattention, QKVPattention
from scaling_axes.modules.registry import get_config, replace_config

PATTENTION_WIDTHS = {"tokenformer_150m": 768, "tokenformer_450m": 1024, "tokenformer_1_5b": 2048}
PATTENTION_TOKENS = 8 * 2048
RMT_PRESET, RMT_BATCH, RMT_SEQ = "rmt_305m", 16, 512
DEVICE, DTYPE = "cuda", torch.bfloat16  # (the test runs it tiny on the CPU to show it runs)
COLUMNS = ("gpu", "torch", "model", "layer", "shape", "variant", "median_ms", "tflops", "speedup_vs_eager", "error")

Case = tuple[str, str, str, float | None, dict[str, Callable[[], Tensor]]]  # model, layer, shape, flops, variants
FFN_VS_EAGER, FFN_VS_LINEAR, SUBLAYER_VS_EAGER = 1.5, 1.15, 1.3  # speedups asked of the fused kernels (x)


def use_toy_sizes() -> None:
    """Toy shapes on the CPU, the Triton kernels interpreted (`gpu-check --tiny`: the command proven, nothing
    measured)."""
    global DEVICE, DTYPE, PATTENTION_WIDTHS, PATTENTION_TOKENS, RMT_BATCH, RMT_SEQ
    DEVICE, DTYPE, PATTENTION_WIDTHS, PATTENTION_TOKENS, RMT_BATCH, RMT_SEQ = "cpu", torch.float32, {"toy": 16}, 5, 1, 2


def _cuda(module: nn.Module) -> nn.Module:
    for p in module.parameters():
        nn.init.normal_(p, std=0.02)
    return module.to(DEVICE, DTYPE)


def _input(*shape: int) -> Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=DTYPE, requires_grad=True)


def pattention_cases() -> Iterator[Case]:
    for model, d in PATTENTION_WIDTHS.items():
        x = _input(PATTENTION_TOKENS, d)
        for layer, slots in (("qkv", d), ("ffn", 4 * d)):
            eager, fused = _cuda(Pattention(d, d, slots, kernel="torch")), Pattention(d, d, slots, kernel="triton")
            _cuda(fused).load_state_dict(eager.state_dict())
            mlp = _cuda(nn.Sequential(nn.Linear(d, slots, bias=False), nn.GELU(), nn.Linear(slots, d, bias=False)))
            modules = {"eager": eager, "compiled": torch.compile(eager), "triton": fused, "linear_mlp": mlp}
            flops = 3 * 2 * 2 * PATTENTION_TOKENS * d * slots  # two matmuls, forward + backward = 3 x forward
            shape = f"{PATTENTION_TOKENS} x {d}->{slots}->{d}"
            yield model, f"pattention_{layer}", shape, flops, {k: partial(m, x) for k, m in modules.items()}
        qkv = {k: QKVPattention(partial(Pattention, d, d, d, kernel=k)) for k in ("torch", "triton")}
        _cuda(qkv["triton"]).load_state_dict(_cuda(qkv["torch"]).state_dict())
        shape, flops = f"{PATTENTION_TOKENS} x 3 x {d}->{d}->{d}", 3 * 3 * 2 * 2 * PATTENTION_TOKENS * d * d
        yield (
            model,
            "pattention_q_k_v",
            shape,
            flops,
            {"eager": partial(qkv["torch"], x), "triton": partial(qkv["triton"], x)},
        )


def _rmt_sublayers(kernel: str, x: Tensor, heads: Tensor) -> dict[str, Callable[[], Tensor]]:
    config = replace_config(get_config(RMT_PRESET), kernel=kernel)
    norm, attention, ffn = _cuda(matrix_norm(config)), _cuda(RMTAttention(config, 0)), _cuda(RMTFeedForward(config))
    return {
        "attention_read": partial(attention.qkv, x, norm),
        "attention_write": partial(attention.out, x, heads),
        "ffn_read": partial(ffn.retrieval, x, norm),
        "attention_sublayer": partial(attention, x, norm, None),
        "ffn_sublayer": partial(ffn, x, norm),
    }


def rmt_cases() -> Iterator[Case]:
    c = get_config(RMT_PRESET)
    x = _input(RMT_BATCH, RMT_SEQ, c.d_value, c.d_key)
    heads = _input(RMT_BATCH, c.rank, RMT_SEQ, c.d_value)
    shape = f"{RMT_BATCH * RMT_SEQ} x D_v {c.d_value} x D_k {c.d_key}, R {c.rank}"
    eager, fused = _rmt_sublayers("torch", x, heads), _rmt_sublayers("triton", x, heads)
    for layer, forward in eager.items():
        yield (
            RMT_PRESET,
            layer,
            shape,
            None,
            {"eager": forward, "compiled": torch.compile(forward), "triton": fused[layer]},
        )


def row_key(row: dict) -> tuple[str, ...]:
    """What a row measured (the GPU, model, layer and variant): the key a rerun keeps it by."""
    return row["gpu"], row["model"], row["layer"], row["variant"]


def bench(
    repeats: int,
    rows: list[dict],
    save: Callable[[list[dict]], object] = lambda rows: None,
    kept: Mapping[Hashable, dict] | None = None,
) -> list[dict]:
    """Append a row per case and variant to `rows`, calling `save` after each (a time box's SIGKILL runs no
    `finally`: what is saved is what it leaves); a variant that fails is a row with its `error`, and the rest go
    on; a row of `kept` (an earlier run's, by gpu, model, layer and variant) is taken as measured."""
    kept = kept or {}
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    for model, layer, shape, flops, variants in itertools.chain(pattention_cases(), rmt_cases()):
        eager_ms = None
        for name, forward in variants.items():

            def step(forward=forward) -> None:
                out = forward()
                out.backward(torch.ones_like(out))

            row = {
                "gpu": gpu,
                "torch": torch.__version__,
                "model": model,
                "layer": layer,
                "shape": shape,
                "variant": name,
            }
            if earlier := kept.get(row_key(row)):
                row = {**earlier, "median_ms": float(earlier["median_ms"])}
                eager_ms = eager_ms or (row["median_ms"] if name == "eager" else None)
                rows.append(row)
                save(rows)
                continue
            try:
                ms = time_ms(step, repeats)
            except Exception as error:  # a failing kernel or compile is a result too
                row["error"] = failure(error)
            else:
                eager_ms = eager_ms or (ms if name == "eager" else None)
                row.update(
                    median_ms=round(ms, 4),
                    tflops=round(flops / ms / 1e9, 2) if flops else "",
                    speedup_vs_eager=round(eager_ms / ms, 3) if eager_ms else "",
                )
            rows.append(row)
            print(row, flush=True)
            save(rows)
    return rows


def targets(rows: list[dict]) -> list[str]:
    """One line per target that the rows can judge: the speedup measured (baseline ms / fused ms), met or not."""
    ms = {(r["model"], r["layer"], r["variant"]): r["median_ms"] for r in rows if r.get("median_ms")}
    asked = []  # (what, baseline, fused, least speedup)
    for model in dict.fromkeys(r["model"] for r in rows if r["layer"].startswith("pattention")):  # as measured
        asked += [
            (f"{model} FFN Pattention vs eager", (model, "pattention_ffn", "eager"), FFN_VS_EAGER),
            (
                f"{model} FFN Pattention vs the equal-FLOP Linear MLP",
                (model, "pattention_ffn", "linear_mlp"),
                1 / FFN_VS_LINEAR,
            ),
            (f"{model} grouped Q/K/V vs eager", (model, "pattention_q_k_v", "eager"), 1.0),
        ]
    for layer in ("attention_read", "attention_write", "ffn_read"):
        asked += [(f"RMT {layer} vs {v}", (RMT_PRESET, layer, v), 1.0) for v in ("eager", "compiled")]
    asked += [
        (f"RMT {layer} vs eager", (RMT_PRESET, layer, "eager"), SUBLAYER_VS_EAGER)
        for layer in ("attention_sublayer", "ffn_sublayer")
    ]
    lines = []
    for what, baseline, least in asked:
        fused = ms.get((*baseline[:2], "triton"))
        if fused and ms.get(baseline):
            speedup = ms[baseline] / fused
            verdict = "met" if speedup >= least else "NOT met"
            lines.append(f"{what}: {speedup:.2f}x (target >= {least:.3g}x): {verdict}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=in_range(int, 1), default=50)
    parser.add_argument("--out", type=Path, default=Path("results/bench_kernels.csv"))
    add_keep_option(parser)
    args = parser.parse_args(argv)
    kept = kept_rows(args.keep, row_key)
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "bench-kernels measures speed on a CUDA GPU; none is visible here (timings on the CPU or "
            "under TRITON_INTERPRET mean nothing)"
        )
    rows = []
    try:
        bench(args.repeats, rows, save=lambda done: write_csv(args.out, COLUMNS, done), kept=kept)
    finally:
        print(write_csv(args.out, COLUMNS, rows))
        print("\n".join(targets(rows)))
