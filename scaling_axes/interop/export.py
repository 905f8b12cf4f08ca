"""`python -m scaling_axes export RUN_DIR OUT`: a finished language-model run as a Hugging Face folder that
`AutoModelForCausalLM.from_pretrained(OUT)` loads, with its tokenizer (tokenizer.json) beside it.

The Transformer baseline becomes GPT-NeoX where its layout matches (`neox.py`). Every other model (Tokenformer,
RMT, MoT, and a Transformer with muP, learned positions or inverse layer scaling) is saved with remote code:
`hf_modeling.py` and the suite's files that build the model, copied with relative imports (`remote_code.py`), so
that `trust_remote_code=True` loads it with torch and transformers alone. Every export is a folder a Hub repository
takes as it is: weights, config, generation config, tokenizer and a model card (`model_card.py`), each file 0644.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaling_axes.datamodules.tokenizers import EOT, Tokenizer, as_hf_tokenizer
from scaling_axes.interop.model_card import Trained, model_card
from scaling_axes.interop.publish import (
    MANIFEST,
    MARKER,
    earlier_export,
    new_aside,
    publish,
    signals_held,
    tidy_stranded,
    write_manifest,
)
from scaling_axes.interop.remote_code import remote_code
from scaling_axes.io import SuiteError, check_directory, write_failure

if TYPE_CHECKING:
    from torch import nn


def check_hf_extra(what: str) -> None:
    if importlib.util.find_spec("transformers") is None:
        raise SuiteError(f"{what} needs the Hugging Face extra: pip install 'scaling-axes[hf]'")


def export(run_dir: Path, out: Path, replace: bool = False) -> str:
    """Write `run_dir`'s finished model and tokenizer into `out`, which must be empty unless `replace` (then it must
    hold an earlier export, which this one replaces); returns how the model was written. `run_dir` is a finished
    run's directory, or a Lightning checkpoint (`.ckpt`) of `fit` or of a run, its card naming what the checkpoint
    knows. The export is written aside and moved in whole (`publish`): `out` holds all of it or none of it, and of
    two exports at once one wins."""
    from scaling_axes.interop.hf_config import TESTED_TRANSFORMERS  # imported here, not above:
    from scaling_axes.interop.lm_eval_model import load_checkpoint  # `export --help` needs neither, nor torch
    from scaling_axes.interop.neox import as_neox, neox_mismatch

    check_hf_extra("export")
    tidy_stranded(out)  # first: an earlier export an interrupted --replace left aside is back before OUT is checked
    check_out(run_dir.parent if run_dir.suffix == ".ckpt" else run_dir, out, replace)
    trained = checkpoint_trained(run_dir) if run_dir.suffix == ".ckpt" else run_trained(run_dir)
    config = trained.config
    if config.get("tokenizer") is None:
        raise SuiteError(f"{run_dir} is an image classifier: export writes language models (timm loads the ViTs)")
    model, tokenizer = load_checkpoint(run_dir)  # a finished run's verified weights, as lm-eval reads them
    if getattr(model, "predicts_bytes", False):
        raise SuiteError(f"{run_dir}'s model predicts bytes, not tokens: a transformers causal LM gives token logits")
    if (unmatched := neox_mismatch(model.config)) is None:
        hf, how = as_neox(model, tokenizer), "GPT-NeoX (native in transformers)"
    else:
        hf, how = as_remote_code(config, model, tokenizer), f"remote code (trust_remote_code=True; {unmatched})"
    hf.generation_config = generation_config(tokenizer)
    hf.config.transformers_tested = list(TESTED_TRANSFORMERS)  # config.json says which lines it loads on
    aside, published = new_aside(out, "export"), False
    try:
        with stopped_by_signals(out, lambda: published):
            card = model_card(trained, model, hf, how)
            write_folder(aside, hf, tokenizer, model, card, unmatched is None)
            with signals_held():  # a Ctrl-C now arrives once OUT holds one export whole, and says which
                publish(aside, out, replace)
                published = True
    except Exception as error:
        if (code := write_failure(error, aside)) is None:
            raise
        raise OSError(code, os.strerror(code), str(aside)) from error  # one line naming it; OUT as it was
    finally:
        if not published:
            shutil.rmtree(aside, ignore_errors=True)  # the folder this export made, never anything else
    return how


def run_trained(run_dir: Path) -> Trained:
    """A finished run's record: refused, saying why, where it has not finished."""
    from scaling_axes.harness.training.rundir import read_done, read_final_config

    unfinished(run_dir)
    read_done(run_dir / "done.json", weights=True)  # a finished run first: what else is missing follows from that
    return Trained.of_run(run_dir, read_final_config(run_dir))


def checkpoint_trained(path: Path) -> Trained:
    """A Lightning checkpoint's record (`lm_eval_model.read_lightning_checkpoint`): its model's and data's settings
    and its step."""
    from scaling_axes.interop.lm_eval_model import read_lightning_checkpoint

    checkpoint, hparams, data = read_lightning_checkpoint(path)
    return Trained.of_checkpoint(hparams, data, int(checkpoint.get("global_step") or 0))


def write_folder(aside: Path, hf: Any, tokenizer: Tokenizer, model: nn.Module, card: str, native: bool) -> None:
    """The whole export in `aside`: weights and config, tokenizer, remote code (unless `native`), model card, each
    file 0644 as any Hub file (what reads a run's metrics reads its weights)."""
    from scaling_axes.modules.registry import registered_in  # here: `export --help` imports no torch

    hf.save_pretrained(aside)
    save_tokenizer(tokenizer, aside, model.config.max_seq_len)
    for name, source in () if native else remote_code(registered_in(model.config)).items():
        (aside / name).write_text(source)
    (aside / "README.md").write_text(card)
    for path in aside.iterdir():  # the folder is this export's alone: every file in it is one it wrote
        if path.name != MARKER:
            path.chmod(0o644)
    write_manifest(aside)
    (aside / MANIFEST).chmod(0o644)


@contextlib.contextmanager
def stopped_by_signals(out: Path, published: Callable[[], bool]) -> Iterator[None]:
    """Ctrl-C or SIGTERM while exporting ends it through its cleanup with one line that says where OUT stands (as it
    was, or holding the new export where it came after the publishing renames)."""

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except KeyboardInterrupt:
        where = "holds the new export" if published() else "is as it was"
        raise SystemExit(f"export interrupted: {out} {where}; rerun the same command") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def unfinished(run_dir: Path) -> None:
    """Stop, saying why, where `run_dir` has no done.json yet: a run still training (naming the process its lock
    names), or one that stopped before its end."""
    if (run_dir / "done.json").exists():
        return
    owner = run_dir.parent / f".{run_dir.name}.lock.owner"
    if owner.is_file() and not owner.is_symlink() and locked(run_dir.parent / f".{run_dir.name}.lock"):
        raise SuiteError(
            f"run {run_dir} is still training ({owner.read_text().strip()}, from its lock): export it once it finishes"
        )
    raise SuiteError(
        f"run {run_dir} has not finished (no done.json): rerun its command to train it to its end, then export it"
    )


def locked(lock: Path) -> bool:
    """Whether a live process holds the run lock `lock` (a killed one's is free, whatever file it left)."""
    from filelock import FileLock, Timeout

    if not lock.exists():
        return False
    held = FileLock(lock)
    try:
        held.acquire(timeout=0)
    except Timeout:
        return True
    held.release()
    return False


def check_out(run_dir: Path, out: Path, replace: bool) -> None:
    """Stop before anything is written where `out` would mix with other files or take any away: inside a run
    directory (its own config.json would be overwritten), a folder that holds the run (--replace would delete it),
    a folder that holds files already unless `replace`, and with `replace` a folder that holds more than an export."""
    run, target = run_dir.resolve(), out.resolve()
    if target.is_relative_to(run) or (target / "done.json").exists():
        raise SuiteError(
            f"OUT {out} is inside the run directory {run_dir}: export writes a config.json of its own; "
            "pass a folder outside it"
        )
    if run.is_relative_to(target):
        raise SuiteError(f"OUT {out} holds the run directory {run_dir} it exports: pass a folder outside it")
    if not out.exists():  # made only by the rename that publishes the export: a failed one leaves no OUT
        check_directory(out.parent, "OUT's folder")
        return
    check_directory(out, "OUT")
    if not any(out.iterdir()):
        return
    if not replace:
        raise SuiteError(
            f"OUT {out} holds files already (an earlier export's would stay beside this one): pass an "
            "empty or new folder, or --replace to replace an earlier export there"
        )
    earlier_export(out)  # exactly what an earlier export wrote, each file as it wrote it


def generation_config(tokenizer: Tokenizer) -> Any:
    """What `generate` and `pipeline` read: the end-of-text token as EOS, BOS and padding; the key/value cache."""
    from transformers import GenerationConfig

    eot = tokenizer.eot_id
    return GenerationConfig(bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, use_cache=True)


REMOTE_CLASSES = {
    "AutoConfig": "configuration_scaling_axes.ScalingAxesConfig",
    "AutoModelForCausalLM": "modeling_scaling_axes.ScalingAxesForCausalLM",
}


def exported_overrides(config: dict[str, Any], model: nn.Module) -> dict[str, Any]:
    """The run's overrides, and what lets the model run on torch alone: eager kernels (the fused ones stay in the
    suite) and a MoT's byte tables stored with its weights (the tokenizer code that builds them stays too)."""
    fields = {f.name for f in dataclasses.fields(model.config)}
    overrides = {**config["overrides"], **({"kernel": "torch"} if "kernel" in fields else {})}
    if "byte_table" in fields:
        overrides |= {"byte_table": "stored", "byte_symbols": model.bytes_vocab.symbols}
    return overrides


def as_remote_code(config: dict[str, Any], model: nn.Module, tokenizer: Tokenizer) -> nn.Module:
    from scaling_axes.interop.hf_modeling import ScalingAxesForCausalLM

    overrides = exported_overrides(config, model)
    hf = ScalingAxesForCausalLM(remote_config(config["model"], overrides, tokenizer.eot_id, tokenizer.vocab_size))
    stored = hf.backbone.state_dict().keys()  # with the buffers an export keeps (a MoT's byte tables)
    hf.backbone.load_state_dict({**model.state_dict(), **{n: b for n, b in model.named_buffers() if n in stored}})
    return hf


def remote_config(preset: str, overrides: dict[str, Any], eot_id: int | None, vocab_size: int | None = None) -> Any:
    """The remote-code config of preset `preset` with `overrides`, the standard fields read off the model's; its
    `vocab_size` the tokenizer's (the logits are cut to it; None: the model's)."""
    from scaling_axes.interop.hf_config import ScalingAxesConfig
    from scaling_axes.modules import get_config

    c = get_config(preset, **overrides)
    return ScalingAxesConfig(
        preset=preset,
        overrides=overrides,
        auto_map=REMOTE_CLASSES,
        vocab_size=min(vocab_size or c.vocab_size, c.vocab_size),
        max_position_embeddings=c.max_seq_len,  # the window lm-eval truncates to
        hidden_size=getattr(c, "d_model", None) or c.d_key * c.d_value,  # an RMT's residual
        num_hidden_layers=c.n_layer,
        num_attention_heads=getattr(c, "n_head", None) or c.rank,
        bos_token_id=eot_id,
        eos_token_id=eot_id,
        pad_token_id=eot_id,
        tie_word_embeddings=False,
    )


def save_tokenizer(tokenizer: Tokenizer, out: Path, window: int) -> None:
    """tokenizer.json and tokenizer_config.json: the suite's tokenization, its end-of-text token as EOS (and as the
    padding a batch needs, on the left as generating a batch wants it), its `model_max_length` the model's window
    (what `truncation=True` cuts to)."""
    from transformers import PreTrainedTokenizerFast

    eos = {"eos_token": EOT, "bos_token": EOT, "pad_token": EOT} if tokenizer.eot_id is not None else {}
    PreTrainedTokenizerFast(
        tokenizer_object=as_hf_tokenizer(tokenizer), model_max_length=window, padding_side="left", **eos
    ).save_pretrained(out)
    config = Path(out) / "tokenizer_config.json"  # 5.x names its own class, which 4.x does not know
    config.write_text(json.dumps({**json.loads(config.read_text()), "tokenizer_class": TOKENIZER_CLASS}, indent=2))


TOKENIZER_CLASS = "PreTrainedTokenizerFast"  # the class both transformers lines load a tokenizer.json with


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m scaling_axes export", description=__doc__.splitlines()[0])
    parser.add_argument(
        "run_dir",
        type=Path,
        help="a finished run's directory (runs/<experiment>/<scale>/<run>), or a Lightning checkpoint (.ckpt) that "
        "`fit` or a run wrote",
    )
    parser.add_argument("out", type=Path, help="the folder to write (made if missing; empty unless --replace)")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="replace an earlier export in OUT (only the files its manifest names, unchanged; anything else there "
        "is refused)",
    )
    args = parser.parse_args(argv)
    how = export(args.run_dir, args.out, args.replace)
    print(
        f"{args.run_dir} -> {args.out}: {how}; load with AutoModelForCausalLM.from_pretrained({str(args.out)!r}"
        f"{', trust_remote_code=True' if 'remote' in how else ''})"
    )
