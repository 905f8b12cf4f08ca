"""A run's progress where stdout is not a terminal (a cluster job's log): one line every few optimizer steps and one
per validation; on a terminal, Lightning's progress bar."""

from __future__ import annotations

import sys
import time

import lightning as L


class ProgressLog(L.Callback):
    """Where stdout is not a terminal (a cluster job's log), one line every `every` optimizer steps: step, training
    loss, lr, tokens/s (samples/s for a model that counts no tokens) and the time left; and one per validation.
    On a terminal Lightning's progress bar does this."""

    def __init__(self, every: int) -> None:
        self.every, self.last_step = max(1, every), -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.start, self.start_step, self.samples = time.monotonic(), trainer.global_step, 0
        self.start_tokens = getattr(pl_module, "tokens_seen", None)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        self.samples += len(batch[0]) * trainer.world_size
        step = trainer.global_step
        if step == self.last_step or (step % self.every and step != trainer.max_steps) or not trainer.is_global_zero:
            return
        self.last_step, seconds = step, max(time.monotonic() - self.start, 1e-9)
        tokens = getattr(pl_module, "tokens_seen", None)
        rate = (
            f"{(tokens - self.start_tokens) / seconds:,.0f} tokens/s"
            if tokens is not None
            else (f"{self.samples / seconds:,.1f} samples/s")
        )
        left = (trainer.max_steps - step) * seconds / max(1, step - self.start_step)
        loss = trainer.callback_metrics.get("train/loss", outputs["loss"] if isinstance(outputs, dict) else outputs)
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        print(
            f"step {step}/{trainer.max_steps}  loss {float(loss):.4f}  lr {lr:.3g}  {rate}  ETA {_clock(left)}",
            flush=True,
        )

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking and "val/loss" in trainer.callback_metrics:
            print(f"step {trainer.global_step}  val/loss {float(trainer.callback_metrics['val/loss']):.4f}", flush=True)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def progress(every: int) -> tuple[bool, list[L.Callback]]:
    """(enable_progress_bar, callbacks): Lightning's bar on a terminal, else `ProgressLog` lines."""
    return (True, []) if sys.stdout.isatty() else (False, [ProgressLog(every)])
