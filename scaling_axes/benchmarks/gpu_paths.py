"""Every code path that differs on a CUDA GPU, run once through the real runner (`gpu-check`'s `paths` part): a short
run of each architecture's language model and of the ViT under the GPU defaults (bf16-mixed, compiled, kernels
`auto`), Tokenformer and Net2Net growth, the lm-eval adapter on a local task, a run stopped by SIGTERM at a step and
resumed against the same run uninterrupted (their final weights compared), and Lightning's DDP strategy with one
process against one device. One row per path in a CSV, its error where it failed (the others still run).
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch

from scaling_axes.experiments.cross_architecture import setup as cross
from scaling_axes.experiments.tokenformer import fig7_net2net_scaling, table2_imagenet
from scaling_axes.harness.experiment.schedule import Schedule
from scaling_axes.harness.runs import Experiment, Run
from scaling_axes.harness.scales import SMOKE
from scaling_axes.harness.training.lifecycle import train_run
from scaling_axes.io import load_state, write_csv

# deterministic cuBLAS for the resumed run's comparison (read when CUDA starts, so before any path runs)
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
COLUMNS = ("path", "status", "val_loss", "seconds", "detail", "error")
LAUNCH: dict[str, Any] = {"accelerator": "cuda", "devices": 1, "precision": "bf16-mixed", "compile": True}
STEPS = 20  # a short run: long enough to compile, step and validate
STOP_AT = 8  # the step at which the resumed run is stopped


def use_toy_sizes() -> None:
    """On the CPU, to prove the paths run (`gpu-check --tiny`)."""
    LAUNCH["accelerator"] = "cpu"
    global STEPS, STOP_AT
    STEPS, STOP_AT = 6, 3


def short(run: Run, steps: int | None = None) -> Run:
    """`run` at its declared lr (no sweep) for `steps`, validated and checkpointed along the way."""
    steps = steps or STEPS
    budget = dataclasses.replace(
        run.budget,
        steps=steps,
        warmup_steps=min(run.budget.warmup_steps, 2),
        val_windows=8,
        val_every=max(1, steps // 2),
        checkpoint_every=max(1, steps // 3),
    )
    return dataclasses.replace(run, budget=budget, sweep=None, lr_sweep=False)


def _experiment(runs: list[Run]) -> Experiment:
    return Experiment("gpu_check", "the GPU's code paths", lambda scale: runs, lambda scale, results: [])


def _finite(done: dict) -> dict:
    loss = done.get("val_loss")
    if loss is None or not math.isfinite(loss):
        raise FloatingPointError(f"final validation loss {loss}")
    return {"val_loss": loss}


def language_model(arch: str, root: Path) -> dict:
    run = short(cross.make_run(SMOKE, arch, "125m"))
    return _finite(Schedule.of(_experiment([run]), SMOKE, root / arch, **LAUNCH).train(run))


def vit(root: Path) -> dict:
    run = short(next(r for r in table2_imagenet.runs(SMOKE) if r.name.startswith("vit_tokenformer")))
    done = Schedule.of(_experiment([run]), SMOKE, root / "vit", **LAUNCH).train(run)
    return {"val_loss": done.get("val_loss"), "detail": f"top-1 {done.get('val_top1')}"}


def growth(family: str, root: Path) -> dict:
    """A fig. 7 chain's first grown stage of `family` (Tokenformer tokens or Net2Net), its source trained first."""
    runs = {r.name: short(r) for r in fig7_net2net_scaling.runs(SMOKE)}
    grown = next(r for r in runs.values() if r.grow_from and r.model.startswith(family))
    source = runs[grown.grow_from]
    while source.grow_from:
        source = runs[source.grow_from]
    chain = _experiment([source, dataclasses.replace(grown, grow_from=source.name)])
    done = Schedule.of(chain, SMOKE, root / f"growth_{family}", **LAUNCH).train(chain.runs(SMOKE)[1])
    return {
        **_finite(done),
        "detail": f"loss {done['val_loss_before_growth']:.4f} before growth, "
        f"{done['val_loss_after_growth']:.4f} right after",
    }


def lm_eval_adapter(root: Path) -> dict:
    """lm-eval through the suite's adapter on an offline task, the model on the GPU."""
    from scaling_axes.interop import evaluate, lm_eval_tasks
    from scaling_axes.interop.lm_eval_model import SuiteLM

    run = short(cross.make_run(SMOKE, "transformer", "125m"))
    Schedule.of(_experiment([run]), SMOKE, root / "lm_eval", **LAUNCH).train(run)
    out = root / "lm_eval" / "gpu_check" / SMOKE.name / run.name
    lm = SuiteLM(checkpoint=str(out), batch_size=8, device=LAUNCH["accelerator"])
    lambada = lm_eval_tasks.lambada_stand_in(root / "lm_eval_data")
    results = evaluate.zero_shot(
        lm, ["piqa", "lambada_openai"], True, limit=16, data_root=root / "lm_eval_data", lambada=lambada
    )
    perplexity = results["lambada_openai"]["perplexity"]
    return {
        "val_loss": math.log(perplexity),
        "detail": f"piqa acc {results['piqa']['acc']:.3f} on 16 items, "
        f"lambada stand-in perplexity {perplexity:.1f} (its log is the loss column)",
    }


class _TermAt(L.Callback):
    """Sends this process SIGTERM at one step: the runner's own handler checkpoints there and stops."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def kill_and_resume(root: Path) -> dict:
    """The same run twice: once through, once stopped by SIGTERM at STOP_AT and resumed; final weights compared."""
    run = short(cross.make_run(SMOKE, "tokenformer", "125m"))
    through, resumed = root / "through", root / "resumed"
    options = {**LAUNCH, "deterministic": "warn"}  # what may differ is then only the order of atomic adds
    done = train_run(run, through, **options)
    try:
        train_run(run, resumed, extra_callbacks=[_TermAt(STOP_AT)], **options)
        raise RuntimeError(f"SIGTERM at step {STOP_AT} did not stop the run")
    except SystemExit as stopped:
        if "rerun the same command to resume" not in str(stopped):
            raise
    again = train_run(run, resumed, **options)
    a, b = (load_state(out / "final.safetensors", "rerun gpu-check") for out in (through, resumed))
    worst = max((a[k].double() - b[k].double()).abs().max().item() for k in a)
    equal = all(torch.equal(a[k], b[k]) for k in a)
    detail = (
        f"final weights {'bit for bit equal' if equal else f'differ by at most {worst:.3g}'}; final loss "
        f"{done['val_loss']:.6f} through, {again['val_loss']:.6f} resumed"
    )
    if worst > 1e-3:
        raise AssertionError(detail)
    return {**_finite(again), "detail": detail}


def ddp_one_process(root: Path) -> dict:
    """Lightning's DDP strategy with one process (NCCL on a GPU) against the same run on one device."""
    run = short(cross.make_run(SMOKE, "transformer", "125m"))
    single = train_run(run, root / "single", **LAUNCH)
    ddp = train_run(run, root / "ddp", **{**LAUNCH, "strategy": "ddp"})
    difference = abs(ddp["val_loss"] - single["val_loss"])
    detail = f"final loss {ddp['val_loss']:.6f} under DDP, {single['val_loss']:.6f} on one device"
    if difference > 1e-3:
        raise AssertionError(detail)
    return {**_finite(ddp), "detail": detail}


def paths() -> dict[str, Callable[[Path], dict]]:
    found = {
        f"{arch}_language_model": (lambda root, arch=arch: language_model(arch, root))
        for arch in ("transformer", "tokenformer", "rmt", "mot")
    }
    return {
        **found,
        "vit_tokenformer": vit,
        "tokenformer_growth": lambda root: growth("tokenformer", root),
        "net2net_growth": lambda root: growth("transformer", root),
        "lm_eval_adapter": lm_eval_adapter,
        "kill_and_resume": kill_and_resume,
        "ddp_one_process": ddp_one_process,
    }


def row_key(row: dict) -> str:
    """What a row ran (its path's name): the key a rerun keeps it by."""
    return row["path"]


def main(out: Path, kept: Mapping[str, dict] | None = None) -> None:
    """Each path in turn, a row each, the CSV rewritten after every path (a time box may end the part); a path that
    `kept` holds (an earlier call's row that finished ok, by name) is taken as run."""
    rows, kept = [], kept or {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, check in paths().items():
            if name in kept:
                rows.append(kept[name])
                write_csv(out, COLUMNS, rows)
                continue
            started = time.monotonic()
            try:
                row = {"status": "ok", **check(Path(scratch) / name)}
            except (Exception, SystemExit) as error:  # a path that fails is a result too
                row = {"status": "failed", "error": f"{type(error).__name__}: {error}"[:400]}
            rows.append({"path": name, "seconds": round(time.monotonic() - started, 1), **row})
            print(rows[-1], flush=True)
            write_csv(out, COLUMNS, rows)
