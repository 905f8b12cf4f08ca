"""Plans before training: parameters, FLOPs, memory, GPU-hours of every run of an experiment (`--dry-run`)."""

from __future__ import annotations

import math
from typing import Any

from scaling_axes.datamodules.corpora import split_tokens
from scaling_axes.harness.experiment.schedule import chain_epochs
from scaling_axes.harness.runs import Experiment, Run, default_runs, with_seeds
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import planned_points, sweep_point
from scaling_axes.harness.training.hardware import MEASURED_MFU, MEASURED_MFU_SOURCE
from scaling_axes.modules.flops import formula_params, train_flops_per_token
from scaling_axes.modules.registry import architecture_of

RUN_OVERHEAD_S = 20.0  # per run, an estimate: start-up, data, first steps and validations, without torch.compile


def memory_estimate(config: Any, micro_batch: int, seq_len: int, precision: str | None) -> float:
    """Peak training memory per device in bytes, roughly: 16 bytes per parameter (fp32 weights, gradients, Adam's
    two moments) plus activations kept for backward, about 34 x residual width values per token and layer (the
    Korthikanti et al. count with flash attention) in the compute precision, plus the fp32 logits and their gradient."""
    architecture = architecture_of(config)
    params = sum(architecture.params(config).values())
    width, layers, outputs = architecture.width(config), architecture.depth(config), architecture.outputs(config)
    tokens = micro_batch * seq_len
    activation_bytes = 2 if precision and ("16" in precision) else 4
    return 16 * params + 34 * width * layers * tokens * activation_bytes + 8 * tokens * outputs


def dry_run(
    experiment: Experiment,
    scale: Scale,
    mfu: float,
    peak_tflops: float,
    devices: int,
    precision: str | None = "bf16-mixed",
    seeds: int = 1,
    overhead_s: float = RUN_OVERHEAD_S,
) -> list[dict]:
    """Per run: parameters, FLOPs per token, total training FLOPs, peak memory per device for its micro-batch, and
    time and GPU-hours at `mfu` of `devices` x `peak_tflops` plus `overhead_s` a run; every run at seeds
    1..`seeds`, and each sweep's points (its grid; an extension past an edge costs one more run each)."""
    plan, declared = [], default_runs(experiment, scale)
    points = [sweep_point(r, lr, draw) for r in declared if r.sweep for lr, draw in planned_points(r.sweep)]
    for run in points + with_seeds(declared, seeds):
        config, budget = run.config, run.budget
        per_token = train_flops_per_token(config, budget.seq_len)
        flops = per_token * budget.tokens  # = run.train_flops()
        seconds = flops / (mfu * peak_tflops * 1e12 * devices) + overhead_s
        micro = budget.micro_batch_on(devices)
        plan.append(
            {
                "run": run.name,
                "model": run.model,
                "params": sum(formula_params(config).values()),
                "train_flops_per_token": per_token,
                "tokens": budget.tokens,
                "epochs": _epochs(experiment, scale, run),
                "steps": budget.steps,
                "train_flops": flops,
                "micro_batch": micro,
                "memory_gib": memory_estimate(config, micro, budget.seq_len, precision) / 2**30,
                "hours": seconds / 3600,
                "gpu_hours": seconds * devices / 3600,
            }
        )
    return plan


def evaluation_tokens(run: Run, scale: Scale) -> int | None:
    """Tokens `run`'s evaluations read: each curve point before the end its windows (or its whole validation split),
    and at the end a validation and a test, of the whole splits where `scale` reads them (else a point's windows
    each). None for an image run, or where a split's size is not known here (a corpus not yet prepared)."""
    if run.classifies_images:
        return None
    budget = run.budget
    before_end = ((budget.steps - 1) // budget.val_every if budget.val_every else 0) + budget.val_at_start
    whole = {split: split_tokens(run.corpus, split, run.tokenizer) for split in ("val", "test")}
    point = whole["val"] if budget.val_windows is None else budget.val_windows * budget.seq_len
    final = whole["val"] + whole["test"] if None not in whole.values() else None
    if not scale.whole_final_evaluation:
        final = None if point is None else 2 * point
    return None if point is None or final is None else before_end * point + final


def evaluation_hours(run: Run, tokens: int | None, mfu: float, peak_tflops: float) -> float:
    """GPU-hours of `run`'s evaluations of `tokens` (`evaluation_tokens`; a forward each, a third of a training
    token's FLOPs) at `mfu` of one `peak_tflops` device; nan where the tokens are not known."""
    per_token = train_flops_per_token(run.config, run.budget.seq_len) / 3
    return math.nan if tokens is None else tokens * per_token / (mfu * peak_tflops * 1e12) / 3600


def _epochs(experiment: Experiment, scale: Scale, run: Run) -> float:
    """Passes over the run's training data, its growth chain's on the same data included (nan when its corpus is
    neither prepared nor estimable here)."""
    try:
        return chain_epochs(experiment, scale, run)[0]
    except FileNotFoundError:
        return math.nan


def print_plan(
    plan: list[dict], mfu: float, peak: float, devices: int, gpu: str = "", overhead_s: float = RUN_OVERHEAD_S
) -> None:
    width = max([len(p["run"]) for p in plan] + [3])
    print(
        f"{'run':{width}s} {'params':>15s} {'FLOPs/token':>12s} {'tokens':>10s} {'epochs':>7s} {'steps':>9s} "
        f"{'FLOPs':>10s} {'micro':>5s} {'GiB/dev':>8s} {'minutes':>9s} {'GPU-h':>10s}"
    )
    for p in plan:
        print(
            f"{p['run']:{width}s} {p['params']:>15,d} {p['train_flops_per_token']:>12.3e} {p['tokens']:>10.3e} "
            f"{p['epochs']:>7.2f} {p['steps']:>9,d} {p['train_flops']:>10.3e} {p['micro_batch']:>5d} "
            f"{p['memory_gib']:>8.1f} {60 * p['hours']:>9.1f} {p['gpu_hours']:>10.1f}"
        )
    source = f" ({MEASURED_MFU_SOURCE})" if mfu == MEASURED_MFU else ""
    print(
        f"(time at {mfu:.0%} MFU{source} of {devices} x {gpu or 'a device of'} {peak:g} TFLOP/s, plus "
        f"{overhead_s:g} s a run; training FLOPs = 3 x "
        "forward matmul FLOPs; memory: 16 B/parameter + activations, an estimate; epochs: passes over the run's "
        "training data)"
    )
    total = sum(p["hours"] for p in plan)
    print(f"total: {len(plan)} runs, {60 * total:,.1f} minutes on {devices} x {gpu or 'the device'} at {mfu:.0%} MFU")
