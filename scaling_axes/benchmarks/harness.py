"""The suite's training step against a bare PyTorch loop, and the fixed cost of one ``run --run-name`` call:
``python -m scaling_axes bench-harness`` -> ``results/bench_harness.csv``.

The case is a cpu-scale run of the cross-architecture table (the Transformer, its 200 steps of 16 x 128 tokens) on
the device it names (the CPU by default; ``--accelerator cuda`` on a GPU). The suite's step is timed inside
`train_run` by a callback, from the second optimizer step to the last, validation subtracted: it includes the data
loader, logging, checkpoints and everything else the Trainer does per step. The bare loop trains the same model
(the same initialisation) on the same batches (taken from the suite's data module beforehand), with the same AdamW
(`LanguageModel`'s parameter groups, fused), the same schedule and z-loss and clipping at 1.0, and nothing else.
The fixed cost is the wall time of
``python -m scaling_axes run cross_architecture --scale cpu --run-name RUN --seeds 1`` in a fresh process minus its
training clock (imports, data, model, Trainer, final validation and writes).

Targets at cpu scale: the suite's step at most 1.15x the bare loop's, and at most 10 s of fixed cost.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch

from scaling_axes.experiments.cross_architecture.setup import make_run
from scaling_axes.harness.runs import Run
from scaling_axes.harness.scales import CPU
from scaling_axes.harness.sweeps import sweep_point
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.harness.training.tasks import task_of
from scaling_axes.io import read_json, write_csv
from scaling_axes.modules.tasks.acceleration import keep_freed_host_memory

COLUMNS = (
    "machine",
    "torch",
    "accelerator",
    "run",
    "steps",
    "suite_step_ms",
    "bare_step_ms",
    "step_ratio",
    "step_target",
    "fixed_cost_s",
    "fixed_cost_target_s",
    "note",
)
STEP_TARGET, FIXED_COST_TARGET = 1.15, 10.0
PRECISION = "32-true"  # both sides in float32 (the bare loop has no autocast)
REPEATS = 3  # each side timed this often, alternating; the medians are compared
NOTE = (
    "medians of {repeats} alternating timings, {precision}; suite: train_run's steps 2..N, validation excluded; "
    "bare: the same model, batches, fused AdamW, schedule, z-loss and clipping in a loop; fixed: a fresh `run "
    "--run-name` call's wall time minus its training clock (validations included); host memory kept by glibc on both "
    "sides (`keep_freed_host_memory`)"
)
CASE = ("transformer", "125m", 9e-3)  # the cross-architecture Transformer at cpu scale


class StepClock(L.Callback):
    """Seconds per optimizer step from the second step to the last, validation excluded."""

    def __init__(self) -> None:
        self.start = self.first_step = None
        self.validating = 0.0

    def on_train_batch_start(self, trainer, *_) -> None:
        if self.start is None and trainer.global_step >= 1:
            self.start, self.first_step = time.perf_counter(), trainer.global_step

    def on_validation_start(self, *_) -> None:
        self.validation_started = time.perf_counter()

    def on_validation_end(self, *_) -> None:
        if self.start is not None:
            self.validating += time.perf_counter() - self.validation_started

    def on_train_end(self, trainer, *_) -> None:
        self.seconds_per_step = (time.perf_counter() - self.start - self.validating) / (
            trainer.global_step - self.first_step
        )


def suite_step_ms(run: Run, out: Path, accelerator: str) -> float:
    """Milliseconds per step of `train_run` (its final weights in `out`)."""
    clock = StepClock()
    train_run(run, out, extra_callbacks=[clock], accelerator=accelerator, devices=1, precision=PRECISION)
    return 1000 * clock.seconds_per_step


def bare_loop(run: Run, accelerator: str) -> tuple[float, torch.nn.Module]:
    """(milliseconds per step from the second to the last, the trained model) of the same model, batches, AdamW,
    schedule and clipping in a plain loop."""
    device = torch.device("cuda" if accelerator == "cuda" else "cpu")
    L.seed_everything(run.seed, workers=True)
    data, module = task_of(run).data(run, run.budget.batch_size), task_of(run).module(run, None, False)
    data.setup("fit")
    batches = [batch for batch, _ in zip(data.train_dataloader(), range(run.budget.steps), strict=False)]
    module.to(device)
    trainer = L.Trainer(max_steps=run.budget.steps, logger=False, enable_progress_bar=False, accelerator="cpu")
    module.trainer = trainer  # configure_optimizers reads max_steps for the schedule's length
    config = module.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    z_loss = module.hparams.z_loss
    for step, (inputs, targets) in enumerate(batches):
        if step == 1:
            torch.cuda.synchronize() if device.type == "cuda" else None
            start = time.perf_counter()
        ce, z = module.loss(inputs.to(device), targets.to(device))
        (ce + z_loss * z).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize() if device.type == "cuda" else None
    return 1000 * (time.perf_counter() - start) / (len(batches) - 1), module.model


def fixed_cost_s(run: Run, out: Path) -> float:
    """A fresh `run --run-name` call's wall time minus its training clock (its done.json's `train_seconds`): the call
    trains `run` at its declared lr as one of its sweep's points, so that no other point is trained first."""
    run = sweep_point(run, run.budget.lr) if run.sweep else run
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "scaling_axes",
            "run",
            "cross_architecture",
            "--scale",
            "cpu",
            "--run-name",
            run.name,
            "--seeds",
            "1",
            "--out-dir",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    done = read_json(out / "runs" / "cross_architecture" / "cpu" / run.name / "done.json", "rerun the benchmark")
    return wall - done["train_seconds"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scaling_axes bench-harness", description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, default=Path("results/bench_harness.csv"))
    args = parser.parse_args(argv)
    keep_freed_host_memory()  # the suite's Trainer sets it; the bare loop, timed first, must not run without it
    run = make_run(CPU, *CASE)
    bare, suite = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(REPEATS):
            bare.append(bare_loop(run, args.accelerator)[0])
            suite.append(suite_step_ms(run, Path(tmp) / f"suite{repeat}", args.accelerator))
        fixed = fixed_cost_s(run, Path(tmp) / "call") if args.accelerator == "cpu" else None
    bare, suite = statistics.median(bare), statistics.median(suite)
    device = torch.cuda.get_device_name() if args.accelerator == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    row = {
        "machine": f"{platform.machine()} {device}",
        "torch": torch.__version__,
        "accelerator": args.accelerator,
        "run": run.name,
        "steps": run.budget.steps,
        "suite_step_ms": round(suite, 2),
        "bare_step_ms": round(bare, 2),
        "step_ratio": round(suite / bare, 3),
        "step_target": STEP_TARGET,
        "fixed_cost_s": None if fixed is None else round(fixed, 1),
        "fixed_cost_target_s": FIXED_COST_TARGET,
        "note": NOTE.format(repeats=REPEATS, precision=PRECISION),
    }
    write_csv(args.out, COLUMNS, [row])
    print(", ".join(f"{k} {v}" for k, v in row.items() if k != "note"))
