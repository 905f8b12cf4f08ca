"""metrics.csv, the run's curves as Lightning's CSVLogger writes them, kept whole across resumes: appended to after
a resume, cut back to what the resumed checkpoint recorded (`metrics_prefix`, `cut_metrics`), a row a kill cut short
dropped, and written again from the checkpoint's copy where it was lost."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only

from scaling_axes.io import CorruptFileError, atomic_write, write_csv


class _AppendingWriter(ExperimentWriter):
    """Keeps an existing metrics.csv (Lightning's writer deletes it), so a resumed run appends to its history. A row
    cut by a crash mid-write is dropped (its step is past the checkpoint, so the resumed run logs it again)."""

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if path.is_file():
            self.metrics_keys = repair_metrics(path)


def repair_metrics(path: Path) -> list[str]:
    """Drop a last row that a kill cut short (no newline, or the wrong number of fields); return the header."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    header = next(csv.reader(lines[:1]), [])
    if lines and (not lines[-1].endswith("\n") or len(next(csv.reader([lines[-1]]))) != len(header)):
        print(f"{path}: dropped a row cut short by an interrupted write: {lines[-1].strip()[:80]!r}")
        atomic_write(path, "".join(lines[:-1]))
    return header


class ResumableCSVLogger(CSVLogger):
    """CSVLogger writing `<run dir>/metrics.csv`, appending after a resume (to the log as the checkpoint left it,
    see `cut_metrics`)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment


def metrics_prefix(path: Path) -> dict[str, Any]:
    """The metrics log as it stands, for a checkpoint to carry: its rows (so that a resume can write it again), their
    number and a digest of their values (not of the file's bytes: the CSV writer rewrites the whole file, header
    included, when a new column appears)."""
    header, rows = metric_rows(path)
    return {"rows": len(rows), "blake2b": _rows_digest(rows), "header": header, "log": rows}


def cut_metrics(path: Path, prefix: dict[str, Any] | None) -> None:
    """Before a run trains: the metrics log as it was when the checkpoint it resumes from was written
    (`metrics_prefix`; empty for a run that starts over), so that the steps after it, which the run trains and logs
    again, appear once. A log that was deleted, cut or edited since is written again from the checkpoint's copy
    (a checkpoint of an older suite, which kept no copy, stops the run instead). Rank zero, the log's writer, does
    it."""
    if rank_zero_only.rank != 0:
        return
    header, rows = metric_rows(path)
    kept = rows[: prefix["rows"]] if prefix else []
    if prefix and (len(kept) < prefix["rows"] or _rows_digest(kept) != prefix["blake2b"]):
        if "log" not in prefix:
            raise CorruptFileError(
                f"{path} no longer holds the {prefix['rows']} rows logged before the last "
                "checkpoint (it was cut or edited); restore it, or delete the run directory to "
                "start over"
            )
        print(f"{path} lost rows logged before the last checkpoint (deleted, cut or edited): written again from it")
        header, rows, kept = prefix["header"], prefix["log"], prefix["log"]
        write_csv(path, tuple(header), kept)
    elif path.is_file() and len(rows) > len(kept):
        write_csv(path, tuple(header), kept)


def metric_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    if not path.is_file():
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _rows_digest(rows: list[dict[str, str]]) -> str:
    values = json.dumps([{k: v for k, v in row.items() if v} for row in rows], sort_keys=True)
    return hashlib.blake2b(values.encode(), digest_size=16).hexdigest()
