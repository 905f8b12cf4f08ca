"""Tokenformer Fig. 3 / Fig. 4 / Tables 6-7: progressive scaling by adding parameter tokens vs training from scratch.

A Tokenformer is trained from scratch at the first size, then grown stage by stage (zero-initialised new keys,
random new values, tau following the new token count as the paper's runs did, so growth moves the function a little:
measured per stage as `val_loss_change_at_growth`), each stage trained on far fewer tokens. An ablation chain at the
first stage budget pins tau (exact growth; see `modules.tokenformer.grow`). Transformers are trained from scratch at
every size with the full budget and with the per-stage budget. Reported: validation perplexity per stage, and
training compute per stage and cumulated along the growth chain, in FLOPs: the paper's x-axis is TPU-v4 hours, and it
gives no rate to convert them (the TPU code's throughput is not reported), so its cost axis is not reproduced.

Paper scale: 12 x 768 Tokenformers with 576 -> 2140 -> 4850 -> 9232 tokens, Transformers 124M-1.4B, OpenWebText
with the GPT-NeoX tokenizer, batch 512 x 1024, lr 6e-4, 2000 warmup steps, cosine to zero; 6e5 steps ("300B"
tokens) for the first stage and for the full-budget Transformers, 3e4, 6e4 or 1.2e5 steps ("15B, 30B or 60B") per
growth stage.
"""

from __future__ import annotations

from scaling_axes.experiments.tokenformer import progressive
from scaling_axes.experiments.tokenformer.progressive import PINNED_TAU_GROWTH, SIZES, TOKENFORMER_GROWTH
from scaling_axes.harness.claims import LOSS_NOISE_FLOOR, judge, metric_margin, paired_margins
from scaling_axes.harness.results import Row
from scaling_axes.harness.runs import Run


def runs(scale: str) -> list[Run]:
    spec = progressive.scale_spec(scale)
    full = ("300b" if scale == "paper" else "full", spec.full)
    common = {"corpus": spec.corpus, "tokenizer": "neox"}
    tokenformers = [f"tokenformer_{size}" for size in SIZES]
    transformers = [f"transformer_{size}" for size in SIZES]
    grown = progressive.growth_chains(tokenformers, spec.tokenformer, full, spec.stage, TOKENFORMER_GROWTH, **common)
    grown += progressive.ablation_chain(tokenformers, spec.tokenformer, full, spec.stage, PINNED_TAU_GROWTH,
                                        "pinned", **common)  # fmt: skip
    scratch = progressive.scratch_runs(transformers[:1], spec.transformer[:1], dict([full]), **common)
    scratch += progressive.scratch_runs(transformers[1:], spec.transformer[1:], dict([full, *spec.stage.items()]),
                                        **common)  # fmt: skip
    return grown + scratch


def claims(scale: str, results: dict[str, dict]) -> list[Row]:
    """Fig. 3's claim, per stage budget: the grown 1.4B reaches the from-scratch 1.4B's validation loss (margin: the
    from-scratch loss minus the grown one) on fewer cumulative training FLOPs (else it fails)."""
    by_name, rows = {r.name: r for r in runs(scale)}, []
    scratch = f"transformer_1_4b_{'300b' if scale == 'paper' else 'full'}"
    for label in progressive.scale_spec(scale).stage:
        grown = f"tokenformer_1_4b_{label}"
        cost = sum(r.train_flops() for r in progressive.chain(by_name[grown], by_name))
        ratio = cost / by_name[scratch].train_flops()
        statement = f"growth reaches the from-scratch 1.4B loss at a fraction of its training FLOPs (here {ratio:.2f}x)"
        fails = f"the grown chain cost {ratio:.2f}x the FLOPs" if ratio >= 1 else None
        margins = paired_margins(results, (grown, scratch), metric_margin("val_loss", scale_by=-1.0))
        rows.append(judge("fig3", f"{grown}_vs_{scratch}", statement, scale, margins, LOSS_NOISE_FLOOR, "nats/token",
                          fails_because=fails))  # fmt: skip
    return rows


EXPERIMENT = progressive.experiment(
    "tokenformer_fig3_progressive_scaling",
    __doc__.splitlines()[0],
    "fig3",
    runs,
    "Tokenformer progressive scaling",
    claims,
)
