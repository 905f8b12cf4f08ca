"""Grow a model: a Tokenformer by appending parameter tokens (paper section 3.3), a Transformer by Net2Net; a run
grown from its source's final weights (`grown_run`), and what growth did to the loss before any training.

    python -m scaling_axes grow small.ckpt tokenformer_354m grown.ckpt [--new-keys random] [--no-pin-tau]
    python -m scaling_axes grow small.ckpt transformer_757m grown.ckpt [--noise 1e-3]

The grown checkpoint holds weights only: training it starts a fresh optimizer and schedule, as the paper does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn

from scaling_axes.datamodules.sources import tokenizer_of
from scaling_axes.datamodules.text import TextDataModule
from scaling_axes.datamodules.tokenizers import load_tokenizer
from scaling_axes.harness.runs import Run
from scaling_axes.harness.scales import in_range
from scaling_axes.harness.training.rundir import (
    check_tokenizer,
    data_changed,
    final_weights,
    read_done,
    read_final_config,
)
from scaling_axes.harness.training.tasks import language_model
from scaling_axes.io import CorruptFileError, atomic_save_safetensors, atomic_write, read_verified_json, verify_checksum
from scaling_axes.modules import get_config
from scaling_axes.modules.registry import architecture_of, preset_overrides
from scaling_axes.modules.tasks.lm import LanguageModel, load_lm_checkpoint, save_lm_checkpoint

GROWN_WEIGHTS = "init_grown.safetensors"  # a grown run's first weights, grown from its source's final ones
GROWN_OVERRIDES = "init_grown_overrides.json"  # the config fields growth set (tau pins, Net2Net's eps)


def grow_model(
    model: nn.Module,
    target: Any,
    new_keys: str = "zero",
    pin_tau: bool = False,
    noise: float = 0.0,
    seed: int = 0,
    net2net: str = "exact",
) -> nn.Module:
    """Grow `model` into config `target` by its architecture's growth: a Tokenformer takes `new_keys` and `pin_tau`,
    a Transformer `noise`, `seed` and `net2net` ("exact", or "new_parameters" as the Tokenformer paper's Eq. 14);
    each is given only the options it takes."""
    options = {"new_keys": new_keys, "pin_tau": pin_tau, "noise": noise, "seed": seed, "net2net": net2net}
    return architecture_of(model.config).grow_model(model, target, **options)


def grow_checkpoint(src: str, target: str, dst: str, **options: Any) -> None:
    """Grow the model in a `LanguageModel` Lightning checkpoint into preset `target`; write a new one."""
    model, hparams = load_lm_checkpoint(src)
    growing = architecture_of(model.config).growing_fields
    kept = {k: v for k, v in (hparams.get("model_overrides") or {}).items() if k not in growing}
    grown = grow_model(model, get_config(target, **kept), **options)
    save_lm_checkpoint(dst, target, preset_overrides(target, grown.config), grown.state_dict(), hparams)


def grow_checkpoint_cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="Lightning .ckpt of a scaling_axes.modules.tasks.lm.LanguageModel")
    parser.add_argument("target", help="preset to grow into, e.g. tokenformer_354m or transformer_757m")
    parser.add_argument("output", help="where to write the grown .ckpt")
    parser.add_argument("--new-keys", choices=("zero", "random"), default="zero", help="Tokenformer: new key init")
    parser.add_argument(
        "--pin-tau",
        action="store_true",
        help="Tokenformer: keep tau (exact growth with zero keys); default: tau from the new n, as the paper",
    )
    parser.add_argument(
        "--noise", type=in_range(float, 0), default=0.0, help="Transformer: relative noise on widened weights"
    )
    parser.add_argument(
        "--net2net",
        choices=("exact", "new_parameters"),
        default="exact",
        help="Transformer: function-preserving Net2Net, or the Tokenformer paper's (Eq. 14)",
    )
    args = parser.parse_args(argv)
    grow_checkpoint(
        args.checkpoint,
        args.target,
        args.output,
        new_keys=args.new_keys,
        pin_tau=args.pin_tau,
        noise=args.noise,
        net2net=args.net2net,
    )
    print(f"wrote {args.output}")


@dataclasses.dataclass(frozen=True)
class Growth:
    """A run starts from `weights`, grown from `source`'s final weights at `source_weights`."""

    weights: Path
    source: Run
    source_weights: Path


def grown_run(source: Run, source_weights: Path, run: Run, out: Path) -> tuple[Run, Growth]:
    """Grow `source`'s final weights (verified: `source_weights`) into `run`'s model. Growth may set config
    fields (tau pins, Net2Net's eps): the returned run carries them as overrides, and both are kept in `out` so that
    a resumed run agrees."""
    if not (out / GROWN_OVERRIDES).exists():
        model = language_model(source, source_weights, compile=False).model
        grown = grow_model(model, run.config, seed=run.seed, **run.grow_options)
        write_grown(out, run, grown)
    return read_grown(out, run), Growth(out / GROWN_WEIGHTS, source, source_weights)


def measure_growth(trainer: L.Trainer, data: TextDataModule, grown: LanguageModel, growth: Growth) -> dict:
    """Validation loss on this run's data of the model before growth and right after it, before any training."""
    source = language_model(growth.source, growth.source_weights, compile=False)  # one validation: not worth it
    before = trainer.validate(source, datamodule=data, verbose=False)[0]["val/loss"]
    after = trainer.validate(grown, datamodule=data, verbose=False)[0]["val/loss"]
    return {"val_loss_before_growth": before, "val_loss_after_growth": after}


def source_weights(source_dir: Path, grown: Run) -> Path:
    """The final weights of the finished run in `source_dir`, verified (`read_done`), for `grown` to grow from: a
    text run must read the ids its source learned (the tokenizer its config.json records)."""
    read_done(source_dir / "done.json", weights=True)
    if changed := data_changed(source_dir):
        raise CorruptFileError(f"{source_dir}, which {grown.name} grows from: {changed}")
    if not grown.classifies_images:
        tokenizer = load_tokenizer(tokenizer_of(grown.corpus, grown.tokenizer), grown.data.get("tokenizer_path"))
        check_tokenizer(read_final_config(source_dir), tokenizer, source_dir)
    return final_weights(source_dir)


def write_grown(out: Path, run: Run, grown: torch.nn.Module) -> None:
    """A grown run's first weights and the config fields growth set, each with its checksum."""
    atomic_save_safetensors(grown.state_dict(), out / GROWN_WEIGHTS, checksum=True)
    atomic_write(out / GROWN_OVERRIDES, json.dumps(preset_overrides(run.model, grown.config)), checksum=True)


def read_grown(out: Path, run: Run) -> Run:
    """`run` as grown into `out` (`write_grown`): with the overrides growth set, its weights verified."""
    fix = f"delete {out} and rerun to grow {run.name} again"
    verify_checksum(out / GROWN_WEIGHTS, fix)
    return dataclasses.replace(run, overrides=read_verified_json(out / GROWN_OVERRIDES, fix))
