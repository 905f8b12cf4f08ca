"""Training an experiment's runs (growing a run from its source first) and rebuilding its results table."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from scaling_axes.harness.results import RESULTS_DIR, write_report, write_rows
from scaling_axes.harness.runs import (
    RUNS_DIR,
    Experiment,
    Growth,
    Run,
    check_fingerprint,
    find_run,
    fingerprint_fields,
    load_results,
    move_aside,
    read_done,
    resolve_options,
    run_dir,
)
from scaling_axes.harness.training import train_run
from scaling_axes.io import atomic_torch_save, atomic_write, load_torch


def train(experiment: Experiment, scale: str, run: Run, runs_dir: Path = RUNS_DIR, force_new: bool = False,
          **trainer_options: Any) -> dict:  # fmt: skip
    """Train `run` to its budget (resuming if interrupted) and return its done.json contents. A run directory started
    with other settings stops this (see `check_fingerprint`) unless `force_new` moves it aside."""
    out = run_dir(experiment, scale, run, runs_dir)
    trainer_options = resolve_options(trainer_options)
    fields = fingerprint_fields(run, trainer_options)
    if force_new:
        move_aside(out)
    check_fingerprint(out, fields)
    if (out / "done.json").exists():
        print(f"run {run.name}: finished earlier ({out / 'done.json'}); skipped")
        return read_done(out / "done.json")
    growth = None
    if run.grow_from is not None:
        source = find_run(experiment, scale, run.grow_from)
        source_dir = run_dir(experiment, scale, source, runs_dir)
        if not (source_dir / "done.json").exists():
            train(experiment, scale, source, runs_dir, **trainer_options)
        run, growth = grown_run(source, source_dir, run, out)
    try:
        return train_run(run, out, growth, fingerprinted=fields, **trainer_options)
    except FloatingPointError as error:
        if not run.lr_sweep:
            raise
        return diverged(run, out, error)


def diverged(run: Run, out: Path, error: FloatingPointError) -> dict:
    """A sweep point whose loss went non-finite is finished: done.json says so (val_loss null) and keeps the error."""
    done = {"run": run.name, "model": run.model, "val_loss": None, "diverged": str(error),
            "train_flops": run.train_flops()}  # fmt: skip
    atomic_write(out / "done.json", json.dumps(done, indent=2))
    print(f"run {run.name} diverged (a learning-rate sweep point; recorded, the experiment goes on): {error}")
    return done


def grown_run(source: Run, source_dir: Path, run: Run, out: Path) -> tuple[Run, Growth]:
    """Grow `source`'s final weights into `run`'s model. Growth may set config fields (tau pins, Net2Net's eps):
    the returned run carries them as overrides, and both are kept in `out` so that a resumed run agrees."""

    from scaling_axes.harness.grow import grow_model
    from scaling_axes.modules.lm import load_weights
    from scaling_axes.modules.registry import build_from_config, preset_overrides

    weights, overrides = out / "init_grown.pt", out / "init_grown_overrides.json"
    if not overrides.exists():
        model = build_from_config(source.config)
        final = source_dir / "final.pt"
        load_weights(model, load_torch(final, f"delete {source_dir / 'done.json'} and rerun to retrain {source.name}"),
                     str(final))  # fmt: skip
        grown = grow_model(model, run.config, seed=run.seed, **run.grow_options)
        atomic_torch_save(grown.state_dict(), weights)
        atomic_write(overrides, json.dumps(preset_overrides(run.model, grown.config)))
    grown = dataclasses.replace(run, overrides=json.loads(overrides.read_text()))
    return grown, Growth(weights, source, source_dir / "final.pt")


def report(experiment: Experiment, scale: str, runs_dir: Path = RUNS_DIR, results_dir: Path | None = None) -> Path:
    """Rebuild `results/<scale>/<experiment>.csv` (and its figure) from finished runs, then REPORT.md."""
    results_dir = Path(results_dir or RESULTS_DIR)
    results = load_results(experiment, scale, runs_dir)
    path = write_rows(experiment.name, scale, experiment.report(scale, results), results_dir)
    if experiment.figure is not None:
        experiment.figure(scale, results, path.with_suffix(".png"))
    write_report(results_dir)
    return path
