"""A run's directory and what a finished run leaves in it (its lock: `lock.py`; its settings, config.yaml:
`settings.py`): `done.json`, `final.safetensors` and `config.json`, each written with its checksum and verified where
read."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaling_axes.checkout import source_commit
from scaling_axes.datamodules.corpora import data_digest
from scaling_axes.datamodules.sources import tokenizer_of
from scaling_axes.datamodules.tokenizers import Tokenizer, load_tokenizer, tokenizer_digest
from scaling_axes.harness.runs import Run
from scaling_axes.harness.training.settings import read_config
from scaling_axes.io import (
    CorruptFileError,
    SuiteError,
    atomic_save_safetensors,
    atomic_write,
    check_directory,
    checksum_file,
    file_digest,
    read_verified_json,
    verify_checksum,
)
from scaling_axes.modules.registry import preset_overrides

if TYPE_CHECKING:
    import torch

FINAL_WEIGHTS = "final.safetensors"  # a finished run's weights (a run finished before issue 39: final.pt, still read)
LEGACY_FINAL_WEIGHTS = "final.pt"
FINAL_CONFIG = "config.json"  # beside them: what builds the model and tokenizes its input (`final_config`)


def check_writable(out: Path) -> None:
    """Fail before any compute (and before its lock is taken) if the run's directories cannot take files."""
    for directory in (out, out / "checkpoints"):
        check_directory(directory, "--out-dir")


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


def drop_final_checkpoint(out: Path) -> None:
    """A finished run's `checkpoints/last.ckpt` and its checksum, removed where its scale keeps none
    (`Scale.keeps_final_checkpoint`: smoke, whose runs write none at their end, and leave one only where a signal
    stopped them): the optimiser's state, three times the weights, that nothing reads once done.json and the final
    weights are written (a finished run is read, never resumed; export, growth and the downstream evaluations read
    final.safetensors)."""
    last = out / "checkpoints" / "last.ckpt"
    for path in (last, checksum_file(last)):
        path.unlink(missing_ok=True)


def write_diverged(out: Path, run: Run, error: FloatingPointError) -> dict:
    """A run whose loss went non-finite is finished: done.json says so and keeps the error. A sweep point's losses
    are null (never a sweep's choice); a language model of an experiment enters at its initial loss, ln(vocabulary):
    a planned seed is analysed whatever it did (issue 83), as the worst a model that learned nothing scores."""
    initial = None if run.lr_sweep else math.log(run.config.vocab_size)
    done = {
        "run": run.name,
        "model": run.model,
        "val_loss": initial,
        "test_loss": initial,
        "diverged": str(error),
        "train_flops": run.train_flops(),
    }
    write_done(out, done)
    return done


def read_done(path: Path, weights: bool = False) -> dict:
    """A finished run's done.json and its final weights, both verified against their checksums (a diverged sweep
    point has none, nor one whose scale keeps no sweep point's: `weights_kept` false); an error naming the broken
    file and the fix otherwise. `weights`: the caller reads the weights too, and a run without them is refused."""
    fix = f"delete {path} and rerun the run's command to finish it again from {path.parent}"
    done = read_verified_json(path, fix)
    if not isinstance(done, dict) or "run" not in done or not ("steps" in done or "diverged" in done):
        raise CorruptFileError(f"{path} is not a finished run's record (no run name and steps); {fix}")
    if done.get("diverged") or done.get("weights_kept") is False:
        if weights:
            why = "it diverged" if done.get("diverged") else "its scale keeps no sweep point's weights"
            raise SuiteError(f"{path.parent} has no final weights ({why}): use a run its sweep chose a rate for")
        return done
    weights_file = final_weights(path.parent)
    verify_checksum(weights_file, fix)
    check_bound(path.parent, weights_file, fix)
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
