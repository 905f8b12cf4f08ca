"""Tokenformer Fig. 7: progressive scaling by token growth vs a Transformer grown by Net2Net.

Both families start from scratch at 354M and grow 354M -> 757M -> 1.4B on the same data, learning rate and budgets:
the Tokenformer by appending parameter tokens (zero keys, tau following n: as the paper), the Transformer by Net2Net
widening (`modules.growth.net2net.widen`, exact before the symmetry-breaking noise of 1e-3). That Net2Net is a stronger
baseline than the paper's: its Eq. 14 describes Net2Net filling the new width with new parameters, which the paper
argues disturbs the learned distribution, while this one preserves the function to 1e-15. The paper's variant
(`modules.growth.net2net.widen_with_new_parameters`) grows a second Transformer chain at the first stage budget (runs
`*_<budget>newparams`). The Transformers are tied and grow in width and heads (App. D/E); their parameters against
the Tokenformers' are rows (`params_vs_tokenformer`): within 0.5% up to 757M, 6.3% fewer at 1.4B.

Paper scale: OpenWebText with the GPT-NeoX tokenizer, batch 512 x 1024, lr 6e-4 with 2000 warmup steps and cosine to
zero at every stage; 6e5 steps ("300B") for the first stage and 6e4 ("30B") per growth stage, as in Fig. 3 (the
material this suite was built from does not state Fig. 7's budgets, so they are Fig. 3's).
"""

from __future__ import annotations

from scaling_axes.experiments.tokenformer import progressive
from scaling_axes.experiments.tokenformer.progressive import (
    NET2NET_GROWTH,
    PAPER_NET2NET_GROWTH,
    SIZES,
    TOKENFORMER_GROWTH,
)
from scaling_axes.harness.claims.verdicts import lower_loss
from scaling_axes.harness.results import Row
from scaling_axes.harness.runs import Run, fitted
from scaling_axes.harness.scales import Scale


@fitted
def runs(scale: Scale) -> list[Run]:
    spec = progressive.scale_spec(scale)
    first = ("300b", spec.full) if scale.paper_configs else ("full", spec.full)
    stages = {"30b": spec.stage["30b"]} if scale.paper_configs else spec.stage
    common = {"corpus": spec.corpus, "tokenizer": spec.tokenizer, "lm": spec.lm}
    result = []
    for family, growth in (("tokenformer", TOKENFORMER_GROWTH), ("transformer", NET2NET_GROWTH)):
        models = [f"{family}_{size}" for size in SIZES[1:]]
        result += progressive.growth_chains(models, getattr(spec, family)[1:], first, stages, growth, **common)
    transformers = [f"transformer_{size}" for size in SIZES[1:]]  # the paper's Net2Net (Eq. 14) beside the exact one
    result += progressive.ablation_chain(
        transformers, spec.transformer[1:], first, stages, PAPER_NET2NET_GROWTH, "newparams", **common
    )
    return progressive.swept(scale, result, {run.name for run in result if not run.grow_from})


def claims(scale: Scale, results: dict[str, dict]) -> list[Row]:
    """Fig. 7's claim at every grown size: growing by tokens beats growing by Net2Net (the exact Net2Net; the
    paper's Eq. 14 variant is a second row at the first stage budget), measured on what each stage gains from the
    model it grew from, so that the families' different starting points do not decide it."""
    label = "30b" if scale.paper_configs else "short"
    statement = "progressive scaling by parameter tokens beats Net2Net"
    pairs = [
        (f"tokenformer_{size}_{label}", f"transformer_{size}_{net2net}")
        for size in SIZES[2:]
        for net2net in (label, f"{label}newparams")
    ]
    by_name = {run.name: run for run in runs(scale)}
    control = (f"transformer_{SIZES[-1]}_{label}", f"transformer_{SIZES[-2]}_{label}")
    return [
        row
        for tokens, net2net in pairs
        for row in progressive.gain_claim("fig7", statement, scale, by_name[tokens], by_name[net2net], results)
    ] + [lower_loss("fig7", CONTROL_STATEMENT, scale, *control, results)]


CONTROL_STATEMENT = (
    "the Net2Net-grown 1.4B ends below the 757M it grew from (the positive control: a stage's gain, the quantity "
    "Fig. 7's claims compare, must be resolved before they are judged)"
)


EXPERIMENT = progressive.experiment(
    "tokenformer_fig7_net2net_scaling",
    __doc__.splitlines()[0],
    "fig7",
    runs,
    "Tokenformer vs Net2Net progressive scaling",
    claims,
)
