"""The Trainer of one run and what it fits: built from the `Launch`, its callbacks and loggers attached, run to the
end of the budget (or to a signal's checkpoint), and the finished run's record gathered from its curves."""

from __future__ import annotations

import json
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks.throughput_monitor import _plugin_to_compute_dtype
from torch.distributed.tensor import DTensor

from scaling_axes.harness.names import parse_sweep
from scaling_axes.harness.runs import Run
from scaling_axes.harness.training.callbacks import (
    AtomicCheckpointIO,
    CheckpointOnSignal,
    LossSpikes,
    ResumableThroughputMonitor,
    RunInterrupted,
    SameRunDirectory,
    StepCheckpoint,
    flush_logs,
    peak_flops,
    slurm_plugins,
)
from scaling_axes.harness.training.curves import read_curves, step_ms, training_clock
from scaling_axes.harness.training.growth import Growth, measure_growth
from scaling_axes.harness.training.launch import Launch
from scaling_axes.harness.training.loggers import (
    build_loggers,
    finish_loggers,
    hyperparameters,
    log_final_metrics,
    quiet_lightning_logs,
)
from scaling_axes.harness.training.progress import progress
from scaling_axes.harness.training.rundir import drop_final_checkpoint, write_done, write_final
from scaling_axes.harness.training.settings import first_started, recorded_plans
from scaling_axes.harness.training.tasks import task_of
from scaling_axes.io import atomic_write, read_verified_json
from scaling_axes.modules.tasks.acceleration import keep_freed_host_memory


def fit(
    launch: Launch, run: Run, growth: Growth | None, resumed: dict | None, extra_callbacks: list | None = None
) -> dict:
    """Train `run` from scratch (from `growth`'s weights where grown), or from the checkpoint whose record is
    `resumed` (`settings.checkpoint_state`; the metrics log already cut back to what it held then). Returns done.json's
    record."""
    L.seed_everything(run.seed, workers=True)
    trainer = build_trainer(launch, run, extra_callbacks, resumed["global_step"] if resumed else 0)
    try:
        return _fit(launch, run, growth, resumed, trainer)
    finally:
        finish_loggers(trainer.loggers)  # the next run in this process logs to a run of its own


def build_trainer(launch: Launch, run: Run, extra_callbacks: list | None = None, resume_step: int = 0) -> L.Trainer:
    """The Trainer of `launch` training `run` (the launch's, or grown from its source, resuming at `resume_step`);
    its loggers are given the run's hyperparameters and the launch's labels (its experiment and scale)."""
    out, accumulate = launch.out, launch.accumulation
    quiet_lightning_logs()
    budget = run.budget
    keep_freed_host_memory()
    val_every = (budget.val_every or budget.steps) * accumulate
    log_every = budget.log_every or max(1, min(50, budget.steps // 10))
    progress_bar, progress_callbacks = progress(log_every)
    return L.Trainer(
        max_steps=budget.steps,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=run.trainer.get("gradient_clip_val", 1.0),
        val_check_interval=val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        inference_mode=False,  # eval metrics reset inside inference mode would be unusable in the next fit
        logger=build_loggers(launch.loggers, out, hyperparameters(run, launch.labels)),
        callbacks=[
            LossSpikes(),  # first: a step's loss is counted before any checkpoint of that step is written
            StepCheckpoint(out / "checkpoints", budget.checkpoint_every, launch.fingerprint, out / "metrics.csv"),
            ResumableThroughputMonitor(
                batch_size_fn=lambda batch: batch[0].shape[0],
                length_fn=lambda batch: batch[0].shape[0] * budget.seq_len,  # tokens (an image's: its patches + 1)
                window_size=max(2, min(100, budget.steps // 4)),
            ),
            CheckpointOnSignal(out / "checkpoints" / "last.ckpt"),
            SameRunDirectory(out, resume_step),
            *progress_callbacks,
            *(extra_callbacks or []),
        ],
        plugins=[AtomicCheckpointIO(), *slurm_plugins()],
        default_root_dir=out,  # whatever Lightning itself writes stays in the run directory
        log_every_n_steps=log_every,
        enable_progress_bar=progress_bar,
        enable_model_summary=False,
        **launch.trainer_options,
    )


def _fit(launch: Launch, run: Run, growth: Growth | None, resumed: dict | None, trainer: L.Trainer) -> dict:
    """Validate first where the run asks, fit (to the end, or to a signal's checkpoint), then validate and test the
    final weights and gather what done.json keeps; rank zero writes the weights and the record."""
    task, out = task_of(run), launch.out
    data = task.data(run, launch.micro_batch)
    module = task.module(run, growth.weights if growth else None, launch.compile)
    growth_metrics = out / "growth_metrics.json"
    if growth is not None and resumed is None:  # (again after a kill before the first checkpoint: its step-0 rows)
        measured = measure_growth(trainer, data, module, growth)
        if not growth_metrics.exists() and trainer.is_global_zero:
            atomic_write(growth_metrics, json.dumps(measured), checksum=True)
    last = out / "checkpoints" / "last.ckpt"
    started = time.time()
    resume = None if resumed is None else str(last)
    if run.budget.val_at_start and resume is None:
        trainer.validate(module, datamodule=data, verbose=False)  # logged at step 0: the curves start there
    try:
        trainer.fit(module, datamodule=data, ckpt_path=resume, weights_only=True)  # checked as such by resume_point
    except RunInterrupted:
        pass
    if trainer.global_step < run.budget.steps:
        raise SystemExit(
            f"run {run.name} stopped at step {trainer.global_step} of {run.budget.steps} (a signal or an early stop); "
            f"its checkpoint is {last}: rerun the same command to resume"
        )
    # fit counts its epoch as finished only after the last step's checkpoint: saved again, a run killed before
    # done.json resumes at the epoch where the uninterrupted run logs its final validation and test rows (the logs
    # flushed first, so that the checkpoint records where they end)
    flush_logs(trainer)
    if launch.scale is None or launch.scale.keeps_final_checkpoint:  # smoke: a run killed here restarts (seconds)
        trainer.save_checkpoint(last, weights_only=False)  # the whole state, as every checkpoint of a run
    val_sets = [f"val/{name}/loss" for name in getattr(data, "val_names", [])]
    accuracy = list(task.accuracy_curves)
    monitored = ("train/device/items_per_sec", "train/device/mfu")
    curves = read_curves(
        out / "metrics.csv", ("train/loss", "val/loss", "train/time", *monitored, *val_sets, *accuracy)
    )
    if launch.scale is not None and launch.scale.whole_final_evaluation and hasattr(data, "whole_splits"):
        data.whole_splits()  # the curve read a subset; the final figures read every window
    metrics = trainer.validate(module, datamodule=data, verbose=False)[0]  # after the curves: it repeats a point
    if "test" in getattr(data, "splits", []):
        metrics.update(trainer.test(module, datamodule=data, verbose=False)[0])
    done = {
        "run": run.name,
        "model": run.model,
        "steps": trainer.global_step,
        "tokens": getattr(module, "tokens_seen", trainer.global_step * run.budget.tokens // run.budget.steps),
        "params": sum(p.numel() for p in module.model.parameters()),
        "train_flops": run.train_flops(),
        **task.final_metrics(metrics),
        **({"test_window_losses": windows} if (windows := getattr(module, "test_window_losses", None)) else {}),
        **(read_verified_json(growth_metrics, f"delete {growth_metrics} and rerun") if growth is not None else {}),
        **next(c for c in trainer.callbacks if isinstance(c, LossSpikes)).record(),
        "train_loss_curve": curves["train/loss"],
        "val_loss_curve": curves["val/loss"],
        **({"val_loss_curves": {c.split("/")[1]: curves[c] for c in val_sets}} if val_sets else {}),
        **{f"{c.replace('val/', 'val_')}_curve": curves[c] for c in accuracy},
        "train_time_curve": (clock := training_clock(curves["train/time"])),
        "train_seconds": (clock or [(0, None)])[-1][1],
        "step_ms": step_ms(curves["train/time"]),
        **throughput(curves, trainer),
        "wall_seconds_last_session": time.time() - started,
        "started_at": first_started(out),  # when it was first launched and when it ended (seconds since the epoch)
        "ended_at": time.time(),
        **({"plan": launch.labels["plan"]} if "plan" in launch.labels else {}),  # the analysis plan it trained under
        **({"plans": plans} if (plans := recorded_plans(out)) else {}),  # and every plan before it: a resume's too
        # allowed past the data limit (--allow-repeats): said in done.json and its rows
        **({"data_epochs": launch.data_epochs, "repeats_allowed": True} if launch.data_epochs is not None else {}),
    }
    weights = full_state_dict(module.model)  # every rank takes part when the model is sharded
    keeps_weights = launch.scale is None or launch.scale.keeps_sweep_weights or parse_sweep(run.name) is None
    if trainer.is_global_zero:
        if keeps_weights:
            write_final(out, run, weights)
        write_done(out, done if keeps_weights else {**done, "weights_kept": False})
        if launch.scale is not None and not launch.scale.keeps_final_checkpoint:
            drop_final_checkpoint(out)
        log_final_metrics(trainer.loggers, done)
    return done


def full_state_dict(model: torch.nn.Module) -> dict:
    """The model's whole state dict on the CPU, gathered from the ranks when FSDP has sharded it."""
    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def throughput(curves: dict[str, list], trainer: L.Trainer) -> dict[str, Any]:
    """Training tokens per second (all devices) and MFU at the end of the run, from Lightning's ThroughputMonitor
    (a rolling window of recent steps, validation excluded), the device they were measured on, the precision, and
    the peak the MFU divides by (`mfu_peak`)."""
    tokens, mfu = curves["train/device/items_per_sec"], curves["train/device/mfu"]
    device = trainer.strategy.root_device
    return {
        "tokens_per_sec": tokens[-1][1] * trainer.world_size if tokens else None,
        "mfu": mfu[-1][1] if mfu else None,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else device.type,
        "world_size": trainer.world_size,
        "precision": trainer.precision,
        **mfu_peak(trainer),
    }


def mfu_peak(trainer: L.Trainer) -> dict[str, Any]:
    """The peak Lightning's ThroughputMonitor divides by for this Trainer's compute dtype: bf16 dense for bf16-mixed,
    TF32 for 32-true where matmuls may use it, else FP32 (a 32-true MFU is against a peak ~15x lower than bf16's)."""
    dtype = _plugin_to_compute_dtype(trainer.precision_plugin)
    device = trainer.strategy.root_device
    if device.type != "cuda":
        return {"mfu_peak": f"none known for {device.type}", "mfu_peak_tflops": None}
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype).removeprefix("torch."))
    if dtype == torch.float32 and torch.get_float32_matmul_precision() != "highest":
        name = "tf32"
    flops, gpu = peak_flops(device, dtype), torch.cuda.get_device_name(device)
    if flops is None:
        return {"mfu_peak": f"none known for {gpu} in {name}", "mfu_peak_tflops": None}
    return {"mfu_peak": f"{name} dense peak of {gpu}", "mfu_peak_tflops": flops / 1e12}
