"""A finished run's record and weights: `done.json`, `final.safetensors` and `config.json` beside them (the preset,
its resolved overrides, the tokenizer, the commit), each written with its checksum and verified where used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from scaling_axes.datamodules.corpora import tokenizer_of
from scaling_axes.harness.runs import Run, read_config, source_commit
from scaling_axes.io import CorruptFileError, atomic_save_safetensors, atomic_write, read_verified_json, verify_checksum
from scaling_axes.modules.registry import preset_overrides

FINAL_WEIGHTS = "final.safetensors"  # a finished run's weights (a run finished before issue 39: final.pt, still read)
LEGACY_FINAL_WEIGHTS = "final.pt"
FINAL_CONFIG = "config.json"  # beside them: what builds the model and tokenizes its input (`final_config`)


def final_weights(run_dir: Path) -> Path:
    """Where a finished run's weights are: final.safetensors, or an older run's final.pt."""
    legacy = run_dir / LEGACY_FINAL_WEIGHTS
    return legacy if legacy.exists() and not (run_dir / FINAL_WEIGHTS).exists() else run_dir / FINAL_WEIGHTS


def final_config(run: Run) -> dict[str, Any]:
    """config.json: the preset and the overrides that resolve it to the model trained, the tokenizer, the commit."""
    text = not run.classifies_images
    return {"run": run.name, "model": run.model, "overrides": preset_overrides(run.model, run.config),
            "model_class": type(run.config).__name__,
            "tokenizer": tokenizer_of(run.corpus, run.tokenizer) if text else None,
            "tokenizer_path": run.data.get("tokenizer_path"), "corpus": run.corpus,
            "commit": source_commit()}  # fmt: skip


def write_final(out: Path, run: Run, state: dict[str, torch.Tensor]) -> None:
    """A finished run's weights (safetensors) and config.json, each with its checksum."""
    atomic_save_safetensors(state, out / FINAL_WEIGHTS, checksum=True)
    atomic_write(out / FINAL_CONFIG, json.dumps(final_config(run), indent=2), checksum=True)


def read_final_config(run_dir: Path) -> dict[str, Any]:
    """What builds a finished run's model: its config.json, verified, or an older run's config.yaml."""
    if (run_dir / FINAL_CONFIG).exists():
        return read_verified_json(run_dir / FINAL_CONFIG, f"delete {run_dir / 'done.json'} and rerun the run")
    run = read_config(run_dir).get("run")
    if not isinstance(run, dict) or "model" not in run:
        raise CorruptFileError(f"{run_dir / 'config.yaml'} names no run model: not a run's config.yaml; restore it "
                               "or rerun the run")  # fmt: skip
    tokenizer = tokenizer_of(run["corpus"], run.get("tokenizer"))
    return {**run, "tokenizer": tokenizer, "tokenizer_path": (run.get("data") or {}).get("tokenizer_path")}


def write_done(out: Path, done: dict) -> None:
    """A finished run's record, `out/done.json`, with its checksum (written after its final weights)."""
    atomic_write(out / "done.json", json.dumps(done, indent=2), checksum=True)


def read_done(path: Path) -> dict:
    """A finished run's done.json and its final weights, both verified against their checksums (a diverged sweep
    point has no weights); an error naming the broken file and the fix otherwise."""
    fix = f"delete {path} and rerun the run's command to finish it again from {path.parent}"
    done = read_verified_json(path, fix)
    if not isinstance(done, dict) or "run" not in done or not ("steps" in done or "diverged" in done):
        raise CorruptFileError(f"{path} is not a finished run's record (no run name and steps); {fix}")
    if not done.get("diverged"):
        verify_checksum(final_weights(path.parent), fix)
    return done
