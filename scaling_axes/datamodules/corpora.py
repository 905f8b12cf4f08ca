"""Text corpora, each tokenized once into flat uint16/uint32 files per split plus a JSON of metadata.

Layout: ``<data_root>/<corpus>/<tokenizer>/{train,val,test}.bin`` and ``meta.json``. Documents are separated by
the tokenizer's end-of-text token (nanoGPT's `prepare.py` format). Every file is written to a temporary name and
renamed, and `meta.json` last, so an interrupted preparation is redone rather than half-read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from scaling_axes.datamodules.corpus_bpe import raw_blocks, train_corpus_bpe
from scaling_axes.datamodules.local_files import (
    checked_ids,
    holds_data,
    read_token_shard,
)
from scaling_axes.datamodules.sources import CORPORA, Corpus, corpus_spec, tokenizer_of
from scaling_axes.datamodules.tokenizers import CORPUS_BPES, corpus_bpe_file, load_tokenizer
from scaling_axes.io import (
    CorruptFileError,
    atomic_write,
    default_data_root,
    file_digest,
    read_verified_json,
    remove_temporaries,
    temporary_path,
)


def corpus_dir(data_root: str | Path, corpus: str, tokenizer: str) -> Path:
    return Path(data_root) / corpus / tokenizer


def prepare_corpus(
    corpus: str,
    tokenizer: str | None = None,
    data_root: str | Path | None = None,
    tokenizer_path: str | None = None,
) -> Path:
    """Tokenize `corpus` into memmaps once; returns the directory holding `meta.json` and `<split>.bin`. One process
    prepares a corpus at a time (a file lock beside the data root's corpora; the others wait, then read its result);
    a preparation that fails leaves no folder behind, so an absent corpus still reads as absent."""
    spec, tokenizer = corpus_spec(corpus), tokenizer_of(corpus, tokenizer)
    data_root = Path(data_root or default_data_root())
    out = corpus_dir(data_root, corpus, tokenizer)
    if (out / "meta.json").exists():
        return out
    data_root.mkdir(parents=True, exist_ok=True)
    with FileLock(data_root / f".{corpus}.{tokenizer}.lock"):
        if (out / "meta.json").exists():  # another process prepared it while this one waited
            return out
        _file_into_folder(data_root / corpus)
        created = [d for d in (out.parent, out) if not d.exists()]
        try:
            remove_temporaries(out)  # left by a killed preparation: this process holds the lock
            _prepare(spec, out, tokenizer, data_root, tokenizer_path)
        except BaseException:
            for directory in reversed(created):
                shutil.rmtree(directory, ignore_errors=True)
            raise
    return out


def _file_into_folder(path: Path) -> None:
    """A raw corpus as one file where its folder goes (the unzipped `data/enwik8`) moves into that folder, beside
    the tokens prepared from it."""
    if path.is_file():
        moving = path.with_name(f".{path.name}.moving")
        path.rename(moving)
        path.mkdir()
        moving.rename(path / path.name)
        print(f"moved {path} into {path / path.name}: its prepared tokens go into {path}/<tokenizer>/")


def _prepare(spec: Corpus, out: Path, tokenizer: str, data_root: Path, tokenizer_path: str | None) -> None:
    if tokenizer in CORPUS_BPES and tokenizer_path is None and not corpus_bpe_file(tokenizer).exists():
        trained_on = CORPUS_BPES[tokenizer][0]
        train_corpus_bpe(tokenizer, trained_on, CORPORA[trained_on].load(data_root)["train"])
    tok = load_tokenizer(tokenizer, tokenizer_path)
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.uint32
    loaded = spec.load(data_root)  # before any folder is made: a corpus that is not there leaves none
    out.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, documents in loaded.items():
        if isinstance(documents, bytes):
            chunks, num_docs, num_bytes = _tokenize_raw(documents, tok), 1, len(documents)
        elif isinstance(documents, list):  # token shards: GPT-2 ids already
            if tokenizer != "gpt2":
                raise ValueError(
                    f"{spec.name}: the local token shards hold GPT-2 ids; tokenizer={tokenizer!r} needs text"
                )
            chunks = (checked_ids(read_token_shard(p), tok.vocab_size, p) for p in documents)
            num_docs, num_bytes = None, None
        else:
            chunks, num_docs, num_bytes = _tokenize(documents, tokenizer, tokenizer_path, tok.eot_id)
        num_tokens, checksum = _write_tokens(out / f"{split}.bin", chunks, dtype)
        splits[split] = {"tokens": num_tokens, "documents": num_docs, "bytes": num_bytes, "blake2b": checksum}
    meta = {
        "corpus": spec.name,
        "source": spec.source,
        "tokenizer": tokenizer,
        "tokenizer_source": tok.source,
        "vocab_size": tok.vocab_size,
        "eot_id": tok.eot_id,
        "dtype": np.dtype(dtype).name,
        "splits": splits,
    }
    atomic_write(out / "meta.json", json.dumps(meta, indent=2), checksum=True)


def on_disk(corpus: str, data_root: str | Path | None = None) -> bool:
    """Whether `corpus` is under the data root: its raw files, or tokens prepared from them."""
    return holds_data(Path(data_root or default_data_root()) / corpus)


def _tokenize(documents, tokenizer: str, tokenizer_path: str | None, eot_id: int | None):
    def encode(batch: dict) -> dict:
        ids = load_tokenizer(tokenizer, tokenizer_path).encode_batch(batch["text"])
        return {
            "ids": [[*x, eot_id] if eot_id is not None else x for x in ids],
            "num_bytes": [len(t.encode("utf-8")) for t in batch["text"]],
        }

    num_proc = min(os.cpu_count() or 1, 16) if len(documents) > 10_000 else None
    encoded = documents.map(encode, batched=True, remove_columns=documents.column_names, num_proc=num_proc)
    chunks = (np.concatenate([np.asarray(x, dtype=np.int64) for x in b["ids"]]) for b in encoded.iter(batch_size=1024))
    return chunks, len(encoded), int(sum(encoded["num_bytes"]))


def _tokenize_raw(data: bytes, tok) -> Iterator[np.ndarray]:
    """One raw document (enwik8's XML): bytes as they are, or UTF-8 text in blocks of lines for a BPE tokenizer."""
    if tok.name == "bytes":
        yield np.frombuffer(data, dtype=np.uint8)
        return
    blocks = raw_blocks(data)
    for start in range(0, len(blocks), 64):
        yield np.concatenate([np.asarray(ids, dtype=np.int64) for ids in tok.encode_batch(blocks[start : start + 64])])


def train_tokens(corpus: str, tokenizer: str | None = None, data_root: str | Path | None = None) -> tuple[int, str]:
    """Tokens in `corpus`'s training split and how that is known: counted once prepared, else estimated."""
    spec, tokenizer = corpus_spec(corpus), tokenizer_of(corpus, tokenizer)
    meta = corpus_dir(data_root or default_data_root(), corpus, tokenizer) / "meta.json"
    if spec.embedded and not meta.exists():
        prepare_corpus(corpus, tokenizer, data_root)
    if meta.exists():
        return read_meta(meta.parent)["splits"]["train"]["tokens"], "counted"
    if spec.train_bytes is None or spec.proxy is None:
        raise FileNotFoundError(f"{corpus} is not prepared under {meta.parent} and has no size estimate; prepare it")
    proxy = read_meta(prepare_corpus(spec.proxy, tokenizer, data_root))["splits"]["train"]
    tokens = round(spec.train_bytes * proxy["tokens"] / proxy["bytes"])
    return (
        tokens,
        f"estimated: {spec.train_bytes:,} bytes at {spec.proxy}'s {proxy['bytes'] / proxy['tokens']:.3f} B/token",
    )


def split_tokens(
    corpus: str, split: str, tokenizer: str | None = None, data_root: str | Path | None = None
) -> int | None:
    """Tokens in `corpus`'s `split` ("val", "test") once prepared (an embedded corpus is prepared here), else None."""
    spec, tokenizer = corpus_spec(corpus), tokenizer_of(corpus, tokenizer)
    meta = corpus_dir(data_root or default_data_root(), corpus, tokenizer) / "meta.json"
    if spec.embedded and not meta.exists():
        prepare_corpus(corpus, tokenizer, data_root)
    return read_meta(meta.parent)["splits"][split]["tokens"] if meta.exists() else None


def _write_tokens(path: Path, chunks: Iterator[np.ndarray], dtype) -> tuple[int, str]:
    """Write the token file; returns its token count and checksum (blake2b of its bytes)."""
    tmp, count, digest = temporary_path(path), 0, hashlib.blake2b(digest_size=16)
    try:
        with open(tmp, "wb") as f, tqdm(desc=f"tokenizing into {path}", unit=" tokens", unit_scale=True) as bar:
            for chunk in chunks:
                data = np.asarray(chunk).astype(dtype).tobytes()
                f.write(data)
                digest.update(data)
                count += len(chunk)
                bar.update(len(chunk))
        os.replace(tmp, path)
    except OSError as error:  # a full disk or a file-size limit: named by the file, which the OS error leaves out
        tmp.unlink(missing_ok=True)
        raise OSError(error.errno, error.strerror, str(path)) from error
    return count, digest.hexdigest()


def open_split(directory: Path, split: str) -> tuple[np.memmap, dict]:
    """Memory-map one split, checking its size against the metadata."""
    meta_path = Path(directory) / "meta.json"
    if not meta_path.exists():
        raise FileNotFoundError(f"{meta_path} missing: prepare the corpus first (prepare_corpus)")
    meta = read_meta(Path(directory))
    if split not in meta["splits"]:
        raise KeyError(f"split {split!r} not in {directory}; available: {', '.join(meta['splits'])}")
    path, expected = Path(directory) / f"{split}.bin", meta["splits"][split]["tokens"]
    itemsize = np.dtype(meta["dtype"]).itemsize
    if not path.exists() or path.stat().st_size != expected * itemsize:
        size = path.stat().st_size if path.exists() else 0
        raise ValueError(
            f"{path} is corrupt or truncated: {size} bytes, meta.json says {expected} tokens of {meta['dtype']} "
            f"({expected * itemsize} bytes); delete {directory} to tokenize again"
        )
    if file_digest(path) != meta["splits"][split]["blake2b"]:  # hashed once per process and version of the file
        raise ValueError(
            f"{path} does not match the checksum in {meta_path}: its content changed after it was "
            f"written; delete {directory} to tokenize the corpus again"
        )
    return np.memmap(path, dtype=meta["dtype"], mode="r"), meta


def data_digest(corpus: str, tokenizer: str | None = None, data_root: str | Path | None = None) -> str | None:
    """A digest of a prepared corpus's splits (meta.json's checksum of each): the data a run trained on, or None."""
    meta = corpus_dir(data_root or default_data_root(), corpus, tokenizer_of(corpus, tokenizer)) / "meta.json"
    if not meta.exists():
        return None
    splits = {name: split["blake2b"] for name, split in sorted(read_meta(meta.parent)["splits"].items())}
    return hashlib.blake2b(json.dumps(splits).encode(), digest_size=16).hexdigest()


def read_meta(directory: Path) -> dict:
    """A prepared corpus's meta.json, verified against its checksum and checked to hold what the suite writes there
    (each split's token count and checksum)."""
    fix = f"delete {directory} to tokenize the corpus again"
    meta = read_verified_json(directory / "meta.json", fix)
    splits = meta.get("splits") if isinstance(meta, dict) else None
    missing = [k for k in ("tokenizer", "vocab_size", "dtype", "splits") if not isinstance(meta, dict) or k not in meta]
    counted = isinstance(splits, dict) and all(
        isinstance(s, dict) and {"tokens", "blake2b"} <= s.keys() for s in splits.values()
    )
    if missing or not counted:
        what = f"lacks {', '.join(missing)}" if missing else "has splits without token counts or checksums"
        raise CorruptFileError(f"{directory / 'meta.json'} {what}: not a meta.json the suite wrote; {fix}")
    return meta


def check_tokenizer(directory: Path, tokenizer: str, tokenizer_path: str | None = None) -> None:
    """Refuse a prepared corpus whose meta.json names another tokenizer or vocabulary than `tokenizer`'s."""
    meta = read_meta(Path(directory))
    tok = load_tokenizer(tokenizer, tokenizer_path)
    if (meta["tokenizer"], meta["vocab_size"]) != (tok.name, tok.vocab_size):
        raise ValueError(
            f"{directory}/meta.json says the data were tokenized with {meta['tokenizer']} ({meta['vocab_size']} ids), "
            f"but the tokenizer asked for is {tok.name} ({tok.vocab_size} ids); use tokenizer={meta['tokenizer']!r} "
            f"or delete {directory} to tokenize again"
        )
