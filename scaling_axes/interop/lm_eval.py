"""lm-eval's own command line with the suite's model registered as ``scaling-axes``: every lm-eval option works.

    python -m scaling_axes lm-eval --model scaling-axes --model_args checkpoint=runs/rmt_scaling/paper/rmt_305m \\
        --tasks piqa,hellaswag --batch_size 16
    python -m scaling_axes lm-eval --model scaling-axes --model_args checkpoint=<run dir or .ckpt> \\
        --tasks piqa_offline,lambada_openai_offline

(`lm_eval --model scaling-axes` itself cannot see a model that no installed package registers; this is that CLI
after `import interop.lm_eval_model`.) The model runs on CUDA when there is a GPU, else on the CPU, whatever
lm-eval's `--device` default says. Tasks named `<task>_offline` are the suite's offline copies
(`interop.lm_eval_tasks`): their YAMLs are written to `<data root>/lm_eval_tasks/` and that folder is passed as
lm-eval's `--include_path` unless the command names one (then it must hold them: any lm-eval, in any process,
reads them with `--include_path data/lm_eval_tasks` or `TaskManager(include_path="data/lm_eval_tasks")`).
"""

from __future__ import annotations

import scaling_axes.interop.lm_eval_model  # noqa: F401  (registers "scaling-axes")
from scaling_axes.interop import lm_eval_tasks


def with_offline_tasks(argv: list[str]) -> list[str]:
    """`argv` with `--include_path <data root>/lm_eval_tasks` after writing the offline task YAMLs it asks for,
    when it asks for any and names no include path of its own."""
    asked = [v for i, a in enumerate(argv) for v in _value(argv, i, a, "--tasks")]
    offline = [t.removesuffix("_offline") for names in asked for t in names.split(",") if t.endswith("_offline")]
    if not offline or any(a == "--include_path" or a.startswith("--include_path=") for a in argv):
        return argv
    directory = lm_eval_tasks.offline_tasks(lm_eval_tasks.offline_tasks_dir(), lm_eval_tasks.lambada_file(), offline)
    return [*argv, "--include_path", str(directory)]


def _value(argv: list[str], i: int, arg: str, option: str) -> list[str]:
    if arg == option and i + 1 < len(argv):
        return [argv[i + 1]]
    return [arg.removeprefix(f"{option}=")] if arg.startswith(f"{option}=") else []


def main(argv: list[str] | None = None) -> None:
    import sys

    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *with_offline_tasks(sys.argv[1:] if argv is None else argv)]  # lm-eval reads sys.argv
    cli_evaluate()
