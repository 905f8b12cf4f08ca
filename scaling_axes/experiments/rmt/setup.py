"""The RMT paper's training setup (App. C.1), shared by its training experiments.

OpenWebText with the GPT-2 tokenizer, 512-token windows, AdamW (0.9, 0.95), decoupled weight decay 1e-4 that the
official code does not multiply by the lr (`decay_per_step` here) and that spares norms, embeddings
and the unembedding, z-loss 1e-4, gradient clipping 1.0, 5% warmup then cosine to 10%. Token budgets and batches
are Tables 8 and 9's (20 x non-embedding parameters). The Transformer is the paper's muP baseline (App. C.2.1: the
`transformer_rmt_*` presets carry its multipliers, init and per-layer lr scaling) at its tuned lr 6.5e-3, with the
code's decay 1e-4 x schedule on every decayed matrix whatever its lr scale (`lr_scaled_decay=False`); the RMT's tuned
values are not in the paper, so it keeps the official code's defaults and lr 1e-2.
Below paper scale every model is shrunk (same family, same options; `recipes`) and is never a reproduction.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np

from scaling_axes.experiments.rmt.recipes import OPENWEBTEXT, PAPER_LR, PAPER_SEQ, PAPER_VAL_WINDOWS, shrunk_at
from scaling_axes.harness.experiment.comparisons import Comparison
from scaling_axes.harness.results import published
from scaling_axes.harness.runs import Budget, Run
from scaling_axes.harness.scales import Scale
from scaling_axes.harness.sweeps import Sweep
from scaling_axes.harness.training.curves import Curve
from scaling_axes.modules.configs.rmt_config import RMTConfig
from scaling_axes.modules.configs.transformer_config import (
    STANDARD_PARAMETRISATION,
    TransformerConfig,
    mup_at_own_width,
)
from scaling_axes.modules.flops import non_embedding_params
from scaling_axes.modules.registry import get_config

TRANSFORMERS = ("transformer_rmt_49m", "transformer_rmt_160m", "transformer_rmt_260m", "transformer_rmt_405m")
RMTS = ("rmt_46m", "rmt_134m", "rmt_206m", "rmt_305m")
TRANSFORMER, RMT = "transformer_rmt_405m", "rmt_305m"  # the pair of Tables 3-6 (trained by Fig. 2)


def table7_non_embedding(c: TransformerConfig | RMTConfig) -> float:
    """App. A's non-embedding parameters (those of the 20 x tokens rule): the blocks, and the RMT's key vectors."""
    if isinstance(c, RMTConfig):
        return 2 * c.n_layer * c.rank * c.d_value * c.d_ff + 2 * c.rank * c.d_key * (3 * c.n_layer + 1)
    return c.n_layer * (4 * c.d_model * c.n_head * c.d_head + 2 * c.d_model * c.ffn_dim)


def table7_params(c: TransformerConfig | RMTConfig, printed: bool) -> float:
    """Table 7 as printed (vocabulary once), or as the reported sizes need it (2V + the position table); the printed
    RMT formula does include its position tables (N)."""
    vocab = c.vocab_size * (1 if printed else 2)
    if isinstance(c, RMTConfig):
        return table7_non_embedding(c) + (vocab + c.max_seq_len) * c.rank * c.d_value
    return table7_non_embedding(c) + (vocab + (0 if printed else c.max_seq_len)) * c.d_model


def table7_forward_flops(c: TransformerConfig | RMTConfig, compatible: bool) -> float:
    """Forward FLOPs per 512-token example: the paper-compatible form, or the corrected one."""
    n = PAPER_SEQ
    if isinstance(c, RMTConfig):
        keys = 6 * n * c.rank * c.d_key * c.d_value * (1 + (c.n_layer if compatible else 2 * c.n_layer))
        vocab = 4 * c.vocab_size * (1 if compatible else c.d_value)
        per_layer = 4 * n * c.d_value + 3 * n + 4 * c.d_value * c.d_ff
        return keys + n * c.rank * (vocab + c.n_layer * per_layer)
    d, heads, d_head = c.d_model, c.n_head, c.d_head
    vocab = c.vocab_size * (1 if compatible else d)
    return (
        4
        * n
        * (
            vocab
            + c.n_layer * d * (2 * d_head * heads + c.ffn_dim)
            + c.n_layer * (n * d_head * heads + 0.75 * n * heads)
        )
    )


def train_flops(c: TransformerConfig | RMTConfig, tokens: float, compatible: bool) -> float:
    """3 x Table 7's forward per example, over `tokens`: the paper's reported FLOPs when `compatible`."""
    return 3 * table7_forward_flops(c, compatible) * tokens / PAPER_SEQ


def first_crossing(curve: Curve, threshold: float) -> float | None:
    """The first step at which `curve` reaches `threshold` or below, interpolated linearly between logged points."""
    for (step0, value0), (step1, value1) in zip([(0, math.inf), *curve], curve, strict=False):
        if value1 <= threshold:
            if not math.isfinite(value0):
                return step1
            return step0 + (step1 - step0) * (value0 - threshold) / (value0 - value1)
    return None


def value_at(curve: Curve, step: float) -> float:
    """`curve` interpolated linearly at `step` (clamped to its ends)."""
    return float(np.interp(step, [s for s, _ in curve], [v for _, v in curve]))


def percent_change(before: float, after: float) -> float:
    return 100 * (after / before - 1)


def paper_tokens(model: str) -> float:
    """A Table 8/9 preset's training tokens; the two printed "6B" are the 405M Transformer's 20 x non-embedding
    parameters, 6.04e9 as Table 3 prints it (the 305M RMT was extended to match it)."""
    paper = published("rmt")
    tokens = paper[("table8" if family(model) == "transformer" else "table9", model, "tokens")]
    return paper[("table3", "transformer_rmt_405m", "tokens")] if tokens == 6e9 else tokens


def family(model: str) -> str:
    return "transformer" if model.startswith("transformer") else "rmt"


CODE_RMT = {"zero_init_unembedding": True}  # the RMT code's unembedding init (reference rmt.md section 8, row 5:
# "follow the code"), which the presets leave random
CODE_DECAY = 1e-4  # decoupled decay per step at the schedule's peak (AdamW's weight_decay x lr)


def lm_options() -> dict[str, Any]:
    """The code's decay 1e-4 x schedule for every decayed parameter, whatever the rate and its muP lr scale."""
    return {"z_loss": 1e-4, "decay_embeddings": False, "decay_per_step": CODE_DECAY, "lr_scaled_decay": False}


def schedule(
    steps: int,
    batch: int,
    seq_len: int,
    lr: float,
    val_windows: int = PAPER_VAL_WINDOWS,
    micro_batch: int | None = None,
    validations: int = 20,
    checkpoints: int = 20,
    warmup_fraction: float = 0.05,
) -> Budget:
    """A linear warmup over `warmup_fraction` of the steps (the paper's 5%), cosine to 10%, about `validations`
    validations along the way (at least 5 steps apart) and `checkpoints` checkpoints (at least 10 steps apart)."""
    return Budget(
        steps=steps,
        batch_size=batch,
        seq_len=seq_len,
        lr=lr,
        warmup_steps=max(1, int(steps * warmup_fraction)),
        min_lr_ratio=0.1,
        val_every=max(5, steps // validations),
        val_windows=val_windows,
        micro_batch=micro_batch,
        checkpoint_every=max(10, steps // checkpoints),
    )


def short_schedule(scale: Scale, lr: float, steps: int | None = None) -> Budget:
    """The scale's shrunk budget (`recipes`) on its steps (or `steps`), at the scale's lr if it sets one, else `lr`;
    the curve's validations (a third of a training token's work each) kept within VALIDATION_SHARE of the run."""
    s = shrunk_at(scale)
    steps = steps or s.steps
    affordable = int(VALIDATION_SHARE * 3 * steps * s.batch / ((1 - VALIDATION_SHARE) * s.val_windows)) - 1
    return schedule(
        steps,
        s.batch,
        s.seq_len,
        s.lr or lr,
        s.val_windows,
        validations=max(1, min(s.validations, affordable)),
        checkpoints=s.checkpoints,
        warmup_fraction=s.warmup_fraction,
    )


VALIDATION_SHARE = 0.1  # of a run's compute, at most, spent on its curve's validations


def ladder_schedule(scale: Scale, model: str, lr: float) -> Budget:
    """Fig. 2's and Table 4's budget below paper scale: the recipe's `tokens_per_parameter` of the model's own
    non-embedding parameters in steps of the recipe's batch (the largest RMT on the largest Transformer's tokens, as
    the paper's Tables 3 and 8-9), or its fixed steps where it sets none."""
    s = shrunk_at(scale)
    if s.tokens_per_parameter is None:
        return short_schedule(scale, lr)
    sized = TRANSFORMER if model == RMT else model
    sizes = TRANSFORMERS if family(sized) == "transformer" else RMTS
    config = get_config(sized, **shrunk(scale, sized, sizes.index(sized)))
    return short_schedule(
        scale, lr, math.ceil(s.tokens_per_parameter * non_embedding_params(config) / (s.batch * s.seq_len))
    )


def shrunk(scale: Scale, model: str, size: int) -> dict[str, Any]:
    """Overrides that shrink `model` (size index 0-3 within its family) to the scale's recipe."""
    s = shrunk_at(scale)
    if family(model) == "transformer":
        d = s.widths[size]
        shape = {"n_layer": s.n_layer, "d_model": d, "n_head": s.n_head or d // 64, "max_seq_len": s.seq_len}
        base = {"own": d, "smallest": s.widths[0]}.get(s.mup_proxy)
        proxy = {"mup_base_width": base, "mup_base_head_dim": base // 4, "mup_base_ffn": 4 * base} if base else {}
        return {**shape, **proxy, **scale.vocabulary()}
    rank = s.ranks[size]
    d_value = s.d_values[size] if s.d_values else s.d_value
    return {
        **CODE_RMT,
        "n_layer": s.n_layer,
        "d_value": d_value,
        "rank": rank,
        "d_ff": 4 * rank * d_value,
        "d_key": s.d_keys[size] if s.d_keys else s.d_key,
        "max_seq_len": s.seq_len,
        **scale.vocabulary(),
    }


FAMILY_RULES = {
    "transformer": "muP's width transfer from the largest, the paper's rule for its Transformers (proxy: the "
    "smallest width)",
    "rmt": "one lr at every size, as the paper trains its RMTs (the code's 1e-2)",
}


def sweep(scale: Scale, anchor: str | None = None, rule: str = "", check: bool = False) -> Sweep | None:
    """A model's lr sweep below paper scale (the recipe's grid), with the code's fixed decay per step: its own, or
    `anchor`'s rate carried by `rule` (`check`: this size trains the rate's two grid neighbours too)."""
    grid = None if scale.paper_configs else shrunk_at(scale).lr_grid
    if grid is None:
        return None
    region, declared = shrunk_at(scale).sweep_region, Sweep(grid, anchor=anchor, rule=rule, check=check)
    return region.applied(declared) if region else declared


def family_sweep(scale: Scale, model: str) -> Sweep | None:
    """One sweep per family of Fig. 2: at its largest size, carried to the others by the family's rule and checked
    at the smallest by its two grid neighbours."""
    sizes = TRANSFORMERS if family(model) == "transformer" else RMTS
    if model == sizes[-1]:
        return sweep(scale)
    return sweep(scale, anchor=sizes[-1], rule=FAMILY_RULES[family(model)], check=model == sizes[0])


CARRIED = "the paper's rule: each family swept once, at its largest size, its rate carried to the others"
PROTOCOL_FIELDS = ("parametrisation", "tuning")  # what the paper's protocol gives its Fig. 2 arms differently
PAPER_PROTOCOL = (
    "the paper's protocol (App. C.2.1): its Transformers muP-tuned, its RMTs at the code's defaults, each family "
    "swept for its rate"
)


def token_floor(scale: Scale) -> float:
    """The tokens per non-embedding parameter every compared arm trains at least (below paper scale, the recipe's
    rule; 0: none declared)."""
    return 0.0 if scale.paper_configs else shrunk_at(scale).tokens_per_parameter or 0.0


def comparisons(scale: Scale) -> list[Comparison]:
    """Fig. 2's and Table 4's: each RMT against the Transformers it is read against, in the paper's protocol."""
    floor = token_floor(scale)
    rule = "20 x non-embedding parameters (Tables 8-9)" if scale.paper_configs or floor else "one budget at every size"
    ladder = [
        Comparison(f"{rmt}_vs_transformers", (rmt, *TRANSFORMERS), PROTOCOL_FIELDS, PAPER_PROTOCOL, rule, floor)
        for rmt in RMTS
    ]
    pair = Comparison(f"{RMT}_vs_{TRANSFORMER}", (RMT, TRANSFORMER), ("parametrisation",), PAPER_PROTOCOL, "", floor)
    control = Comparison(f"{TRANSFORMER}_vs_{CONTROL}", (TRANSFORMER, CONTROL), ("tuning",), CARRIED, rule, floor)
    return [*ladder, control, pair]


CONTROL = TRANSFORMERS[-2]  # the positive control: the largest Transformer against the next (64 against 48 at cpu)
CONTROL_STATEMENT = (
    "the largest Transformer reaches a lower loss than the next size down, each on its own token rule (the positive "
    "control: a difference this recipe must resolve before any of its claims is judged)"
)


def corpus(scale: Scale) -> str:
    return OPENWEBTEXT.at(scale)


def scaling_run(model: str, scale: Scale) -> Run:
    """`model` (a Table 8/9 preset) on the paper's budget, or shrunk with a short budget."""
    kind = family(model)
    lr = PAPER_LR[kind]
    if scale.paper_configs:
        paper = published("rmt")
        table = "table8" if kind == "transformer" else "table9"
        tokens, batch = paper_tokens(model), int(paper[(table, model, "batch")])
        steps = round(tokens / (batch * PAPER_SEQ))
        budget = schedule(steps, batch, PAPER_SEQ, lr, micro_batch=min(batch, 32))
        overrides = CODE_RMT if kind == "rmt" else {}
    else:
        size = (TRANSFORMERS if kind == "transformer" else RMTS).index(model)
        budget, overrides = ladder_schedule(scale, model, lr), shrunk(scale, model, size)
    betas = {} if scale.paper_configs else {"betas": shrunk_at(scale).betas}
    return Run(
        model,
        model,
        budget,
        overrides,
        corpus=corpus(scale),
        tokenizer=scale.tokenizer_for("gpt2"),
        lm={**lm_options(), **betas},
        sweep=family_sweep(scale, model),
    )


# RMT Table 4's matched protocol (issue 83): the paper sets a muP-tuned Transformer against an RMT at its code's
# defaults; here the pair also trains as a 2 x 2 of {muP, standard} x {Transformer, RMT}, the same multipliers for
# both (all 1). muP: its rules at each model's own width with init 0.02, which is what the RMT code's defaults are
# (the `rmt_305m` run itself); standard: App. C.4's untuned init for both (every matrix N(0, 1 / fan_in)). Each cell
# is swept on the same grid at the pair's tokens; at paper scale, unswept, at the code's rate
MATCHED = {  # run -> (the pair's model it re-parametrises, its overrides; None: muP at its own width)
    f"{TRANSFORMER}_mup1": (TRANSFORMER, None),
    f"{TRANSFORMER}_standard": (TRANSFORMER, {**STANDARD_PARAMETRISATION, "init": "lecun"}),
    f"{RMT}_standard": (RMT, {"init": "lecun", "zero_init_unembedding": False}),  # App. C.4: every matrix
}
MATCHED_PAIRS = ((RMT, f"{TRANSFORMER}_mup1", "muP"), (f"{RMT}_standard", f"{TRANSFORMER}_standard", "standard"))


def matched_run(name: str, scale: Scale) -> Run:
    """A cell of Table 4's matched 2 x 2: the pair's model on its budget and tokens, re-parametrised, swept on its
    own (paper: the code's rate)."""
    model, overrides = MATCHED[name]
    run = scaling_run(model, scale)
    if overrides is None:
        c = get_config(model, **run.overrides)
        overrides = mup_at_own_width(c.d_model, c.d_head, c.ffn_dim)
    budget = dataclasses.replace(run.budget, lr=PAPER_LR["rmt"]) if scale.paper_configs else run.budget
    return dataclasses.replace(
        run, name=name, budget=budget, overrides={**run.overrides, **overrides}, sweep=sweep(scale)
    )


def matched_comparisons(scale: Scale) -> list[Comparison]:
    """The 2 x 2's two pairs: the RMT against the Transformer, nothing but the architecture different."""
    floor = token_floor(scale)
    return [Comparison(f"{rmt}_vs_{t}", (rmt, t), min_tokens_per_parameter=floor) for rmt, t, _ in MATCHED_PAIRS]


def downstream_checkpoints(scale: Scale, results: dict[str, dict], runs_dir=None) -> dict[str, dict[int, Path]]:
    """Hook for `rmt_table5_6_downstream`: the final weights of the 405M Transformer and the 305M RMT that Fig. 2
    and Tables 3-4 train (run group "rmt_scaling"), by run name and seed, where their claim seeds settled (the
    directory each seed's done.json names: a fallback below a sweep's choice has a name of its own)."""
    from scaling_axes.harness.claims.margins import seeds_of
    from scaling_axes.harness.names import seed_name
    from scaling_axes.harness.runs import RUNS_DIR
    from scaling_axes.harness.training.rundir import final_weights

    root = Path(runs_dir or RUNS_DIR) / "rmt_scaling" / scale.name
    return {
        name: {
            k: final_weights(root / done.get("run", seed_name(name, k)))
            for k, done in seeds_of(results.get(name)).items()
        }
        for name in ("transformer_rmt_405m", "rmt_305m")
    }
