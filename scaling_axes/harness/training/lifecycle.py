"""A run's life, in one function over one `Launch`: its lock taken, the settings its directory holds checked, then
trained (grown first where it grows) or resumed, and recorded.

    done = train(resolve(run, out, {"accelerator": "cpu"}))   # or train_run(run, out, accelerator="cpu")

A finished run is read, never trained again; an interrupted one resumes from `checkpoints/last.ckpt` to the result
the uninterrupted run reaches. An experiment launches its runs through `experiment.schedule`, which trains a grown
run's source first and says where each run sits in its sweep.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scaling_axes.harness.runs import Run
from scaling_axes.harness.training.growth import grown_run
from scaling_axes.harness.training.identical import forget_identity
from scaling_axes.harness.training.launch import Launch, resolve
from scaling_axes.harness.training.lock import run_lock
from scaling_axes.harness.training.metrics_csv import cut_metrics
from scaling_axes.harness.training.rundir import check_writable, read_done, write_diverged
from scaling_axes.harness.training.settings import (
    changes_or_unreadable,
    check_fingerprint,
    checked_plans,
    checkpoint_state,
    move_aside,
    write_config,
)
from scaling_axes.harness.training.trainer import fit
from scaling_axes.io import check_no_links, remove_temporaries


def train(launch: Launch, extra_callbacks: list | None = None) -> dict:
    """Train the launch's run to its budget, or resume it, and return its done.json record. A directory started
    with other settings stops it (each differing field named) unless `force_new` moves that directory aside, under
    the run's lock (never while another process trains it); a directory whose settings match is kept, so a requeued
    `--force-new` job resumes. A sweep point whose loss goes non-finite, or an experiment's language model, is
    recorded as diverged (`rundir.write_diverged`); a run of its own, or an image classifier, stops."""
    run, out = launch.run, launch.out
    check_writable(out)
    with run_lock(out) as lock:
        if launch.force_new and (changes := changes_or_unreadable(out, launch.fingerprint)):
            forget_identity(out)
            move_aside(out, changes)
            if lock is not None:
                lock.hold()  # the fresh directory, locked as the one moved aside was
        finished = (out / "done.json").exists()
        tolerated = (
            *(("kernels",) if launch.options.get("other_kernels") else ()),  # --allow-other-kernels, recorded
            *(("code",) if finished or launch.options.get("other_code") else ()),  # --allow-other-code, recorded;
        )  # a finished run is read whichever code reads it
        resumed = None if finished else checkpoint_state(out, launch.fingerprint, tolerated)  # the checkpoint's record
        check_fingerprint(out, launch.fingerprint, tolerated)
        if finished:
            print(f"run {run.name}: finished earlier ({out / 'done.json'}); skipped")
            return read_done(out / "done.json")
        plans = checked_plans(launch, resuming=resumed is not None)
        check_no_links(out, managed=("wandb",))  # a planted link would take its writes out (W&B links its logs)
        run, growth = grown_run(*launch.source, run, out) if launch.source else (run, None)
        for directory in (out, out / "checkpoints") if lock is not None else ():  # rank zero: it holds the lock
            remove_temporaries(directory)  # a killed write's
        write_config(launch, run, plans)
        cut_metrics(out / "metrics.csv", resumed["metrics_csv"] if resumed else None)  # the curves go on exactly
        if launch.experiment is not None:
            print(f"== {launch.experiment.name}: training run {run.name} ({launch.scale} scale) in {out}", flush=True)
        try:
            return fit(launch, run, growth, resumed, extra_callbacks)
        except FloatingPointError as error:
            if not (run.lr_sweep or (launch.experiment is not None and not run.classifies_images)):
                raise
            what = "a learning-rate sweep point" if run.lr_sweep else "its losses enter at ln(vocabulary)"
            print(f"run {run.name} diverged ({what}; recorded, the experiment goes on): {error}")
            return write_diverged(out, run, error)


def train_run(
    run: Run, out: Path, extra_callbacks: list | None = None, labels: dict | None = None, **options: Any
) -> dict:
    """Train `run` into `out` on its own, outside any experiment (tests, benchmarks, a job of one's own): `options`
    go to the Trainer, except `compile` (`launch.compile_by_default`) and `loggers` (named by `labels`);
    `precision` defaults to bf16-mixed on a CUDA GPU, else 32-true."""
    return train(resolve(run, out, options, labels=labels or {}), extra_callbacks)
