"""Where a run's curves go (Lightning's own lines, once each, too): `metrics.csv` always (the reports read it), and
(`--logger csv,tensorboard,wandb`), each resuming into the same run after a restart.

TensorBoard writes `<run dir>/tensorboard/`; a resumed run appends event files there. W&B writes under
`<run dir>/wandb/` (`WANDB_MODE=offline` keeps it there; `wandb sync` uploads it) with the run id kept in
`<run dir>/wandb_id`, so a restart continues the same W&B run. A resume repeats the steps after its checkpoint with
the same values (resumption is exact): TensorBoard shows them twice, W&B keeps the first.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import logging
import os
import secrets
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger, TensorBoardLogger, WandbLogger

from scaling_axes.harness.callbacks import ResumableCSVLogger
from scaling_axes.harness.runs import Run, source_commit
from scaling_axes.io import SuiteError, atomic_write

LOGGERS = ("csv", "tensorboard", "wandb")
EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb"}  # logger -> the module its extra installs
WANDB_ID = "wandb_id"


def parse_loggers(text: str) -> list[str]:
    """`--logger`'s value: comma-separated names of LOGGERS; csv is always among them."""
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if unknown := [name for name in names if name not in LOGGERS]:
        raise SuiteError(f"unknown logger {', '.join(unknown)}: choose from {', '.join(LOGGERS)} (comma-separated)")
    return ["csv", *(name for name in names if name != "csv")]


def check_loggers(names: Sequence[str]) -> None:
    """Stop before any compute if a logger's optional extra is not installed."""
    for name in names:
        if name in EXTRAS and importlib.util.find_spec(EXTRAS[name]) is None:
            raise SuiteError(f"--logger {name} needs its extra: pip install 'scaling-axes[{name}]'")


def build_loggers(names: Sequence[str], out: Path, hyperparameters: dict[str, Any]) -> list[Logger]:
    """The run's loggers, each given `hyperparameters` (the run's name, resolved config, experiment, scale, seed and
    commit; the last four also as W&B tags and group)."""
    check_loggers(names)
    loggers: list[Logger] = [ResumableCSVLogger(out, name="", version="")]
    if "tensorboard" in names:
        loggers.append(PlainTensorBoardLogger(out, name="tensorboard", version="", default_hp_metric=False))
    if "wandb" in names:
        labels = ("experiment", "scale", "seed", "commit")
        loggers.append(WandbLogger(
            name=hyperparameters["run"], save_dir=str(out), id=wandb_id(out), resume="allow",
            project=os.environ.get("WANDB_PROJECT", "scaling-axes"), group=hyperparameters.get("experiment"),
            tags=[f"{key}={hyperparameters[key]}" for key in labels if key in hyperparameters],
        ))  # fmt: skip
    for logger in loggers[1:]:
        logger.log_hyperparams(hyperparameters)
    return loggers


class PlainTensorBoardLogger(TensorBoardLogger):
    """TensorBoard's logger whose hparams.yaml holds plain YAML (what `yaml.safe_load` reads): the hyperparameters
    Lightning hands it (the module's and the data's too, with their tuples) as JSON values first."""

    def log_hyperparams(self, params: Any, metrics: dict[str, Any] | None = None) -> None:
        plain = vars(params) if isinstance(params, argparse.Namespace) else dict(params)
        super().log_hyperparams(json.loads(json.dumps(plain, default=str)), metrics)


def finish_loggers(loggers: Sequence[Logger]) -> None:
    """End the W&B run of a run that finished or stopped (a restart resumes it by its id)."""
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish()


def wandb_id(out: Path) -> str:
    """The W&B run id of the run in `out`: made on its first start, kept for every restart."""
    path = out / WANDB_ID
    if not path.exists():
        atomic_write(path, secrets.token_hex(8))
    return path.read_text().strip()


def hyperparameters(run: Run, labels: dict[str, Any]) -> dict[str, Any]:
    """What a logger records of the run: its name, `labels` (experiment, scale), seed, commit and resolved config, as
    plain JSON values (a tuple as a list: TensorBoard's hparams.yaml then loads with `yaml.safe_load`)."""
    return json.loads(json.dumps({"run": run.name, **labels, "seed": run.seed, "commit": source_commit(),
                                  "model": run.model, "model_config": dataclasses.asdict(run.config),
                                  "budget": dataclasses.asdict(run.budget)}))  # fmt: skip


FINAL_METRICS = ("val_loss", "val_bpb", "test_loss", "val_top1")  # what TensorBoard's HPARAMS tab shows per run


def log_final_metrics(loggers: Sequence[Logger], done: dict[str, Any]) -> None:
    """A finished run's final metrics beside its hyperparameters where a logger compares runs by them (TensorBoard's
    HPARAMS tab: one row per run)."""
    final = {f"final/{key}": done[key] for key in FINAL_METRICS if isinstance(done.get(key), (int, float))}
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger) and final:
            logger.log_hyperparams(logger.hparams, metrics=final)


class _OncePerProcess(logging.Filter):
    """Lightning's accelerator lines, said at each Trainer's start: each distinct one once a process. Its tips
    (an advertisement for a logging service, at every Trainer) never."""

    ADVERTISEMENTS = ("💡 Tip",)
    REPEATED = ("GPU available", "TPU available", "HPU available")

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(self.ADVERTISEMENTS):
            return False
        if not message.startswith(self.REPEATED):
            return True
        first = message not in self.seen
        self.seen.add(message)
        return first


def quiet_lightning_logs() -> None:
    """Lightning's log lines as the suite wants them (`_OncePerProcess`), from here on in this process."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(each, _OncePerProcess) for each in logger.filters):
        logger.addFilter(_OncePerProcess())
