"""The README.md model card of an exported model: what it is (the architecture's own docstring names the paper),
the run that trained it (from its config.json and done.json), the suite's version, and how to load it."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn


def model_card(run_dir: Path, config: dict[str, Any], model: nn.Module, how: str) -> str:
    """The card of `run_dir`'s model, exported as `how`."""
    done = json.loads((run_dir / "done.json").read_text())
    experiment, scale, run = run_dir.resolve().parts[-3:]
    remote = "remote" in how
    described = inspect.getdoc(inspect.getmodule(type(model))).split("\n\n")[0].replace("\n", " ")
    row = [experiment, scale, run, done.get("steps"), done.get("tokens"), config.get("corpus"), config.get("tokenizer")]
    row += [done.get("val_loss"), done.get("test_loss")]
    lines = [
        "---",
        "library_name: transformers",
        f"tags: [scaling-axes, {type(model.config).__name__}]",
        "---",
        f"# {config['run']}: {config['model']}",
        "",
        described,
        "",
        f"Exported from scaling-axes {_version()} (commit {config.get('commit', 'unknown')}) as {how}.",
        "",
        "## Training run",
        "",
        "| experiment | scale | run | steps | tokens | corpus | tokenizer | validation loss | test loss |",
        "|---|---|---|---|---|---|---|---|---|",
        "| " + " | ".join(map(_cell, row)) + " |",
        "",
        "Losses are mean cross-entropy per token in nats on the run's held-out splits.",
        "",
        "## Load",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("PATH"{", trust_remote_code=True" if remote else ""})',
        'tokenizer = AutoTokenizer.from_pretrained("PATH")',
        "```",
        "",
    ]
    if remote:
        lines += [
            "The remote code is the suite's own model files with relative imports: torch and transformers are all "
            "it needs. `generate` caches every attention layer's keys and values (`use_cache=True`), so a step runs "
            "only the new token; it recomputes where a cache would change the logits: a padded batch, and past the "
            f"model's window of {model.config.max_seq_len} tokens. The fused Triton kernels stay in the suite "
            "(`kernel='torch'` here).",
            "",
        ]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def _version() -> str:
    try:
        return importlib.metadata.version("scaling-axes")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
