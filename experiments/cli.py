"""LightningCLI over the suite's LanguageModel and TextDataModule, for runs outside the paper tables.

python -m experiments.cli fit --model.model tokenformer_150m --data.corpus openwebtext --trainer.max_steps 1000
python -m experiments.cli fit --config my_run.yaml --print_config
"""

from __future__ import annotations

from lightning.pytorch.cli import LightningCLI

from datamodules.text import TextDataModule
from modules.lm import LanguageModel


def cli_main(args: list[str] | None = None) -> LightningCLI:
    return LightningCLI(LanguageModel, TextDataModule, args=args, save_config_kwargs={"overwrite": True})


if __name__ == "__main__":
    cli_main()
