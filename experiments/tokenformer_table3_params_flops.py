"""Tokenformer Table 3: parameters and training FLOPs per component, Transformer vs Tokenformer, every preset.

`ours` is counted on the instantiated model (meta device: parameters by module, matmul FLOPs with
`torch.utils.flop_counter`); the closed forms in `modules.flops` equal these counts (tests/test_flops.py).
Training FLOPs per token are 3 x the forward matmul FLOPs at the preset's context length, token-token attention
counted as a dense kernel computes it (QK^T and AV over the whole square).

Erratum: the paper's parameter column gives n_layer * d_token * n for each Q/K/V/output Pattention; a Pattention
holds n key tokens *and* n value tokens, so the true count is twice that (official issue #12). Those rows show the
paper's formula in `paper` and the corrected count in `ours`.
"""

from __future__ import annotations

import torch

from experiments.results import Row
from experiments.runner import Experiment, main
from modules import build_model, get_config, list_models
from modules.flops import COMPONENTS, counted_flops, counted_params
from modules.tokenformer import TokenformerConfig


def paper_params(config) -> dict[str, int]:
    """The paper's Table 3 parameter formulas (Tokenformer side as printed, i.e. without the factor 2)."""
    d, layers = config.d_model, config.n_layer
    if isinstance(config, TokenformerConfig):
        return {
            "qkv": layers * d * 3 * config.qkv_tokens,
            "out": layers * d * config.proj_tokens,
            "ffn": layers * 2 * d * config.ffn_tokens,
        }
    return {"qkv": layers * d * 3 * d, "out": layers * d * d, "ffn": layers * 2 * d * config.ffn_dim}


def _preset_rows(name: str) -> list[Row]:
    config = get_config(name)
    with torch.device("meta"):
        params = counted_params(build_model(name))
    flops = counted_flops(config, config.max_seq_len)
    printed = paper_params(config)
    is_tokenformer = isinstance(config, TokenformerConfig)
    rows = []
    for component in (c for c in COMPONENTS if c != "other"):  # no residual-path variant among these presets
        paper = printed.get(component)
        erratum = is_tokenformer and component in ("qkv", "out")
        if erratum:
            status, note = (
                "differs",
                "erratum: the paper omits x2 (key and value tokens, issue #12); ours is corrected",
            )
        else:
            status = "analytic"
            note = "" if paper is None or paper == params[component] else "paper formula leaves out biases"
        rows.append(
            Row(
                "table3",
                name,
                f"params_{component}",
                paper,
                params[component],
                "parameters",
                status=status,
                note=note,
            )
        )
        rows.append(
            Row(
                "table3",
                name,
                f"train_flops_per_token_{component}",
                None,
                3 * flops[component],
                "FLOPs",
                note=f"context {config.max_seq_len}",
            )
        )
    rows.append(Row("table3", name, "params_total", None, sum(params.values()), "parameters"))
    rows.append(
        Row(
            "table3",
            name,
            "train_flops_per_token_total",
            None,
            3 * sum(flops.values()),
            "FLOPs",
            note=f"context {config.max_seq_len}",
        )
    )
    return rows


def report(scale: str, results: dict[str, dict]) -> list[Row]:
    return [row for name in list_models("transformer_") + list_models("tokenformer_") for row in _preset_rows(name)]


EXPERIMENT = Experiment(
    name="tokenformer_table3_params_flops",
    description=__doc__.splitlines()[0],
    runs=lambda scale: [],
    report=report,
)

if __name__ == "__main__":
    main(EXPERIMENT)
