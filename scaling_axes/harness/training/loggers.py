"""Where a run's curves go (Lightning's own lines, once each, too): `metrics.csv` always (the reports read it), and
(`--logger csv,tensorboard,wandb`), each resuming into the same run after a restart.

TensorBoard writes `<run dir>/tensorboard/`; a resumed run appends event files there. A resume repeats the steps
after its checkpoint with the same values (resumption is exact): TensorBoard shows them twice. W&B writes under
`<run dir>/wandb/` (`WANDB_MODE=offline` keeps it there; `wandb sync` uploads it) with the run id kept in
`<run dir>/wandb_id`, so a restart continues the same W&B run, each point in it once (`ResumableWandbLogger`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import secrets
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only

from scaling_axes.checkout import source_commit
from scaling_axes.harness.runs import Run
from scaling_axes.harness.training.launch import check_loggers
from scaling_axes.harness.training.metrics_csv import ResumableCSVLogger, metric_rows
from scaling_axes.io import atomic_write

WANDB_ID = "wandb_id"


def build_loggers(names: Sequence[str], out: Path, hyperparameters: dict[str, Any]) -> list[Logger]:
    """The run's loggers, each given `hyperparameters` (the run's name, resolved config, experiment, scale, seed and
    commit; the last four also as W&B tags and group)."""
    check_loggers(names)
    loggers: list[Logger] = [ResumableCSVLogger(out, name="", version="")]
    if "tensorboard" in names:
        loggers.append(PlainTensorBoardLogger(out, name="tensorboard", version="", default_hp_metric=False))
    if "wandb" in names:
        if not (out / "wandb").is_symlink():  # the suite makes W&B's folder, checked like every entry of the run
            (out / "wandb").mkdir(exist_ok=True)
        labels = ("experiment", "scale", "seed", "commit")
        loggers.append(
            ResumableWandbLogger(
                out,
                name=hyperparameters["run"],
                project=os.environ.get("WANDB_PROJECT", "scaling-axes"),
                group=hyperparameters.get("experiment"),
                tags=[f"{key}={hyperparameters[key]}" for key in labels if key in hyperparameters],
            )
        )
    for logger in loggers[1:]:
        logger.log_hyperparams(hyperparameters)
        if isinstance(logger, ResumableWandbLogger):
            logger.log_missing(out / "metrics.csv")
    return loggers


class PlainTensorBoardLogger(TensorBoardLogger):
    """TensorBoard's logger whose hparams.yaml holds plain YAML (what `yaml.safe_load` reads): the hyperparameters
    Lightning hands it (the module's and the data's too, with their tuples) as JSON values first."""

    def log_hyperparams(self, params: Any, metrics: dict[str, Any] | None = None) -> None:
        plain = vars(params) if isinstance(params, argparse.Namespace) else dict(params)
        super().log_hyperparams(json.loads(json.dumps(plain, default=str)), metrics)


class ResumableWandbLogger(WandbLogger):
    """W&B's logger for a run that restarts: the same W&B run, its `_step` going on from the last one an earlier
    session wrote, and each (metric, step) point in it once. A session killed before W&B wrote its last points (a
    kill -9 takes what W&B had not flushed) loses nothing: the points metrics.csv holds and no session wrote are
    logged again (`log_missing`), and the points a killed session wrote past its checkpoint are not repeated."""

    def __init__(self, out: Path, **options: Any) -> None:
        run_id = wandb_id(out)
        super().__init__(save_dir=str(out), id=run_id, resume="allow", **options)
        self._written, self._next_step = wandb_history(out, run_id)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        unwritten = {key: value for key, value in metrics.items() if (key, step) not in self._written}
        if unwritten:
            self.experiment.log({**unwritten, "trainer/global_step": step}, step=self._next_step)
            self._written.update((key, step) for key in unwritten)
            self._next_step += 1

    @rank_zero_only
    def log_missing(self, metrics_csv: Path) -> None:
        """Log the points of `metrics_csv` (as a resume cuts it: up to its checkpoint) that no session wrote."""
        for row in metric_rows(metrics_csv)[1]:
            self.log_metrics(
                {key: float(value) for key, value in row.items() if value and key != "step"}, int(row["step"])
            )


def wandb_history(out: Path, run_id: str) -> tuple[set[tuple[str, int]], int]:
    """The (metric, trainer step) points that the sessions of W&B run `run_id` in `out` wrote, and the `_step`
    after their last."""
    written, last_step = set(), -1
    for path in sorted(out.glob(f"wandb/*-{run_id}/run-{run_id}.wandb")):
        for history in wandb_history_rows(path):
            last_step = max(last_step, history.get("_step", -1))
            step = history.get("trainer/global_step")
            written.update((key, step) for key in history if not key.startswith(("_", "trainer/global_step")))
    return written, last_step + 1


WANDB_BLOCK, WANDB_HEADER, WANDB_RECORD = 32768, struct.Struct("<4sHB"), struct.Struct("<IHB")


def wandb_history_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The history rows of a W&B transaction log (`run-<id>.wandb`: LevelDB's log format, W&B's protobuf records),
    up to the first record a kill cut short."""
    from wandb.proto import wandb_internal_pb2

    data, at, pending = path.read_bytes(), WANDB_HEADER.size, b""
    if data[:4] != b":W&B":
        return
    while at + WANDB_RECORD.size <= len(data):
        if WANDB_BLOCK - at % WANDB_BLOCK < WANDB_RECORD.size:  # a block's tail too short for a header: padding
            at += WANDB_BLOCK - at % WANDB_BLOCK
            continue
        checksum, length, kind = WANDB_RECORD.unpack_from(data, at)
        if kind == 0:  # zeros to the block's end
            at += WANDB_BLOCK - at % WANDB_BLOCK
            continue
        chunk = data[at + WANDB_RECORD.size : at + WANDB_RECORD.size + length]
        at += WANDB_RECORD.size + length
        if len(chunk) < length or zlib.crc32(bytes([kind]) + chunk) != checksum:
            return
        pending += chunk
        if kind in (1, 4):  # a record's whole (1) or last (4) fragment
            record = wandb_internal_pb2.Record.FromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                yield {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
                }


def finish_loggers(loggers: Sequence[Logger]) -> None:
    """End the W&B run of a run that finished or stopped (a restart resumes it by its id), and wait for W&B's service
    to have written all of it: `finish` alone can return while the service still writes (seen with two processes
    on two cores), and a restart reads that log to log each point once (`wandb_history`). TensorBoard's writer is
    flushed: the final metrics' HPARAMS event comes after fit, and sat in its queue (seen under two test processes)."""
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.flush()
    if any(isinstance(logger, WandbLogger) for logger in loggers):
        import wandb

        wandb.finish()
        wandb.teardown()


def wandb_id(out: Path) -> str:
    """The W&B run id of the run in `out`: made on its first start, kept for every restart."""
    path = out / WANDB_ID
    if not path.exists():
        atomic_write(path, secrets.token_hex(8))
    return path.read_text().strip()


def hyperparameters(run: Run, labels: dict[str, Any]) -> dict[str, Any]:
    """What a logger records of the run: its name, `labels` (experiment, scale), seed, commit and resolved config, as
    plain JSON values (a tuple as a list: TensorBoard's hparams.yaml then loads with `yaml.safe_load`)."""
    return json.loads(
        json.dumps(
            {
                "run": run.name,
                **labels,
                "seed": run.seed,
                "commit": source_commit(),
                "model": run.model,
                "model_config": dataclasses.asdict(run.config),
                "budget": dataclasses.asdict(run.budget),
            }
        )
    )


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
