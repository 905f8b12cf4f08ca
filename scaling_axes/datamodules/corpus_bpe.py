"""Small byte-level BPEs trained on one corpus (`datamodules.tokenizers.CORPUS_BPES`): tokenizers sized to the data of
a scale whose models are sized to it (the cpu scale)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from scaling_axes.datamodules.tokenizers import CORPUS_BPES, EOT, corpus_bpe_file
from scaling_axes.io import atomic_write


def train_corpus_bpe(name: str, corpus: str, train_split: bytes | Iterable[dict]) -> Path:
    """Train corpus BPE `name` (its vocabulary in `CORPUS_BPES`) on `corpus`'s training split (raw bytes, or rows
    with "text"): byte-level, as GPT-2's, with <|endoftext|> as its only special token (id 0); written to
    `corpus_bpe_file(name)` (`prepare_corpus` trains it when that file is missing). The validation and test splits
    are never seen. The same split gives the same merges."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    path = corpus_bpe_file(name)
    texts = raw_blocks(train_split) if isinstance(train_split, bytes) else (row["text"] for row in train_split)
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CORPUS_BPES[name][1],
        special_tokens=[EOT],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    atomic_write(path, tok.to_str(), checksum=True)  # verified wherever it is read (`tokenizers.read_tokenizer`)
    print(f"trained tokenizer {name} on {corpus}'s training split ({CORPUS_BPES[name][1]} ids) -> {path}")
    return path


def raw_blocks(data: bytes) -> list[str]:
    """A raw document (enwik8's XML) as UTF-8 text in blocks of 256 lines."""
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    return ["".join(lines[i : i + 256]) for i in range(0, len(lines), 256)]
