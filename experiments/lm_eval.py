"""lm-eval's own command line with the suite's model registered as ``scaling-axes``: every lm-eval option works.

    python -m experiments.lm_eval --model scaling-axes --model_args checkpoint=runs/rmt_scaling/paper/rmt_305m \\
        --tasks piqa,hellaswag --batch_size 16

(`lm_eval --model scaling-axes` itself cannot see a model that no installed package registers; this is that CLI
after `import experiments.lm_eval_model`.) The model runs on CUDA when there is a GPU, else on the CPU, whatever
lm-eval's `--device` default says. For the suite's offline task copies and its tables use `experiments.evaluate`.
"""

from __future__ import annotations

import experiments.lm_eval_model  # noqa: F401  (registers "scaling-axes")


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
