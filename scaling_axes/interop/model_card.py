"""The README.md model card of an exported model, as the Hub reads it: metadata (license, datasets, pipeline tag,
a `model-index` of the run's results) written by huggingface_hub's `ModelCardData`, then what the model is (the
architecture's own docstring names the paper), its real size, the scale it was trained at said plainly, the run
(from its config.json, done.json and eval.json), the terms of its data, the suite's version, and how to load it."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scaling_axes.datamodules.sources import CORPORA
from scaling_axes.harness.scales import SCALES

if TYPE_CHECKING:
    from torch import nn

LICENSE = "mit"  # the suite's (LICENSE); a card names its data's terms beside it


@dataclasses.dataclass(frozen=True)
class Trained:
    """What an export knows of how its model was trained, as its card says it: the run's name, the experiment and
    scale it recorded (None: trained outside them, by `fit` or by hand), its config (model, overrides, corpus,
    tokenizer, commit) and its record (steps, tokens, final losses), never a fragment of a path."""

    run: str
    experiment: str | None
    scale: str | None
    config: dict[str, Any]
    done: dict[str, Any]
    evaluated: Path | None = None  # the eval.json of its weights, where there is one

    @classmethod
    def of_run(cls, run_dir: Path, config: dict[str, Any]) -> Trained:
        """A finished run's directory: its labels (config.yaml), config.json and done.json."""
        from scaling_axes.harness.training.rundir import read_config  # here: `export --help` imports no torch

        labels = (read_config(run_dir).get("labels") or {}) if (run_dir / "config.yaml").exists() else {}
        done = json.loads((run_dir / "done.json").read_text())
        name = config.get("run") or done.get("run") or run_dir.name
        return cls(name, labels.get("experiment"), labels.get("scale"), config, done, run_dir / "eval.json")

    @classmethod
    def of_checkpoint(cls, hparams: dict[str, Any], data: dict[str, Any], steps: int) -> Trained:
        """A Lightning checkpoint of `fit` (or of a run): its model's and its data's settings and its step."""
        from scaling_axes.datamodules.sources import tokenizer_of

        corpus = data.get("corpus")
        config = {
            "model": hparams["model"],
            "overrides": dict(hparams.get("model_overrides") or {}),
            "corpus": corpus,
            "tokenizer": tokenizer_of(corpus, data.get("tokenizer")) if corpus else data.get("tokenizer"),
        }
        return cls(f"{hparams['model']} at step {steps}", None, None, config, {"steps": steps})


def model_card(trained: Trained, model: nn.Module, hf: nn.Module, how: str) -> str:
    """The card of `trained`'s model `model`, exported as `hf` (`how`). Every sentence on its size, window, cache and
    padding is generated from the exported model, and a test checks each against the loaded export."""
    from huggingface_hub import ModelCardData

    from scaling_axes.interop.hf_config import NEEDS_TRANSFORMERS, TESTED_TRANSFORMERS

    config, done, native = trained.config, trained.done, "remote" not in how
    experiment, scale, run = trained.experiment or "none", trained.scale, trained.run
    corpus = CORPORA.get(config.get("corpus"))
    data = ModelCardData(
        library_name="transformers",
        license=LICENSE,
        pipeline_tag="text-generation",
        tags=["scaling-axes", type(model.config).__name__],
        datasets=[corpus.hub_dataset] if corpus and corpus.hub_dataset else None,
        model_name=run,
        eval_results=results(trained.evaluated, done, config.get("corpus") or "its corpus") or None,
    )
    row = [experiment, scale, run, done.get("steps"), done.get("tokens"), config.get("corpus"), config.get("tokenizer")]
    row += [done.get("val_loss"), done.get("test_loss")]
    lines = [
        "---",
        data.to_yaml(),
        "---",
        f"# {run}: {config['model']}",
        "",
        inspect.getdoc(inspect.getmodule(type(model))).split("\n\n")[0].replace("\n", " "),
        "",
        f"**{_scale_line(scale)}.** {size(model, hf, native)}",
        "",
        f"Exported from scaling-axes {_version()} (commit {config.get('commit', 'unknown')}) as {how}. Tested on "
        f"transformers {' and '.join(TESTED_TRANSFORMERS)}"
        + (
            f"; its code refuses transformers older than {'.'.join(map(str, NEEDS_TRANSFORMERS))} in one line."
            if not native
            else "; config.json holds both lines' rotary fields."
        ),
        "",
        "## Training run",
        "",
        "| experiment | scale | run | steps | tokens | corpus | tokenizer | validation loss | test loss |",
        "|---|---|---|---|---|---|---|---|---|",
        "| " + " | ".join(map(_cell, row)) + " |",
        "",
        "Losses are mean cross-entropy per token in nats on the run's held-out splits.",
        "",
        "## License",
        "",
        f"The suite's code and these weights: MIT. The training data ({config.get('corpus')}): "
        f"{corpus.terms if corpus else 'its source terms'}.",
        "",
        *load_lines(not native),
        *behaviour_lines(native, model.config.max_seq_len),
    ]
    return "\n".join(lines)


def results(evaluated: Path | None, done: dict[str, Any], corpus: str) -> list[Any]:
    """The run's results as the Hub's `model-index` holds them: its validation loss, and the zero-shot accuracies an
    evaluation of these weights recorded (eval.json, where there is one)."""
    from huggingface_hub import EvalResult

    found = []
    if done.get("val_loss") is not None:
        found.append(
            EvalResult(
                task_type="text-generation",
                dataset_type=corpus,
                dataset_name=corpus,
                dataset_split="validation",
                metric_type="loss",
                metric_name="validation loss (nats/token)",
                metric_value=float(done["val_loss"]),
            )
        )
    tasks = json.loads(evaluated.read_text()).get("tasks", {}) if evaluated and evaluated.exists() else {}
    for task, scores in sorted(tasks.items()):
        for metric in ("acc", "acc_norm"):
            if scores.get(metric) is not None:
                found.append(
                    EvalResult(
                        task_type="text-generation",
                        dataset_type=task,
                        dataset_name=task,
                        metric_type="accuracy",
                        metric_name=f"{metric} (lm-eval, zero-shot)",
                        metric_value=float(scores[metric]),
                    )
                )
    return found


def size(model: nn.Module, hf: nn.Module, native: bool) -> str:
    """The model's real size: the exported model's parameters (each shared tensor once; a padded vocabulary's rows
    cut), and the shapes, read off the suite's model."""
    from scaling_axes.modules.registry import architecture_of  # here: `export --help` imports no torch

    c = model.config
    architecture = architecture_of(c)
    heads = getattr(c, "n_head", None) or getattr(c, "rank", None)
    window = f"trained on windows of {c.max_seq_len} tokens" if native else f"a window of {c.max_seq_len} tokens"
    return (
        f"{sum(p.numel() for p in hf.parameters()):,} parameters in the exported tensors: {architecture.depth(c)} "
        f"layers of width {architecture.width(c)}, {heads} heads, {window} and a vocabulary of "
        f"{hf.config.vocab_size:,} tokens."
    )


def load_lines(remote: bool) -> list[str]:
    """How to load it: lines that run as written, in a terminal, with no question asked. The tokenizer is a
    standard fast tokenizer (tokenizer.json), read without the model's config or code."""
    lines = [
        "## Load",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast",
        "",
        f'model = AutoModelForCausalLM.from_pretrained("PATH"{", trust_remote_code=True" if remote else ""})',
        'tokenizer = PreTrainedTokenizerFast.from_pretrained("PATH")',
        "```",
        "",
    ]
    if remote:
        lines += [
            "`trust_remote_code=True` runs this folder's `modeling_scaling_axes.py` and the files it imports: the "
            "suite's own model files with relative imports, needing torch and transformers alone. Without it "
            "transformers asks whether to run that code (`Do you wish to run the custom code? [y/N]`), and so does "
            "`AutoTokenizer.from_pretrained(PATH)`, which reads the model's config first: the tokenizer line above "
            "reads tokenizer.json alone.",
            "",
        ]
    return lines


WINDOWED = "is cut into windows of {window} tokens from its end"  # what a test reads each card's statements by
NO_WINDOW = "has no window"
DROPS_FIRST_TARGET = "is left out"
SCORES_FIRST_TARGET = "also scores each row's first real token"


def behaviour_lines(native: bool, window: int) -> list[str]:
    """What the exported model does with a long text, a cache and a padded batch: GPT-NeoX as transformers runs it,
    the remote code as the suite's model does (`layers.windowed`; `hf_modeling`'s padded targets)."""
    if native:
        return [
            "## Window and padding",
            "",
            f"This GPT-NeoX {NO_WINDOW}: it attends to every token it is given, past the {window} the suite trained "
            f"it on, where the suite's model reads a longer text in windows of {window} tokens cut from its end. "
            f"For the suite's numbers give it at most {window} tokens at a time.",
            "",
            f"With left padding and labels of -100 at the padded positions, its loss {SCORES_FIRST_TARGET}, "
            "predicted from the padding before it: set that label to -100 too for the sequences' own loss.",
            "",
        ]
    return [
        "## Window, cache and padding",
        "",
        "`generate` caches every attention layer's keys and values (`use_cache=True`), so a step runs only the new "
        "token; it recomputes where a cache would change the logits: a padded batch, and past the model's window of "
        f"{window} tokens (it then keeps to the last {window}). A forward of a longer text "
        f"{WINDOWED.format(window=window)}, each run on its own: every position gets its logits, and the last "
        f"window's are those of the text cut to its last {window} tokens. The fused Triton kernels stay in the suite "
        "(`kernel='torch'` here).",
        "",
        "A left-padded batch with `labels` scores a target only where it and the token before it are real: each "
        f"row's first real token, which has no context, {DROPS_FIRST_TARGET}, so the loss is the sequences' own.",
        "",
    ]


def _scale_line(scale: str | None) -> str:
    known = SCALES.get(scale) if scale else None
    if known is None:
        return f"Trained outside the suite's scales{f' ({scale})' if scale else ''}: not a reproduction"
    return known.note.rstrip(".") if known.note else f"{scale} scale: the papers' own configurations"


def _cell(value: Any) -> str:
    return "n/a" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


def _version() -> str:
    try:
        return importlib.metadata.version("scaling-axes")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
