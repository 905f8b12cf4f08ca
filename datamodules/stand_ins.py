"""Which corpus a run trains on at each scale: the paper's, or an embedded stand-in when it is not on disk."""

from __future__ import annotations

import functools

from scaling_axes.datamodules.corpora import default_data_root, on_disk
from scaling_axes.modules.tokenizers import CORPUS_BPE_EOT_ID, CORPUS_BPES

SMALL_STAND_IN = "embedded_wiki"  # the largest embedded corpus (about 1.7M GPT-2 tokens): what small falls back to
CPU_TOKENIZER = "wiki_bpe2048"  # the cpu scale's tokenizer: a BPE trained on SMALL_STAND_IN's training split


def real_or_stand_in(scale: str, real: str, stand_in: str, small_stand_in: str = SMALL_STAND_IN) -> str:
    """The data a run at `scale` uses: `real` at paper scale; at small scale `real` when its files are under the data
    root (an empty folder is not the corpus), else `small_stand_in` (said once); `small_stand_in` at cpu scale, whose
    models are sized to it; `stand_in` at smoke scale."""
    if scale == "paper" or (scale == "small" and on_disk(real)):
        return real
    if scale == "cpu":  # sized to the embedded data whatever is on disk
        return small_stand_in
    if scale == "small":
        _say_stand_in(real, small_stand_in)
        return small_stand_in
    return stand_in


@functools.cache
def _say_stand_in(real: str, stand_in: str) -> None:
    print(f"small scale: {real} is not under {default_data_root()}/, so {stand_in} stands in for it")


def tokenizer_at(scale: str, tokenizer: str) -> str:
    """The tokenizer a run at `scale` uses: the paper's, or at cpu scale the BPE trained on its corpus."""
    return CPU_TOKENIZER if scale == "cpu" else tokenizer


def vocabulary_at(scale: str) -> dict[str, int]:
    """The vocabulary override of a language model at `scale`: none, or at cpu scale the size of its BPE."""
    return {"vocab_size": CORPUS_BPES[CPU_TOKENIZER][1]} if scale == "cpu" else {}


def byte_table_at(scale: str) -> dict[str, object]:
    """The MoT's byte-table overrides at `scale`: none, or at cpu scale its BPE's end-of-text and UTF-8 bytes (the BPE
    has no character table of the original's)."""
    if scale != "cpu":
        return {}
    return {"eot_token": CORPUS_BPE_EOT_ID, "byte_table": CPU_TOKENIZER, "byte_vocabulary": "utf8"}
