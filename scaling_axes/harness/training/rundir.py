"""A run's directory, every file in it (its lock: `lock.py`): the settings it was started with
(config.yaml, compared field by field with the launch's fingerprint; moved aside by --force-new, never deleted), the
checkpoint's own record and a finished run's `done.json`, `final.safetensors` and
`config.json`, each written with its checksum and verified where read."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from scaling_axes.datamodules.corpora import data_digest, tokenizer_of
from scaling_axes.datamodules.tokenizers import Tokenizer, load_tokenizer, tokenizer_digest
from scaling_axes.harness.runs import Run, source_commit
from scaling_axes.harness.training.launch import NAMES, Launch, fingerprint
from scaling_axes.io import (
    CorruptFileError,
    atomic_save_safetensors,
    atomic_write,
    check_directory,
    file_digest,
    load_torch,
    read_verified_json,
    verify_checksum,
)
from scaling_axes.modules.registry import preset_overrides

RUN_STATE = "scaling_axes"  # a checkpoint's own record: the run's settings and how far its metrics log went
FINAL_WEIGHTS = "final.safetensors"  # a finished run's weights (a run finished before issue 39: final.pt, still read)
LEGACY_FINAL_WEIGHTS = "final.pt"
FINAL_CONFIG = "config.json"  # beside them: what builds the model and tokenizes its input (`final_config`)


def check_writable(out: Path) -> None:
    """Fail before any compute (and before its lock is taken) if the run's directories cannot take files."""
    for directory in (out, out / "checkpoints"):
        check_directory(directory, "--out-dir")


def read_config(out: Path) -> dict:
    """`out`'s config.yaml, verified against its checksum, or an error naming it and the fix when it is damaged,
    edited or not the mapping the suite writes."""
    path, fix = out / "config.yaml", "restore it, or pass --force-new to move the run aside and start over"
    verify_checksum(path, fix)
    try:
        config = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        first = str(error).splitlines()[0]
        raise CorruptFileError(f"{path} is not readable YAML ({first}); {fix}") from error
    if not isinstance(config, dict) or not isinstance(config.get("fingerprinted", {}), dict):
        raise CorruptFileError(f"{path} is not a run's config.yaml (no mapping of its settings); {fix}")
    return config


def fingerprint_changes(out: Path, fields: dict[str, Any], tolerated: tuple[str, ...] = ()) -> list[str]:
    """The fields (`field: old -> new`) in which the run in `out` was started with other settings than `fields`;
    fields it did not record (it predates them) are not compared, nor is a run from before fingerprints, nor one that
    never reached a checkpoint (a launch stopped before training, by its data or its cluster: nothing of it is
    kept, so its config.yaml is replaced)."""
    if not (out / "config.yaml").exists() or not (
        (out / "checkpoints" / "last.ckpt").exists() or (out / "done.json").exists()
    ):
        return []
    recorded = read_config(out).get("fingerprinted") or {}
    return recorded_differences(recorded, fields, tolerated)


def check_fingerprint(out: Path, fields: dict[str, Any], tolerated: tuple[str, ...] = ()) -> None:
    """Stop if `out` holds a run started with other settings, naming each field that differs (but `tolerated`)."""
    if changes := fingerprint_changes(out, fields, tolerated):
        raise SystemExit(
            f"{out} holds a run started with other settings ({'; '.join(changes[:10])}). Rerun with its settings "
            f"to resume or keep it, or pass --force-new to move it aside and start over{_kernels_hint(changes)}"
        )


def _kernels_hint(changes: list[str]) -> str:
    if not any(change.startswith("kernels:") for change in changes):
        return ""
    return "; or, to resume on these kernels knowing it will not be the same run bitwise, --allow-other-kernels"


def checkpoint_state(out: Path, fingerprinted: dict, tolerated: tuple[str, ...] = ()) -> dict | None:
    """The record (`RUN_STATE`) of `out`'s `checkpoints/last.ckpt`, verified, or None without one. Verified: that it
    opens as tensors and plain data (cheaply, memory-mapped; a crafted pickle is named as such), its checksum, and
    that the settings it records are `fingerprinted` (config.yaml may be damaged or edited; the checkpoint is
    checksummed). A broken one stops the run with what to do."""
    last = out / "checkpoints" / "last.ckpt"
    if not last.exists():
        return None
    fix = "delete it and rerun to start the run over (no earlier checkpoint is kept), or restore it from a copy"
    checkpoint = load_torch(last, fix, mmap=True)
    verify_checksum(last, fix)
    state = checkpoint.get(RUN_STATE) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not {"fingerprinted", "metrics_csv"} <= state.keys():
        raise CorruptFileError(f"{last} records no run settings (a checkpoint of an older suite); {fix}")
    if changes := recorded_differences(state["fingerprinted"], fingerprinted, tolerated):
        raise SystemExit(
            f"{last} was written by a run with other settings ({'; '.join(changes[:10])}). Rerun with "
            f"its settings to resume, or pass --force-new to move it aside and start over{_kernels_hint(changes)}"
        )
    return {**state, "global_step": int(checkpoint.get("global_step", 0))}  # where it resumes


def recorded_differences(recorded: dict, now: dict, tolerated: tuple[str, ...] = ()) -> list[str]:
    """`field: recorded -> now` for each recorded field that differs now, names (`NAMES`) and `tolerated` aside."""
    differences = _differences(recorded, {key: now.get(key) for key in recorded})
    return [f"{key}: {old!r} -> {new!r}" for key, old, new in differences if key not in (*NAMES, *tolerated)]


def _differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d
            for key in sorted(set(old) | set(new), key=str)
            for d in _differences(old.get(key), new.get(key), f"{prefix}{key}.")
        ]
    return [] if old == new else [(prefix.rstrip("."), old, new)]


def move_aside(out: Path, changes: list[str]) -> Path | None:
    """--force-new: the old run directory (started with other settings: `changes`) is renamed, never overwritten;
    the run starts over in a fresh one."""
    if not out.exists():
        return None
    aside = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    out.rename(aside)
    print(f"moved the earlier run {out} ({'; '.join(changes[:3])}) aside to {aside}; starting over")
    return aside


def write_config(launch: Launch, run: Run) -> None:
    """config.yaml: `run` as it trains (grown: with the overrides growth set), the launch's options and fingerprint.
    Rank zero writes it (each rank's would differ in its time)."""
    from lightning.pytorch.utilities import rank_zero_only  # here: reading a run needs no Lightning

    if rank_zero_only.rank != 0:
        return
    config = {
        "run": {k: v for k, v in dataclasses.asdict(run).items() if k != "budget"},
        "budget": dataclasses.asdict(run.budget),
        "model_config": dataclasses.asdict(run.config),
        "model_class": type(run.config).__name__,
        "trainer": launch.options,
        "labels": launch.labels,  # the experiment, scale and analysis plan (its digest) it trains under
        "command": " ".join(sys.argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "fingerprint": fingerprint(launch.fingerprint),
        "fingerprinted": launch.fingerprint,
    }
    atomic_write(launch.out / "config.yaml", yaml.safe_dump(config, sort_keys=False), checksum=True)


def changes_or_unreadable(out: Path, fields: dict[str, Any]) -> list[str]:
    """What --force-new moves a directory aside for: the settings it differs in, or why they cannot be compared."""
    try:
        return fingerprint_changes(out, fields)
    except CorruptFileError as error:
        return [str(error)]


def final_weights(run_dir: Path) -> Path:
    """Where a finished run's weights are: final.safetensors, or an older run's final.pt."""
    legacy = run_dir / LEGACY_FINAL_WEIGHTS
    return legacy if legacy.exists() and not (run_dir / FINAL_WEIGHTS).exists() else run_dir / FINAL_WEIGHTS


def final_config(run: Run) -> dict[str, Any]:
    """config.json: the preset and the overrides that resolve it to the model trained, the resolved config itself
    (`model_config`: enough to rebuild the model with `registry.config_from`, whatever the presets become), the
    tokenizer, the commit."""
    text = not run.classifies_images
    tokenizer = tokenizer_of(run.corpus, run.tokenizer) if text else None
    path = run.data.get("tokenizer_path")
    return {
        "run": run.name,
        "model": run.model,
        "overrides": preset_overrides(run.model, run.config),
        "model_class": type(run.config).__name__,
        "model_config": dataclasses.asdict(run.config),
        "tokenizer": tokenizer,
        "tokenizer_path": path,
        "tokenizer_blake2b": tokenizer_digest(load_tokenizer(tokenizer, path)) if text else None,
        "corpus": run.corpus,
        "data_blake2b": data_digest(run.corpus, tokenizer) if text else None,
        "commit": source_commit(),
    }


def data_changed(run_dir: Path) -> str | None:
    """Why the data a finished run trained and validated on is not the corpus as prepared now (re-prepared since:
    the digest its config.json records differs), or None (the same, a run from before the digest, or a data root
    where the corpus is not prepared yet: nothing there differs, and preparing it is what every run does first)."""
    config = read_final_config(run_dir)
    recorded = config.get("data_blake2b")
    now = data_digest(config["corpus"], config["tokenizer"]) if recorded else None
    if now is None or now == recorded:
        return None
    return (
        f"its data changed since it trained: {config['corpus']}/{config['tokenizer']} is prepared with other "
        f"tokens now (digest {now}, recorded {recorded}); retrain it on this data (--force-new) or restore "
        "the data it trained on"
    )


def check_tokenizer(config: dict[str, Any], tokenizer: Tokenizer, run_dir: Path) -> None:
    """Stop unless `tokenizer` is the one the run in `run_dir` trained with (the digest its config.json records):
    other ids would score, export or grow its model silently wrong."""
    recorded, now = config.get("tokenizer_blake2b"), tokenizer_digest(tokenizer)
    if recorded and recorded != now:
        raise CorruptFileError(
            f"the tokenizer {tokenizer.source} is not the one {run_dir} trained with (its digest "
            f"{now}, recorded {recorded}): restore that file, or retrain the run"
        )


def run_fingerprint(run_dir: Path) -> str | None:
    """The fingerprint a run's config.yaml records (None: a run without one)."""
    return read_config(run_dir).get("fingerprint") if (run_dir / "config.yaml").exists() else None


def write_final(out: Path, run: Run, state: dict[str, torch.Tensor]) -> None:
    """A finished run's weights and config.json, which binds them to the run (their digest, the fingerprint of its
    config.yaml): another run's weights copied in, checksum and all, are refused (`read_done`)."""
    config, fingerprinted = final_config(run), run_fingerprint(out)
    atomic_save_safetensors(state, out / FINAL_WEIGHTS, checksum=True)
    bound = {"weights_blake2b": file_digest(out / FINAL_WEIGHTS), "fingerprint": fingerprinted}
    atomic_write(out / FINAL_CONFIG, json.dumps({**config, **bound}, indent=2), checksum=True)


def read_final_config(run_dir: Path) -> dict[str, Any]:
    """What builds a finished run's model: its config.json, verified, or an older run's config.yaml."""
    if (run_dir / FINAL_CONFIG).exists():
        return read_verified_json(run_dir / FINAL_CONFIG, f"delete {run_dir / 'done.json'} and rerun the run")
    run = read_config(run_dir).get("run")
    if not isinstance(run, dict) or "model" not in run:
        raise CorruptFileError(
            f"{run_dir / 'config.yaml'} names no run model: not a run's config.yaml; restore it or rerun the run"
        )
    tokenizer = tokenizer_of(run["corpus"], run.get("tokenizer"))
    return {**run, "tokenizer": tokenizer, "tokenizer_path": (run.get("data") or {}).get("tokenizer_path")}


def write_done(out: Path, done: dict) -> None:
    """A finished run's record, `out/done.json`, with its checksum (written after its final weights)."""
    atomic_write(out / "done.json", json.dumps(done, indent=2), checksum=True)


def write_diverged(out: Path, run: Run, error: FloatingPointError) -> dict:
    """A sweep point whose loss went non-finite is finished: done.json says so (val_loss null) and keeps the error."""
    done = {
        "run": run.name,
        "model": run.model,
        "val_loss": None,
        "diverged": str(error),
        "train_flops": run.train_flops(),
    }
    write_done(out, done)
    return done


def read_done(path: Path) -> dict:
    """A finished run's done.json and its final weights, both verified against their checksums (a diverged sweep
    point has no weights); an error naming the broken file and the fix otherwise."""
    fix = f"delete {path} and rerun the run's command to finish it again from {path.parent}"
    weights = final_weights(path.parent)
    done = read_verified_json(path, fix)
    if not isinstance(done, dict) or "run" not in done or not ("steps" in done or "diverged" in done):
        raise CorruptFileError(f"{path} is not a finished run's record (no run name and steps); {fix}")
    if not done.get("diverged"):
        verify_checksum(weights, fix)
        check_bound(path.parent, weights, fix)
    return done


def check_bound(run_dir: Path, weights: Path, fix: str) -> None:
    """Stop unless the final `weights` in `run_dir` are the ones its run wrote: their digest is the one config.json
    records, and config.json's fingerprint is the run's (config.yaml). A run from before the binding has none."""
    config_path = run_dir / FINAL_CONFIG
    if not config_path.exists():
        return
    config = read_verified_json(config_path, fix)
    if config.get("weights_blake2b") and config["weights_blake2b"] != file_digest(weights):
        raise CorruptFileError(
            f"{weights} is not the weights {run_dir.name} wrote (config.json records other ones: "
            f"another run's copied in?); {fix}"
        )
    recorded = run_fingerprint(run_dir)
    if config.get("fingerprint") and recorded and config["fingerprint"] != recorded:
        raise CorruptFileError(
            f"{config_path} belongs to another run (fingerprint {config['fingerprint']}, this run's {recorded}); {fix}"
        )
