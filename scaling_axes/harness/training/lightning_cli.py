"""LightningCLI over the suite's LanguageModel and TextDataModule, for runs outside the paper tables.

python -m scaling_axes fit --model.model tokenformer_150m --data.corpus openwebtext --trainer.max_steps 1000
python -m scaling_axes fit --config my_run.yaml --print_config

Defaults as the runner's: bf16-mixed on a CUDA GPU (32-true on the CPU), clipping at 1.0, the model compiled on a
CUDA GPU (`--model.compile false` turns it off), a log line every 50 steps when stdout is not a terminal.
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.cli import LightningCLI

from scaling_axes.datamodules.text import TextDataModule
from scaling_axes.harness.training.callbacks import AtomicCheckpointIO
from scaling_axes.harness.training.loggers import quiet_lightning_logs
from scaling_axes.harness.training.progress import progress
from scaling_axes.io import load_torch, verify_checksum
from scaling_axes.modules.tasks.acceleration import default_precision, keep_freed_host_memory
from scaling_axes.modules.tasks.lm import LanguageModel


def cli_main(args: list[str] | None = None) -> LightningCLI:
    keep_freed_host_memory()
    progress_bar, callbacks = progress(50)
    defaults = {
        "precision": default_precision(),
        "gradient_clip_val": 1.0,
        "enable_progress_bar": progress_bar,
        "callbacks": callbacks,
        "plugins": [AtomicCheckpointIO()],
    }
    return LightningCLI(
        LanguageModel, TextDataModule, args=args, trainer_defaults=defaults, save_config_kwargs={"overwrite": True}
    )


def fit_main(args: list[str]) -> LightningCLI:
    """`python -m scaling_axes fit ...`: LightningCLI's fit subcommand, a checkpoint to resume from verified first."""
    quiet_lightning_logs()  # LightningCLI's Trainer, as the suite's own (`trainer.make_trainer`)
    verify_resumed(next((value for i, arg in enumerate(args) for value in _ckpt_path(args, i, arg)), None))
    return cli_main(["fit", *args])


def _ckpt_path(args: list[str], i: int, arg: str) -> list[str]:
    if arg == "--ckpt_path" and i + 1 < len(args):
        return [args[i + 1]]
    return [arg.removeprefix("--ckpt_path=")] if arg.startswith("--ckpt_path=") else []


def verify_resumed(path: str | None) -> None:
    """A checkpoint file `--ckpt_path` names, verified as `run` verifies its own before resuming: it opens as tensors
    and plain data (a crafted pickle is named as such) and its bytes are what was written (its checksum file);
    Lightning's keywords ("last", "best", ...) are its to resolve."""
    if path is None or path in ("last", "best", "hpc") or path.startswith("registry"):
        return  # any other name is a file, whatever its suffix: verified before Lightning unpickles it
    fix = "pass a checkpoint that this suite wrote, whole, with its .blake2b beside it"
    load_torch(Path(path), fix, mmap=True)
    verify_checksum(Path(path), fix)
