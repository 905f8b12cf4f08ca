"""Train one `Run` with the Lightning Trainer: CSV logs, atomic checkpoints, resume, done.json."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from torch.distributed.tensor import DTensor

from scaling_axes.datamodules.corpora import train_tokens
from scaling_axes.datamodules.floors import unigram_floor
from scaling_axes.datamodules.text import TextDataModule
from scaling_axes.harness.callbacks import (
    AtomicCheckpointIO,
    CheckpointOnSignal,
    ResumableThroughputMonitor,
    RunInterrupted,
    StepCheckpoint,
    checkpoint_state,
    cut_metrics,
    flush_logs,
    progress,
)
from scaling_axes.harness.curves import read_curves, step_ms, throughput, training_clock
from scaling_axes.harness.final import write_done, write_final
from scaling_axes.harness.locks import check_writable, run_lock
from scaling_axes.harness.loggers import (
    build_loggers,
    check_loggers,
    finish_loggers,
    hyperparameters,
    log_final_metrics,
    quiet_lightning_logs,
)
from scaling_axes.harness.runs import (
    Growth,
    Run,
    check_fingerprint,
    compile_by_default,
    fingerprint_fields,
    resolve_options,
    world_size,
    write_config,
)
from scaling_axes.harness.stability import LossSpikes
from scaling_axes.io import (
    SuiteError,
    atomic_write,
    read_verified_json,
    remove_temporaries,
)
from scaling_axes.modules.tasks.acceleration import keep_freed_host_memory
from scaling_axes.modules.tasks.lm import LanguageModel


def _accumulation(run: Run, world_size: int) -> tuple[int, int]:
    """(micro-batch, gradient accumulation) that keep the run's global batch on `world_size` devices."""
    budget = run.budget
    micro = budget.micro_batch_on(world_size)
    if budget.batch_size % (micro * world_size):
        raise ValueError(
            f"global batch {budget.batch_size} of run {run.name} is not a multiple of micro-batch {micro} x "
            f"{world_size} devices; set Budget.micro_batch to a divisor"
        )
    return micro, budget.batch_size // (micro * world_size)


def build_trainer(run: Run, out: Path, world_size: int, extra_callbacks: list | None = None,
                  fingerprinted: dict | None = None, loggers: Sequence[str] = ("csv",), labels: dict | None = None,
                  **options: Any):  # fmt: skip
    """The run's Trainer and its micro-batch; `loggers` (`harness.loggers`) are given the run's hyperparameters and
    `labels` (its experiment and scale)."""
    micro, accumulate = _accumulation(run, world_size)
    quiet_lightning_logs()
    budget = run.budget
    keep_freed_host_memory()
    val_every = (budget.val_every or budget.steps) * accumulate
    log_every = budget.log_every or max(1, min(50, budget.steps // 10))
    progress_bar, progress_callbacks = progress(log_every)
    trainer = L.Trainer(
        max_steps=budget.steps,
        accumulate_grad_batches=accumulate,
        gradient_clip_val=run.trainer.get("gradient_clip_val", 1.0),
        val_check_interval=val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        inference_mode=False,  # eval metrics reset inside inference mode would be unusable in the next fit
        logger=build_loggers(loggers, out, hyperparameters(run, labels or {})),
        callbacks=[
            LossSpikes(),  # first: a step's loss is counted before any checkpoint of that step is written
            StepCheckpoint(out / "checkpoints", budget.checkpoint_every, fingerprinted or {}, out / "metrics.csv"),
            ResumableThroughputMonitor(
                batch_size_fn=lambda batch: batch[0].shape[0],
                length_fn=lambda batch: batch[0].shape[0] * budget.seq_len,  # tokens (an image's: its patches + 1)
                window_size=max(2, min(100, budget.steps // 4)),
            ),
            CheckpointOnSignal(out / "checkpoints" / "last.ckpt"),
            *progress_callbacks,
            *(extra_callbacks or []),
        ],
        plugins=[AtomicCheckpointIO()],
        log_every_n_steps=log_every,
        enable_progress_bar=progress_bar,
        enable_model_summary=False,
        **trainer_settings(options, world_size),
    )
    return trainer, micro


SUITE_OPTIONS = ("compile", "loggers")  # launch options the suite takes, not the Trainer


def trainer_settings(options: dict[str, Any], world_size: int) -> dict[str, Any]:
    """The launch's Trainer settings as Lightning takes them: unset ones left to it, "fsdp" as FSDP2 through
    `LanguageModel.configure_model` (one unit per block)."""
    options = {k: v for k, v in options.items() if v is not None and k not in SUITE_OPTIONS}
    if options.get("strategy") == "fsdp":
        options["strategy"] = ModelParallelStrategy(
            data_parallel_size=world_size, tensor_parallel_size=1, save_distributed_checkpoint=False
        )
    return options


def check_trainer_settings(options: dict[str, Any]) -> str:
    """Stop before any compute if Lightning refuses the launch's accelerator, devices, precision or strategy (it
    checks them when a Trainer is built); the precision Lightning will run (it replaces some it cannot: 16-mixed on
    the CPU runs as bf16-mixed)."""
    check_loggers(options.get("loggers") or ())
    settings = trainer_settings(options, world_size(options))
    try:
        with _quiet_lightning():
            trainer = L.Trainer(**settings, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False)  # fmt: skip
    except (MisconfigurationException, ValueError, TypeError, RuntimeError) as error:
        asked = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in options.items() if k not in SUITE_OPTIONS
                          and v not in (None, "auto") and (k, v) != ("num_nodes", 1))  # fmt: skip
        first = (str(error).splitlines() or [""])[0]
        raise SuiteError(f"Lightning refuses these Trainer settings ({asked or 'the defaults'}): {first}") from error
    return str(trainer.precision)


@contextlib.contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Lightning's "GPU available" lines once per run are enough: none for the settings check."""
    logger = logging.getLogger("lightning.pytorch")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def train_run(run: Run, out: Path, growth: Growth | None = None, extra_callbacks: list | None = None,
              fingerprinted: dict | None = None, labels: dict | None = None, **options: Any) -> dict:  # fmt: skip
    """Train `run` into `out`, resuming from `out/checkpoints/last.ckpt` if it exists; `growth` starts it from
    grown weights. Language models and image classifiers (a ViT config) alike. `options` go to the Trainer, except
    `compile` (see `compile_by_default`); `precision` defaults to bf16-mixed on a CUDA GPU, else 32-true.
    One process per run directory (`run_lock`); `fingerprinted` (the runner's `fingerprint_fields`) must match what
    `out` was started with."""
    options = check_launch(run, resolve_options(options))
    check_writable(out)
    with run_lock(out):
        fingerprinted = fingerprinted or fingerprint_fields(run, options)
        resume = checkpoint_state(out, fingerprinted)  # the checkpoint's own record, whatever config.yaml says
        check_fingerprint(out, fingerprinted)
        for directory in (out, out / "checkpoints"):
            remove_temporaries(directory)  # a killed write's: this process holds the run's lock
        write_config(run, out, options, fingerprinted)
        return _train(run, out, growth, extra_callbacks, resume, fingerprinted, labels, **options)


def check_launch(run: Run, options: dict[str, Any]) -> dict[str, Any]:
    """Every refusal the launch's settings can cause, before anything is written to the run's directory: Lightning's
    own (accelerator, devices, precision, strategy) and a global batch the devices cannot split. Returns `options`
    with the precision that will run (what the fingerprint and done.json record)."""
    ran = check_trainer_settings(options)
    _accumulation(run, world_size(options))
    return {**options, "precision": ran}


def _train(run: Run, out: Path, growth: Growth | None, extra_callbacks: list | None, resumed: dict | None,
           fingerprinted: dict, labels: dict | None, **options: Any) -> dict:  # fmt: skip
    """Train from scratch, or from the checkpoint whose record is `resumed` (`checkpoint_state`), with the metrics
    log first cut back to what it held when that checkpoint was written (emptied for a start from scratch): the
    curves then continue exactly."""
    cut_metrics(out / "metrics.csv", None if resumed is None else resumed["metrics_csv"])
    compile = compile_by_default(run, options.pop("compile", None))
    L.seed_everything(run.seed, workers=True)
    trainer, micro = build_trainer(run, out, world_size(options), extra_callbacks, fingerprinted,
                                   options.pop("loggers", None) or ("csv",), labels, **options)  # fmt: skip
    try:
        return _fit(run, out, growth, resumed, trainer, micro, compile)
    finally:
        finish_loggers(trainer.loggers)  # the next run in this process logs to a run of its own


def _fit(run: Run, out: Path, growth: Growth | None, resumed: dict | None, trainer: L.Trainer, micro: int,
         compile: bool | None) -> dict:  # fmt: skip
    task = task_of(run)
    data, module = task.data(run, micro), task.module(run, growth.weights if growth else None, compile)
    growth_metrics = out / "growth_metrics.json"
    if growth is not None and resumed is None:  # (again after a kill before the first checkpoint: its step-0 rows)
        measured = _measure_growth(trainer, data, module, growth)
        if not growth_metrics.exists():
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
    trainer.save_checkpoint(last, weights_only=False)  # the whole state, as every checkpoint of a run
    val_sets = [f"val/{name}/loss" for name in getattr(data, "val_names", [])]
    accuracy = list(task.accuracy_curves)
    monitored = ("train/device/items_per_sec", "train/device/mfu")
    curves = read_curves(
        out / "metrics.csv", ("train/loss", "val/loss", "train/time", *monitored, *val_sets, *accuracy)
    )
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
    }
    weights = full_state_dict(module.model)  # every rank takes part when the model is sharded
    if trainer.is_global_zero:
        write_final(out, run, weights)
        write_done(out, done)
        log_final_metrics(trainer.loggers, done)
    return done


def full_state_dict(model: torch.nn.Module) -> dict:
    """The model's whole state dict on the CPU, gathered from the ranks when FSDP has sharded it."""
    if not any(isinstance(p, DTensor) for p in model.parameters()):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _image_metrics(metrics: dict[str, float]) -> dict[str, float | None]:
    return {k.replace("val/", "val_"): v for k, v in metrics.items() if k.startswith("val/")}


def _text_metrics(metrics: dict[str, float]) -> dict[str, float | None]:
    return {
        "val_loss": metrics["val/loss"],
        "val_ppl": math.exp(metrics["val/loss"]),
        "val_bpb": metrics.get("val/bpb"),
        "test_loss": metrics.get("test/loss"),
        "test_bpb": metrics.get("test/bpb"),
    }


def _image_data(run: Run, micro: int) -> L.LightningDataModule:
    """ImageNet (or its stand-in); `Budget.val_windows` caps the validation images."""
    from scaling_axes.datamodules.imagenet import ImageNetDataModule

    return ImageNetDataModule(img_size=run.config.img_size, batch_size=micro, max_val_images=run.budget.val_windows,
                              seed=run.seed, **run.data)  # fmt: skip


def _image_classifier(run: Run, weights: Path | None, compile: bool | None = None) -> L.LightningModule:
    from scaling_axes.modules.tasks.classifier import ImageClassifier

    budget = run.budget
    return ImageClassifier(model=run.model, model_overrides=dict(run.overrides), lr=budget.lr,
                           min_lr=budget.lr * budget.min_lr_ratio, warmup_steps=budget.warmup_steps,
                           schedule_steps=budget.steps, compile=compile, **run.lm)  # fmt: skip


def _text_data(run: Run, micro: int) -> TextDataModule:
    data = {"seed": run.seed, **run.data}  # the data order follows the run's seed unless the run pins its own
    return TextDataModule(corpus=run.corpus, tokenizer=run.tokenizer, seq_len=run.budget.seq_len, batch_size=micro,
                          val_windows=run.budget.val_windows, **data)  # fmt: skip


def _language_model(run: Run, weights: Path | None, compile: bool | None = None) -> LanguageModel:
    budget = run.budget
    return LanguageModel(
        model=run.model,
        model_overrides=dict(run.overrides),
        lr=budget.lr,
        min_lr_ratio=budget.min_lr_ratio,
        warmup_steps=budget.warmup_steps,
        schedule_steps=budget.steps,
        init_weights=str(weights) if weights else None,
        compile=compile,
        **run.lm,
    )


def _text_epochs(run: Run) -> tuple[float, str]:
    tokens, how = train_tokens(run.corpus, run.tokenizer)
    asked = run.budget.tokens
    return asked / tokens, f"{run.corpus} ({tokens:,} training tokens, {how}; the run asks {asked:,})"


def _image_epochs(run: Run) -> tuple[float, str]:
    from scaling_axes.datamodules.imagenet import EMBEDDED_TRAIN_IMAGES, IMAGENET_TRAIN_IMAGES

    embedded = run.data.get("source", "embedded") == "embedded"
    images = EMBEDDED_TRAIN_IMAGES if embedded else IMAGENET_TRAIN_IMAGES
    seen = run.budget.steps * run.budget.batch_size
    name = "the embedded digits" if embedded else "ImageNet-1k"
    return seen / images, f"{name} ({images:,} training images; the run asks {seen:,})"


# What "clearly learned" means: a language model at least LEARNED_NATS below its data's unigram floor (a bigram
# statistic alone gains about a nat on these corpora; sampling noise is a few hundredths), a classifier at least
# LEARNED_POINTS of top-1 above chance (guessing's accuracy, 1 / classes)
LEARNED_NATS = 0.5
LEARNED_POINTS = 25.0


def _text_learned(run: Run, done: dict) -> str | None:
    try:
        floor = unigram_floor(run.corpus, run.tokenizer)
    except FileNotFoundError:
        return None  # not prepared here: nothing to compare with (the row keeps its judgement)
    loss = done.get("val_loss")
    if loss is None or loss > floor - LEARNED_NATS:
        return (f"{done.get('run', run.name)} ends at {loss if loss is None else f'{loss:.3f}'} nats/token, not "
                f"{LEARNED_NATS:g} below the unigram floor {floor:.3f} of {run.corpus}")  # fmt: skip
    return None


def _image_learned(run: Run, done: dict) -> str | None:
    chance, top1 = 100.0 / run.config.num_classes, done.get("val_top1")
    if top1 is None or 100 * top1 < chance + LEARNED_POINTS:
        return (f"{done.get('run', run.name)} ends at {top1 if top1 is None else f'{100 * top1:.1f}'}% top-1, not "
                f"{LEARNED_POINTS:g} points above chance ({chance:.3g}%)")  # fmt: skip
    return None


@dataclasses.dataclass(frozen=True)
class Task:
    """What kind of training a run is: its DataModule, its LightningModule (from grown weights when given), the
    accuracy curves it logs, the final metrics done.json keeps, and how many passes over its data it makes."""

    data: Callable[[Run, int], L.LightningDataModule]
    module: Callable[[Run, Path | None, bool | None], L.LightningModule]
    accuracy_curves: tuple[str, ...]
    final_metrics: Callable[[dict[str, float]], dict[str, float | None]]
    epochs: Callable[[Run], tuple[float, str]]  # (passes over the training split, what the data and the ask are)
    learned: Callable[[Run, dict], str | None]  # None where a finished run clearly learned, else why not


TEXT = Task(_text_data, _language_model, (), _text_metrics, _text_epochs, _text_learned)
IMAGE = Task(_image_data, _image_classifier, ("val/top1", "val/ema_top1"), _image_metrics, _image_epochs,
             _image_learned)  # fmt: skip


def task_of(run: Run) -> Task:
    """A ViT run classifies images (`modules.tasks.classifier`); every other run is a language model."""
    return IMAGE if run.classifies_images else TEXT


def _measure_growth(trainer: L.Trainer, data: TextDataModule, grown: LanguageModel, growth: Growth) -> dict:
    """Validation loss on this run's data of the model before growth and right after it, before any training."""
    source = _language_model(growth.source, growth.source_weights, compile=False)  # one validation: not worth it
    before = trainer.validate(source, datamodule=data, verbose=False)[0]["val/loss"]
    after = trainer.validate(grown, datamodule=data, verbose=False)[0]["val/loss"]
    return {"val_loss_before_growth": before, "val_loss_after_growth": after}
