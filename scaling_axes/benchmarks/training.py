"""One training step per architecture on a CUDA GPU: ``python -m scaling_axes bench-training`` ->
``results/bench_training.csv``.

A step is what `--precision bf16-mixed` training runs: `LanguageModel.loss` under bf16 autocast, backward, gradient
clipping at 1.0 and the fused AdamW step on float32 master weights; the median of `--repeats` CUDA-event timings
after warm-up, peak memory from `torch.cuda.max_memory_allocated`, random token ids. Variants: `eager` (PyTorch
ops), `fused` (the Triton kernels of `kernels/`, for the architectures that have them: Tokenformer and RMT),
`compiled` (`LanguageModel.compile_training`: the eager model and, apart, its loss) and `compiled_fused` (the kernels
as ops inside the compiled graph: what training runs by default on a GPU). The z-loss is the one the case's
experiment trains with (1e-4 in the RMT paper's and the cross-architecture runs, none in Tokenformer's or nanoGPT's).
A case that fails is a row with its `error`, and the others go on; the CSV is written whatever happens. The MoT
runs on random ids; without the GPT-2 tokenizer file its byte tables are synthetic (same shapes and padding, random
bytes; the `note` says so). MFU = training FLOPs per token (3 x forward
matmul FLOPs, counted per architecture) x tokens/s / the GPU's dense bf16 peak as Lightning knows it
(`mfu_peak_tflops`).

Families (`--family`):
* `rmt_paper`: the RMT paper's pair, the 405M Transformer and the 305M RMT, 16 x 512 tokens (their window).
* `tokenformer_150m`: Tokenformer-150M (12 x 768, 8 x 2048 tokens) and the Transformer, RMT and MoT at its depth
  and width (shapes as in `scaling_axes.experiments.cross_architecture.table`).
* `cross_arch_125m`, `cross_arch_350m`: the cross-architecture experiment's paper shapes, 8 x 1024 tokens.
* `gpt2_124m`: `transformer_124m` and a plain nanoGPT-style GPT-2 (`benchmarks/nanogpt_reference.py`), 16 x 1024.

Targets: an RMT step at most 1.15x the Transformer's in `rmt_paper` (the paper measured 7.17 s against
4.06 s per step, 1.77x; RMT reference section 4) and MFU of at least 45% for the Tokenformer-150M and Transformer
steps of `tokenformer_150m`; the compiled `transformer_124m` step within 5% of the compiled nanoGPT-style one.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

from scaling_axes.benchmarks import nanogpt_reference
from scaling_axes.benchmarks.common import add_keep_option, failure, kept_rows, time_ms
from scaling_axes.benchmarks.training_targets import against_transformer, judged, numeric, targets
from scaling_axes.datamodules.tokenizers import load_tokenizer
from scaling_axes.experiments.cross_architecture import setup as cross
from scaling_axes.experiments.cross_architecture.recipes import recipe_at
from scaling_axes.experiments.rmt import setup as rmt
from scaling_axes.harness.scales import PAPER, SMOKE, in_range
from scaling_axes.harness.training.callbacks import peak_flops
from scaling_axes.io import atomic_write, read_rows, write_csv
from scaling_axes.modules import get_config
from scaling_axes.modules.flops import train_flops_per_token
from scaling_axes.modules.tasks.acceleration import compile_model
from scaling_axes.modules.tasks.lm import LanguageModel

DEVICE, DTYPE = "cuda", torch.bfloat16  # (`use_toy_sizes`: tiny on the CPU, to show it runs)
COLUMNS = (
    "gpu",
    "torch",
    "precision",
    "family",
    "architecture",
    "model",
    "params",
    "tokens_per_step",
    "variant",
    "step_ms",
    "tokens_per_s",
    "tflops",
    "mfu",
    "mfu_peak_tflops",
    "peak_memory_gib",
    "vs_transformer_best",
    "note",
    "error",
)


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    architecture: str
    model: str  # a preset, with `overrides`
    overrides: dict[str, Any]
    batch: int
    seq_len: int
    z_loss: float  # as the experiment that trains it: the RMT paper's and the cross-architecture runs' 1e-4, else 0

    @property
    def variants(self) -> tuple[str, ...]:
        fused = self.architecture in ("tokenformer", "rmt")
        return ("eager", "fused", "compiled", "compiled_fused") if fused else ("eager", "compiled")


def cases() -> list[Case]:
    paper_shapes = recipe_at(PAPER).shapes
    width_of_150m = dataclasses.replace(paper_shapes["125m"], n_layer=12)  # 12 x 768, as Tokenformer-150M
    rmt_z, cross_z = rmt.lm_options()["z_loss"], cross.LM["z_loss"]
    at_150m = {arch: cross.ARM[arch].shape(width_of_150m, 2048) for arch in ("transformer", "rmt", "mot")}
    found = [  # the cases that judge a target first: a time box cuts from the end
        Case("rmt_paper", "transformer", "transformer_rmt_405m", {}, 16, 512, rmt_z),
        Case("rmt_paper", "rmt", "rmt_305m", {}, 16, 512, rmt_z),
        Case("tokenformer_150m", "tokenformer", "tokenformer_150m", {}, 8, 2048, 0.0),
        Case("tokenformer_150m", "transformer", cross.ARM["transformer"].preset, at_150m["transformer"], 8, 2048, 0.0),
        Case("gpt2_124m", "transformer", "transformer_124m", {}, 16, 1024, 0.0),
        Case("gpt2_124m", "nanogpt", "nanogpt_reference", {}, 16, 1024, 0.0),
    ]
    found += [
        Case("tokenformer_150m", arch, cross.ARM[arch].preset, at_150m[arch], 8, 2048, 0.0) for arch in ("rmt", "mot")
    ]
    found += [
        Case(
            f"cross_arch_{size}",
            arch,
            cross.ARM[arch].preset,
            cross.ARM[arch].shape(paper_shapes[size], 1024),
            8,
            1024,
            cross_z,
        )
        for size in cross.SIZES
        for arch in cross.ARCHITECTURES
    ]
    return found


def use_toy_sizes() -> None:
    """Toy shapes of every family on the CPU (`gpu-check --tiny`: the command proven, nothing measured)."""
    global DEVICE, DTYPE, cases
    tiny = recipe_at(SMOKE).shapes["125m"]
    toy = [
        Case(c.family, c.architecture, c.model, cross.ARM[c.architecture].shape(tiny, 8), 2, 8, c.z_loss)
        for c in cases()
        if c.architecture in cross.ARM
    ]
    toy += [c for c in cases() if c.architecture == "nanogpt"]
    DEVICE, DTYPE, cases = "cpu", torch.float32, lambda: [dataclasses.replace(c, batch=2, seq_len=8) for c in toy]


Step = tuple[Callable[[Tensor, Tensor], Tensor], nn.Module, torch.optim.Optimizer, Any]  # loss, model, optimizer,
# the config whose FLOPs it runs


def build(case: Case, variant: str) -> Step:
    """The LightningModule as training builds it (its fused AdamW and parameter groups, compiled in place as
    `compile=True` does), on the device; or the nanoGPT-style reference."""
    if case.architecture == "nanogpt":
        model = nanogpt_reference.GPT(seq=case.seq_len).to(DEVICE)
        if variant == "compiled":
            compile_model(model)
        return model, model, nanogpt_reference.optimizer(model), get_config("transformer_124m")  # its matmuls
    overrides = dict(case.overrides)
    if case.architecture in ("tokenformer", "rmt"):
        overrides["kernel"] = "triton" if variant.endswith("fused") else "torch"
    if case.architecture == "mot" and not gpt2_tokenizer_present():
        overrides["byte_table"] = "synthetic"
    module = LanguageModel(
        model=case.model, model_overrides=overrides, schedule_steps=1, warmup_steps=0, z_loss=case.z_loss
    )
    module = module.to(DEVICE)
    optimizer = module.configure_optimizers()["optimizer"]
    if variant.startswith("compiled"):
        module.compile_training()

    def loss(inputs: Tensor, targets: Tensor) -> Tensor:
        ce, z = module.loss(inputs, targets)
        return ce + module.hparams.z_loss * z

    return loss, module, optimizer, module.model.config


def gpt2_tokenizer_present() -> bool:
    try:
        load_tokenizer("gpt2")
    except FileNotFoundError:
        return False
    return True


def _step(case: Case, variant: str) -> Callable[[], None]:
    """One training step of `case` as `variant` builds it, on random token ids; the step has `.module` and
    `.config` for what it measured."""
    loss_of, module, optimizer, config = build(case, variant)
    tokens = torch.randint(0, min(config.vocab_size, 50257), (case.batch, case.seq_len + 1), device=DEVICE)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> None:
        with torch.autocast(torch.device(DEVICE).type, dtype=DTYPE, enabled=DTYPE != torch.float32):
            loss = loss_of(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step.module, step.config = module, config
    return step


def measure(case: Case, variant: str, repeats: int) -> dict[str, Any]:
    step = _step(case, variant)
    module, config = step.module, step.config
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ms = time_ms(step, repeats)
    per_step = case.batch * case.seq_len
    flops = train_flops_per_token(config, case.seq_len) * per_step
    peak = _peak()
    memory = torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else None
    synthetic = getattr(config, "byte_table", "") == "synthetic"
    return {
        "params": sum(p.numel() for p in module.parameters()),
        "tokens_per_step": per_step,
        "step_ms": round(ms, 3),
        "tokens_per_s": round(per_step / ms * 1000),
        "tflops": round(flops / ms / 1e9, 1),
        "mfu": round(flops / ms * 1000 / peak, 4) if peak else None,
        "mfu_peak_tflops": round(peak / 1e12, 1) if peak else None,
        "peak_memory_gib": round(memory, 2) if memory is not None else None,
        "note": "synthetic byte tables (no GPT-2 tokenizer file)" if synthetic else "",
    }


def _peak() -> float | None:
    return peak_flops(torch.device(DEVICE), DTYPE)


def _with_mfu(row: dict) -> dict:
    """A kept row with its MFU, from its TFLOP/s and this device's peak, where the run that measured it had none."""
    peak = _peak()
    if row.get("mfu") is not None or not peak or not row.get("tflops"):
        return row
    return {**row, "mfu": round(float(row["tflops"]) * 1e12 / peak, 4), "mfu_peak_tflops": round(peak / 1e12, 1)}


def profile_missed(measured: Path, out: Path, steps: int = 5) -> None:
    """torch.profiler's table of the kernels (on a GPU; operators on the CPU) of the step of the target furthest from
    being met, from the rows of a finished benchmark (`measured`, its CSV), written to `out`."""
    if not measured.exists():
        atomic_write(out, f"{measured} was not written (see the training part in log.txt): nothing profiled\n")
        return
    missed = [each for each in judged(numeric(read_rows(measured))) if not each.met]
    if not missed:
        atomic_write(out, "every training target met (or none measured): nothing profiled\n")
        return
    worst = max(missed, key=lambda each: each.shortfall)
    family, architecture, variant = worst.case
    case = next(c for c in cases() if (c.family, c.architecture) == (family, architecture))
    step = _step(case, variant)
    for _ in range(3):  # warm up (a compiled variant compiles here)
        step()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])]
    with profile(activities=activities) as profiler:
        for _ in range(steps):
            step()
    sort = "cuda_time_total" if DEVICE == "cuda" else "cpu_time_total"
    table = profiler.key_averages().table(sort_by=sort, row_limit=30)
    atomic_write(out, f"{worst.line}\nprofiled: {family} {architecture} {variant}, {steps} steps\n\n{table}\n")


def row_key(row: dict) -> tuple[str, ...]:
    """What a row measured (the GPU, family, architecture and variant): the key a rerun keeps it by."""
    return row["gpu"], row["family"], row["architecture"], row["variant"]


def bench(
    families: list[str] | None,
    repeats: int,
    rows: list[dict],
    save: Callable[[list[dict]], object] = lambda rows: None,
    kept: Mapping[Hashable, dict] | None = None,
) -> list[dict]:
    """Append one row per case and variant to `rows`, calling `save` after each (a time box's SIGKILL runs no
    `finally`: what is saved is what it leaves); a row of `kept` (an earlier run's, by gpu, family, architecture and
    variant) is taken as measured, its MFU computed where that run knew no peak."""
    gpu = torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE
    kept = kept or {}
    for case in cases():
        if families and case.family not in families:
            continue
        for variant in case.variants:
            row = {
                "gpu": gpu,
                "torch": torch.__version__,
                "precision": "bf16-mixed",
                "family": case.family,
                "architecture": case.architecture,
                "model": case.model,
                "variant": variant,
            }
            if earlier := kept.get(row_key(row)):
                rows.append(_with_mfu(numeric([earlier])[0]))
                save(rows)
                continue
            try:
                row.update(measure(case, variant, repeats))
            except Exception as error:  # a failing case is a result too; the others still run
                row.update(step_ms=None, error=failure(error))
            finally:
                torch._dynamo.reset()  # let the next case's compiled graphs replace this one's
                if DEVICE == "cuda":
                    torch.cuda.empty_cache()
            rows.append(row)
            print(row, flush=True)
            save(rows)
    against_transformer(rows)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--family",
        action="append",
        choices=sorted({c.family for c in cases()}),
        help="only these families (repeatable; default: all)",
    )
    parser.add_argument("--repeats", type=in_range(int, 1), default=20)
    parser.add_argument("--out", type=Path, default=Path("results/bench_training.csv"))
    add_keep_option(parser)
    args = parser.parse_args(argv)
    kept = kept_rows(args.keep, row_key)
    if DEVICE == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "bench-training times training steps on a CUDA GPU and none is visible here; run "
            "it on a GPU machine (CPU timings would say nothing about the kernels or MFU)"
        )
    rows = []
    try:
        bench(args.family, args.repeats, rows, save=lambda done: write_csv(args.out, COLUMNS, done), kept=kept)
    finally:
        print(write_csv(args.out, COLUMNS, rows))
    print("\n".join(targets(rows)))
