"""The Mixture of Tokenizers recipes per scale. The paper's (section 4) are fixed by the original runs: the
speedrun optimiser and rates (`LM`), seeds, 512 x 1024 tokens a step; below it a smaller backbone on a short budget
(`SHRUNK`)."""

from __future__ import annotations

import dataclasses

from scaling_axes.harness.runs import Budget
from scaling_axes.harness.scales import CPU, SMALL, SMOKE, Corpus, Scale, recipe_for
from scaling_axes.harness.sweeps import STABLE_REGION, SweepRegion

SEEDS = {10_000: 9090333, 100_000: 773322}  # the 10k tables' runs and the 100k mixout runs
FINEWEB = Corpus("fineweb", tiny_stand_in="embedded_news")  # below paper scale; the paper's is the 100BT shards
FINEMATH = Corpus("finemath", tiny_stand_in="embedded_wiki", stand_in="embedded_news")
LM = {"optimizer": "muon", "schedule": "constant_then_linear", "cooldown_fraction": 0.6}
SHORT_RUN_LM = {**LM, "momentum_warmup": 0.1}  # below paper scale: the record's 300 steps are a whole short run


def paper_budget(steps: int) -> Budget:
    """The original's 10k or 100k steps: 8 GPUs x 64 rows of 1024 tokens, validated at step 0 and every 250 steps
    (1000 at 100k)."""
    return Budget(
        steps=steps,
        batch_size=512,
        seq_len=1024,
        val_every=250 if steps <= 10_000 else 1000,
        micro_batch=64,
        checkpoint_every=500,
        val_at_start=True,
    )


@dataclasses.dataclass(frozen=True)
class Shrunk:
    """A scale below the paper's: a smaller backbone (heads of 64, one attention-free layer in the middle as the
    original's), byte and token widths scaled with d_model, 16 bytes per token kept, and a short budget."""

    n_layer: int
    d_model: int
    budget: Budget
    mixout_runs: bool = True  # the 100k mixout comparison (byte-level losses, no claim) is trained at this scale
    sweep_region: SweepRegion | None = None  # how its sweeps choose (None: as `Sweep` does by default)


SHRUNK: dict[Scale, Shrunk] = {
    SMOKE: Shrunk(
        6,
        128,
        Budget(steps=30, batch_size=4, seq_len=64, val_every=10, val_windows=8, checkpoint_every=30, val_at_start=True),
    ),
    SMALL: Shrunk(
        8,
        512,
        Budget(
            steps=1500,
            batch_size=32,
            seq_len=512,
            val_every=75,
            val_windows=64,
            checkpoint_every=250,
            val_at_start=True,
        ),
    ),
    # 0.28 passes of the Wikipedia excerpt; the mixout comparison judges no claim, so it is not trained here
    CPU: Shrunk(
        4,
        64,
        Budget(steps=300, batch_size=16, seq_len=128, val_every=30, val_windows=32, val_at_start=True),
        mixout_runs=False,
        sweep_region=STABLE_REGION,
    ),
}


def shrunk_at(scale: Scale) -> Shrunk:
    return recipe_for(SHRUNK, scale, "the Mixture of Tokenizers")
