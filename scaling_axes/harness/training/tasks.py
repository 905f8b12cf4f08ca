"""What kind of training a run is (`Task`): a language model on text, or a classifier of images (a ViT config)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import lightning as L

from scaling_axes.datamodules.text import TextDataModule
from scaling_axes.harness.runs import Run
from scaling_axes.modules.tasks.lm import LanguageModel


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

    return ImageNetDataModule(
        img_size=run.config.img_size, batch_size=micro, max_val_images=run.budget.val_windows, seed=run.seed, **run.data
    )


def _image_classifier(run: Run, weights: Path | None, compile: bool | None = None) -> L.LightningModule:
    from scaling_axes.modules.tasks.classifier import ImageClassifier

    budget = run.budget
    return ImageClassifier(
        model=run.model,
        model_overrides=dict(run.overrides),
        lr=budget.lr,
        min_lr=budget.lr * budget.min_lr_ratio,
        warmup_steps=budget.warmup_steps,
        schedule_steps=budget.steps,
        compile=compile,
        **run.lm,
    )


def _text_data(run: Run, micro: int) -> TextDataModule:
    data = {"seed": run.seed, **run.data}  # the data order follows the run's seed unless the run pins its own
    return TextDataModule(
        corpus=run.corpus,
        tokenizer=run.tokenizer,
        seq_len=run.budget.seq_len,
        batch_size=micro,
        val_windows=run.budget.val_windows,
        **data,
    )


def language_model(run: Run, weights: Path | None, compile: bool | None = None) -> LanguageModel:
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


@dataclasses.dataclass(frozen=True)
class Task:
    """What kind of training a run is: its DataModule, its LightningModule (from grown weights when given), the
    accuracy curves it logs and the final metrics done.json keeps."""

    data: Callable[[Run, int], L.LightningDataModule]
    module: Callable[[Run, Path | None, bool | None], L.LightningModule]
    accuracy_curves: tuple[str, ...]
    final_metrics: Callable[[dict[str, float]], dict[str, float | None]]


TEXT = Task(_text_data, language_model, (), _text_metrics)
IMAGE = Task(_image_data, _image_classifier, ("val/top1", "val/ema_top1"), _image_metrics)


def task_of(run: Run) -> Task:
    """A ViT run classifies images (`modules.tasks.classifier`); every other run is a language model."""
    return IMAGE if run.classifies_images else TEXT
