"""What a model of a prepared corpus must beat: the unigram cross-entropy of its training split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from scaling_axes.datamodules.corpora import corpus_dir, open_split, prepare_corpus
from scaling_axes.datamodules.sources import corpus_spec, tokenizer_of
from scaling_axes.io import CorruptFileError, atomic_write, default_data_root, read_verified_json

UNIGRAM_CHUNK = 1 << 26  # tokens counted at a time: a bounded memory footprint on a corpus of billions


def unigram_floor(corpus: str, tokenizer: str | None = None, data_root: str | Path | None = None) -> float:
    """The unigram cross-entropy of `corpus`'s training split in nats/token, -sum p log p over its token
    frequencies: what a model that learned only how often each token occurs scores, so a language model not clearly
    below it has not learned. Counted once per prepared split and kept beside it (``unigram.json``, tied to the
    split's checksum); FileNotFoundError while the corpus is not prepared."""
    directory = corpus_dir(data_root or default_data_root(), corpus, tokenizer_of(corpus, tokenizer))
    if corpus_spec(corpus).embedded and not (directory / "meta.json").exists():
        prepare_corpus(corpus, tokenizer, data_root)
    tokens, meta = open_split(directory, "train")
    checksum, cache = meta["splits"]["train"].get("blake2b"), directory / "unigram.json"
    if cache.exists():
        fix = f"delete {cache} (and {cache.name}.blake2b) to count it again"
        cached = read_verified_json(cache, fix)  # the floor decides `not_learning`: an edited one is refused
        if not isinstance(cached, dict) or not isinstance(cached.get("nats_per_token"), (int, float)):
            raise CorruptFileError(f"{cache} holds no unigram cross-entropy (nats_per_token); {fix}")
        if cached.get("train_blake2b") == checksum:
            return float(cached["nats_per_token"])
    counts = np.zeros(meta["vocab_size"], dtype=np.int64)
    for start in range(0, len(tokens), UNIGRAM_CHUNK):
        counts += np.bincount(tokens[start : start + UNIGRAM_CHUNK], minlength=len(counts))[: len(counts)]
    p = counts[counts > 0] / counts.sum()
    floor = float(-(p * np.log(p)).sum())
    atomic_write(
        cache,
        json.dumps({"nats_per_token": floor, "train_tokens": int(counts.sum()), "train_blake2b": checksum}),
        checksum=True,
    )
    return floor
