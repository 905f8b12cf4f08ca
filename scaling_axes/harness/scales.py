"""The scales, each one typed object in one registry: what runs at it, on which data, and what its numbers may claim.

`--scale NAME` parses to a `Scale` (`get_scale`). Code asks a scale what it is (`scale.judges_claims`,
`scale.paper_configs`, `scale.corpus(...)`) and never compares it with a string; each paper's per-scale choices sit
in that paper's recipes module, in tables keyed by these objects (`recipe_for` refuses a scale a paper has no recipe
for, by name). A new scale is one entry in `SCALES` plus one recipe entry per paper.

Beside them, the argparse types that check a command line's values where they are parsed (`scale_argument`, a
number in range, Lightning's devices), so that a bad value stops with one line naming what is allowed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar

from scaling_axes.datamodules.corpora import default_data_root, on_disk
from scaling_axes.datamodules.tokenizers import CORPUS_BPE_EOT_ID, CORPUS_BPES
from scaling_axes.io import SuiteError

# where a run's data come from: the paper's corpus; the paper's when it is under the data root, else the large
# stand-in; always the large stand-in (models sized to it); the experiment's own tiny stand-in
DataPolicy = Literal["real", "real_when_present", "stand_in", "tiny_stand_in"]
LARGE_STAND_IN = "embedded_wiki"  # the largest embedded corpus (about 1.7M GPT-2 tokens)


@dataclasses.dataclass(frozen=True)
class SweepCap:
    """The most a scale's sweeps train: `rates` of the middle of each grid, `draws` per rate, `extensions` grid steps
    past an edge (`harness.sweeps.Sweep`). A pipeline check's sweep needs two rates to choose between, once each."""

    rates: int
    draws: int
    extensions: int

    def __post_init__(self) -> None:
        if self.rates < 2 or self.draws < 1 or self.extensions < 0:
            raise ValueError(f"a sweep needs two rates, one draw and no extension at least, not {self}")


@dataclasses.dataclass(frozen=True, eq=False)
class Scale:
    """One scale: its `name` (a folder under `runs/` and `results/`), whether its numbers may judge a paper's
    claims, whether it trains the papers' own configs (and so compares with their numbers), its data policy and
    tokenizer (None: each paper's own), the passes a run may make, the seeds it trains by default, the documents and
    perplexity windows its evaluations are limited to, and the note its trained rows carry."""

    name: str
    judges_claims: bool
    paper_configs: bool
    data: DataPolicy
    tokenizer: str | None = None
    checks_epochs: bool = True  # smoke, a pipeline check, is exempt from the data-pass limit
    min_epoch_limit: float = 0.0  # passes always allowed (small: shrunk budgets on whatever corpus is there)
    fits_budgets: bool = False  # budgets are cut to `min_epoch_limit` passes of their corpus (by the harness, once)
    seeds: int = 1
    eval_limits: tuple[int, int] | None = None  # (documents per task, perplexity windows); None: everything
    keeps_final_checkpoint: bool = True  # a finished run's last.ckpt (its optimiser state): smoke's, nothing reads,
    # so its runs write none at their end
    keeps_sweep_weights: bool = True  # a finished sweep point's final weights: smoke's, nothing reads (a sweep reads
    # its points' done.json; export, growth and evaluations read the runs a sweep chose for)
    sweep_cap: SweepCap | None = None  # how far its sweeps go at most (None: as each sweep declares)
    whole_final_evaluation: bool = False  # a run's final validation and test read every window of their splits,
    # its curve a fixed subset (`Budget.val_windows`): where verdicts are judged, a few thousand tokens are too noisy
    note: str = ""  # carried by every trained row of this scale
    scope: str = ""  # what its trained numbers can show: opens its REPORT.md

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Scale({self.name!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):  # the bug this type exists to prevent: it would silently be False
            raise TypeError(f"a Scale compared with the string {other!r}: ask the scale (its fields) instead")
        return isinstance(other, Scale) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def corpus(self, real: str, tiny_stand_in: str, stand_in: str = LARGE_STAND_IN) -> str:
        """The corpus a run uses for the paper's `real` one: by the data policy (a missing real corpus said once)."""
        if self.data == "real" or (self.data == "real_when_present" and on_disk(real)):
            return real
        if self.data == "real_when_present":
            _say_stand_in(self.name, real, stand_in)
        return tiny_stand_in if self.data == "tiny_stand_in" else stand_in

    def tokenizer_for(self, paper_tokenizer: str) -> str:
        return self.tokenizer or paper_tokenizer

    def vocabulary(self) -> dict[str, int]:
        """A language model's vocabulary override: none, or the size of the scale's own BPE."""
        return {"vocab_size": CORPUS_BPES[self.tokenizer][1]} if self.tokenizer in CORPUS_BPES else {}

    def byte_table(self) -> dict[str, Any]:
        """The MoT's byte-table overrides: none, or the scale's BPE's end-of-text and UTF-8 bytes (a corpus BPE has
        no character table of the original's)."""
        if self.tokenizer not in CORPUS_BPES:
            return {}
        return {"eot_token": CORPUS_BPE_EOT_ID, "byte_table": self.tokenizer, "byte_vocabulary": "utf8"}

    def epoch_limit(self, experiment_limit: float) -> float:
        return max(self.min_epoch_limit, experiment_limit)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A paper's corpus and what stands in for it below the paper's scale (`Scale.corpus`): the experiment's tiny
    stand-in (smoke) and the large one (the cpu scale, and small when the real corpus is not on disk)."""

    real: str
    tiny_stand_in: str
    stand_in: str = LARGE_STAND_IN

    def at(self, scale: Scale) -> str:
        return scale.corpus(self.real, self.tiny_stand_in, self.stand_in)


@functools.cache
def _say_stand_in(scale: str, real: str, stand_in: str) -> None:
    print(f"{scale} scale: {real} is not under {default_data_root()}/, so {stand_in} stands in for it")


CPU_SCOPE = (
    "Every claim below was judged on models of 10^4-10^5 parameters (2-3 layers, widths 32-96) trained on at most "
    "one pass over the 2.2M-token training split of the 6 MB embedded Wikipedia excerpt (enwik8's XML format), "
    "tokenized with a 2,048-token byte-level BPE trained on that split (`wiki_bpe2048`); MoT's FineMath claim is "
    "unmatched (no mathematical text here), Tokenformer Fig. 6's new data are the embedded news (117k tokens), the "
    "ViT claims the 5,000 embedded MNIST digits at 16 px. A plan registered before its three-seed pilot and again "
    "before its confirmatory seeds fixed the rates, the seeds and the rules; its claims were then judged on fresh "
    "seeds alone. What this can show: whether each architecture's effect appears, at these sizes, on this data, at the "
    "smallest effect the plan names for it, under each paper's control of its family. What it cannot show: "
    "anything about the papers' scales (10^8-10^9 parameters, 10^9-10^11 tokens), scaling exponents, or the papers' "
    "corpora; a claim that holds or fails here is evidence at this size only, never a reproduction."
)
SMOKE = Scale(
    "smoke",
    judges_claims=False,
    paper_configs=False,
    data="tiny_stand_in",
    checks_epochs=False,
    eval_limits=(16, 8),
    keeps_final_checkpoint=False,
    keeps_sweep_weights=False,
    sweep_cap=SweepCap(rates=2, draws=1, extensions=0),  # its sweeps choose no rate a claim reads
    note="smoke scale: tiny models on a few thousand tokens, a pipeline check, not a reproduction",
)
CPU = Scale(
    "cpu",
    judges_claims=True,
    paper_configs=False,
    data="stand_in",
    tokenizer="wiki_bpe2048",
    seeds=3,
    eval_limits=(200, 64),
    scope=CPU_SCOPE,
    whole_final_evaluation=True,
    note="cpu scale: models of 10^4-10^5 parameters and a 2,048-token BPE trained on the 6 MB embedded Wikipedia "
    "excerpt, each run at most one pass over it, on 2 CPU cores; not a reproduction",
)
SMALL = Scale(
    "small",
    judges_claims=True,
    paper_configs=False,
    data="real_when_present",
    min_epoch_limit=2.0,
    fits_budgets=True,
    whole_final_evaluation=True,
    note="small scale: shrunken models and budgets, not a reproduction",
)
PAPER = Scale("paper", judges_claims=True, paper_configs=True, data="real", whole_final_evaluation=True)

SCALES: dict[str, Scale] = {scale.name: scale for scale in (SMOKE, CPU, SMALL, PAPER)}  # in order of size


def get_scale(name: str | Scale) -> Scale:
    """The registered scale `name` (what `--scale` parses to)."""
    if isinstance(name, Scale):
        return name
    if name not in SCALES:
        raise UnknownScale(f"unknown scale {name!r}; the scales: {', '.join(SCALES)}")
    return SCALES[name]


class UnknownScale(SuiteError, ValueError):
    """A scale that is not registered, or that a paper has no recipe for."""


T = TypeVar("T")


def recipe_for(table: Mapping[Scale, T], scale: Scale, what: str) -> T:
    """`what`'s recipe at `scale` from its table; a scale it has none for is refused by name, never handed another
    scale's recipe."""
    if scale not in table:
        have = ", ".join(s.name for s in table)
        raise UnknownScale(f"{what} has no recipe for the {scale.name} scale (it has: {have}); add one to its recipes")
    return table[scale]


def in_range(kind: type, low: float, high: float = math.inf, low_open: bool = False) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` within [low, high] (or (low, high] when `low_open`), or an error saying so."""

    def parse(text: str) -> Any:
        value = kind(text)
        if not (low < value if low_open else low <= value) or value > high or value != value:
            raise argparse.ArgumentTypeError(f"{value} is out of range {'(' if low_open else '['}{low:g}, {high:g}]")
        return value

    parse.__name__ = kind.__name__  # argparse says "invalid int value: 'two'"
    return parse


def device_spec(text: str) -> str:
    """--devices as Lightning takes it: 'auto', a count (-1: all), or a comma list of device indices ('0,1')."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if (
        text == "auto"
        or (len(parts) == 1 and parts[0].lstrip("-").isdigit() and int(parts[0]) >= -1 and int(parts[0]) != 0)
        or (len(parts) > 1 and all(p.isdigit() for p in parts))
    ):
        return text
    raise argparse.ArgumentTypeError(f"{text!r}: use 'auto', a device count (-1 for all) or indices such as '0,1'")


def not_empty(kind: type) -> Callable[[str], Any]:
    """An argparse type: `kind(text)` of a text that is not empty (an empty --run-name meant "every run", an empty
    --out-dir the working directory, both silently)."""

    def parse(text: str) -> Any:
        if not text.strip():
            raise argparse.ArgumentTypeError("is empty: name one, or leave the option out")
        return kind(text)

    parse.__name__ = kind.__name__
    return parse


def scale_argument(text: str) -> Scale:
    """--scale: a registered scale, or the registry's refusal naming the scales."""
    try:
        return get_scale(text)
    except UnknownScale as error:
        raise argparse.ArgumentTypeError(str(error)) from None
