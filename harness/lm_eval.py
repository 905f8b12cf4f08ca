"""lm-eval's own command line with the suite's model registered as ``scaling-axes``: every lm-eval option works.

    python -m harness.lm_eval --model scaling-axes --model_args checkpoint=runs/rmt_scaling/paper/rmt_305m \\
        --tasks piqa,hellaswag --batch_size 16

(`lm_eval --model scaling-axes` itself cannot see a model that no installed package registers; this is that CLI
after `import harness.lm_eval_model`.) The model runs on CUDA when there is a GPU, else on the CPU, whatever
lm-eval's `--device` default says. For the suite's offline task copies and its tables use `harness.evaluate`.
"""

from __future__ import annotations

import scaling_axes.harness.lm_eval_model  # noqa: F401  (registers "scaling-axes")


def main(argv: list[str] | None = None) -> None:
    import sys

    from lm_eval.__main__ import cli_evaluate

    if argv is not None:
        sys.argv = ["lm_eval", *argv]  # lm-eval's parser reads sys.argv
    cli_evaluate()
