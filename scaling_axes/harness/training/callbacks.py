"""The Trainer's callbacks for resumable runs: atomic checkpoints on a schedule and on a cluster's termination signal
(each recording the run's settings and how far its metrics log went), the loss-spike watch, throughput counters that
resume (the one-line progress log for non-terminal stdout is `progress.py`)."""

from __future__ import annotations

import functools
import math
import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.fabric.utilities.throughput import get_available_flops
from lightning.pytorch.callbacks import ModelCheckpoint, ThroughputMonitor
from lightning.pytorch.callbacks.throughput_monitor import _plugin_to_compute_dtype
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import RunningStage

from scaling_axes.harness.stability import SMOOTHING
from scaling_axes.harness.training.hardware import dense_bf16_tflops
from scaling_axes.harness.training.metrics_csv import metrics_prefix
from scaling_axes.harness.training.settings import RUN_STATE
from scaling_axes.io import atomic_torch_save, atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints go to a temporary file and are renamed: a crash mid-write leaves the previous one intact. Each
    carries a blake2b checksum file (`<name>.blake2b`)."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Any | None = None) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(checkpoint, path, checksum=True)  # verified on resume: a flipped byte is not resumed


class StepCheckpoint(ModelCheckpoint):
    """`last.ckpt` every `every_n_train_steps`, overwritten in place (no `-vN` copies), written *after* the step's
    validation when one runs at that step, with the metrics log flushed first: a run killed anywhere resumes with
    every curve point the uninterrupted run has (Lightning's own save at batch end precedes the validation, which a
    resume then skips). Each checkpoint records the run's `fingerprinted` settings and the metrics log's length and
    digest at that moment (`RUN_STATE`), which a resume checks and cuts the log back to."""

    def __init__(self, dirpath: Path, every_n_train_steps: int, fingerprinted: dict, metrics: Path) -> None:
        super().__init__(
            dirpath=dirpath,
            every_n_train_steps=every_n_train_steps,
            save_last=True,
            save_top_k=0,
            enable_version_counter=False,
        )
        self.fingerprinted, self.metrics = fingerprinted, metrics

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module, checkpoint: dict) -> None:
        checkpoint[RUN_STATE] = {"fingerprinted": self.fingerprinted, "metrics_csv": metrics_prefix(self.metrics)}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        step_due = trainer.global_step % self._every_n_train_steps == 0
        if step_due and not trainer.fit_loop.epoch_loop._should_accumulate() and validates_this_step(trainer):
            self._defer_save_until_validation = True  # on_validation_end saves, after the metrics are logged
            return
        if step_due:
            log_this_step(trainer)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        if trainer.global_step >= trainer.max_steps:  # the run's end: `trainer._fit` saves the state fit ends in
            return
        flush_logs(trainer)  # the curves up to this step are on disk before the checkpoint says they happened
        super()._save_checkpoint(trainer, filepath)


class LossSpikes(L.Callback):
    """Tracks each optimizer step's training loss (the mean over its micro-batches and every process) against the
    exponential moving average of the steps before it, and keeps the largest excess: `record()` is what done.json
    keeps. Its state is checkpointed, so a resumed run records what the uninterrupted one does."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {"ema": None, "spike": None, "step_loss": 0.0}

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        loss = trainer.strategy.reduce(torch.as_tensor(loss, dtype=torch.float64).detach(), reduce_op="mean")
        state = self.state
        state["step_loss"] += float(loss)  # Lightning divides each micro-batch's loss by the accumulation
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return
        value, state["step_loss"] = state["step_loss"], 0.0
        if not math.isfinite(value):
            return  # a non-finite loss stops the run itself
        ema, spike = state["ema"], state["spike"]
        if ema is not None and (spike is None or value - ema > spike["nats"]):
            state["spike"] = {"nats": value - ema, "step": trainer.global_step, "loss": value}
        state["ema"] = value if ema is None else SMOOTHING * ema + (1 - SMOOTHING) * value

    def state_dict(self) -> dict[str, Any]:
        return dict(self.state)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.state = dict(state_dict)

    def record(self) -> dict[str, Any]:
        """done.json's record: the largest excess of a step's training loss over the moving average before it."""
        return {"train_loss_spike": self.state["spike"]}


def peak_flops(device: torch.device, dtype: torch.dtype | str) -> float | None:
    """The peak an MFU divides by: Lightning's for the device and compute dtype; where Lightning's table lacks the GPU
    (it knows an H200 only by a name holding "sxm1" or "nvl1", which "NVIDIA H200" lacks), the suite's dense bf16
    peak of it (`hardware.GPUS`)."""
    if found := get_available_flops(device, dtype):
        return found
    if device.type == "cuda" and dtype == torch.bfloat16:
        tflops = dense_bf16_tflops(torch.cuda.get_device_name(device))
        return tflops * 1e12 if tflops else None
    return None


class ResumableThroughputMonitor(ThroughputMonitor):
    """Lightning's ThroughputMonitor whose training counters (batches, samples, items, its clock) continue from the
    checkpoint after a resume, as an uninterrupted run's would, instead of restarting at zero. It logs the training
    stage only: its validation and test counters run on across a process's evaluations, so a resumed process would
    log other values for the same evaluation (the suite reads none of them)."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.available_flops is None:  # a GPU Lightning's table lacks: the suite's peak (`peak_flops`)
            peak = peak_flops(trainer.strategy.root_device, _plugin_to_compute_dtype(trainer.precision_plugin))
            self.available_flops = peak
            for throughput in self._throughputs.values():
                throughput.available_flops = peak

    def _compute(self, trainer: L.Trainer, iter_num: int | None = None) -> None:
        if trainer.state.stage == RunningStage.TRAINING:
            super()._compute(trainer, iter_num)

    def state_dict(self) -> dict[str, Any]:
        stage = RunningStage.TRAINING
        if stage not in self._batches:
            return {}
        return {
            "batches": self._batches[stage],
            "samples": self._samples[stage],
            "lengths": self._lengths[stage],
            "time": time.perf_counter() - self._t0s[stage],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resumed = dict(state_dict)

    def _start(self, trainer: L.Trainer) -> None:
        super()._start(trainer)
        resumed = getattr(self, "_resumed", None)
        if trainer.state.stage == RunningStage.TRAINING and resumed:
            stage = RunningStage.TRAINING
            self._batches[stage], self._samples[stage] = resumed["batches"], resumed["samples"]
            self._lengths[stage], self._t0s[stage] = resumed["lengths"], time.perf_counter() - resumed["time"]
            self._resumed = None


def validates_this_step(trainer: L.Trainer) -> bool:
    """Whether Lightning runs a validation right after the step that just ended (its fit loop's own test)."""
    return trainer.fit_loop.epoch_loop._should_check_val_fx(trainer.fit_loop._data_fetcher)


def log_this_step(trainer: L.Trainer) -> None:
    """Hand this step's training metrics to the loggers now: Lightning does it only after `on_train_batch_end`, where
    checkpoints are saved, so a kill right after a save would lose the step's row for good (its row is then logged
    twice, with the same values; the curves keep one)."""
    trainer._logger_connector.update_train_step_metrics()


def flush_logs(trainer: L.Trainer) -> None:
    for logger in trainer.loggers:
        logger.save()


class CheckpointOnSignal(L.Callback):
    """SIGTERM, SIGUSR1 (a scheduler's notice before preemption or the time limit) or Ctrl-C: finish the optimizer
    step, write `last.ckpt`, stop. The run then ends without done.json, and rerunning the command resumes it exactly.

    SIGTERM replaces Lightning's handler, which would stop mid-accumulation. Under SLURM, SIGUSR1 (`--signal
    USR1@120`) also requeues the job (`scontrol requeue`, rank zero), which then resumes from `last.ckpt`: Lightning's
    own requeue is off (`slurm_plugins`), since it writes a second checkpoint outside the run directory, which its
    requeued job then fails to find. A second Ctrl-C stops at once. All ranks stop at the same step boundary.
    """

    def __init__(self, path: Path) -> None:
        self.path, self.received, self.after_validation = path, None, False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            previous = signal.getsignal(sig) if sig == signal.SIGUSR1 else None
            signal.signal(sig, functools.partial(self._note, previous))

    def _note(self, previous, signum: int, frame) -> None:
        if signum == signal.SIGINT:
            if self.received == "SIGINT":
                raise KeyboardInterrupt  # the second Ctrl-C
            print(f"Ctrl-C: checkpointing at the end of this step into {self.path}, then stopping (again to stop now)")
        self.received = signal.Signals(signum).name
        if callable(previous):
            previous(signum, frame)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # only between optimizer steps: a resumed run restarts at a step boundary
        if not trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):
            return
        if validates_this_step(trainer):
            self.after_validation = True  # this step's validation first: a resume would skip it
            return
        log_this_step(trainer)
        self._stop(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.after_validation and not trainer.sanity_checking:
            self._stop(trainer)

    def _stop(self, trainer: L.Trainer) -> None:
        """Checkpoint and leave fit at once: `should_stop` would first run a validation the uninterrupted run does
        not have."""
        flush_logs(trainer)
        trainer.save_checkpoint(self.path, weights_only=False)
        if self.received == "SIGUSR1" and SLURMEnvironment.detect() and trainer.is_global_zero:
            job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ["SLURM_JOB_ID"])
            job += f"_{os.environ['SLURM_ARRAY_TASK_ID']}" if "SLURM_ARRAY_JOB_ID" in os.environ else ""
            requeued = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
            print(f"SLURM job {job} {'requeued' if not requeued.returncode else 'not requeued: ' + requeued.stderr}")
        raise RunInterrupted(f"{self.received} at step {trainer.global_step}")


def slurm_plugins() -> list:
    """Under SLURM, its environment with Lightning's requeue off: `CheckpointOnSignal` requeues instead."""
    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


class SameRunDirectory(L.Callback):
    """Before anything is restored or trained, on more than one process: every rank must see the run directory that
    rank zero writes (the checkpoint, metrics.csv and done.json are rank zero's, and every rank reads them), and
    would resume from the same step. Node-local --out-dirs fail both (each node its own directory and checkpoint;
    the ranks then block on each other's collectives). All ranks refuse together, in one line, at once."""

    PROBE = ".every_rank_sees_this"

    def __init__(self, out: Path, resume_step: int) -> None:
        self.out, self.resume_step = out, resume_step

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.world_size < 2:
            return
        token = trainer.strategy.broadcast(secrets.token_hex(8))  # rank zero's
        probe = self.out / self.PROBE
        if trainer.is_global_zero:
            atomic_write(probe, token)
        trainer.strategy.barrier()
        sees = probe.exists() and probe.read_text() == token
        seen = trainer.strategy.all_gather(torch.tensor([int(sees), self.resume_step]))
        trainer.strategy.barrier()
        if trainer.is_global_zero:
            probe.unlink(missing_ok=True)
        blind = [rank for rank, (saw, _) in enumerate(seen.tolist()) if not saw]
        steps = sorted({step for _, step in seen.tolist()})
        if blind or len(steps) > 1:
            raise SystemExit(
                f"ranks {blind or 'all'} of {trainer.world_size} do not see {self.out} as rank 0 writes it (or would "
                f"resume from different steps: {steps}): a run on several nodes needs one run directory every node "
                "sees, a shared filesystem; give every node the same --out-dir on it (docs/gpu-and-clusters.md)"
            )


class RunInterrupted(Exception):
    """Raised out of `Trainer.fit` once `CheckpointOnSignal` has checkpointed."""
