"""Text corpora, each tokenized once into flat uint16/uint32 files per split plus a JSON of metadata.

Layout: ``<data_root>/<corpus>/<tokenizer>/{train,val,test}.bin`` and ``meta.json``. Documents are separated by
the tokenizer's end-of-text token (nanoGPT's `prepare.py` format). Every file is written to a temporary name and
renamed, and `meta.json` last, so an interrupted preparation is redone rather than half-read.
"""

from __future__ import annotations

import bz2
import dataclasses
import hashlib
import json
import os
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from filelock import FileLock
from tqdm.auto import tqdm

from scaling_axes.datamodules.corpus_bpe import raw_blocks, train_corpus_bpe
from scaling_axes.datamodules.embedded import LEE_NEWS, WIKI_XML, require_package_file
from scaling_axes.datamodules.local_files import (
    checked_ids,
    holds_data,
    hub_eval_text,
    hub_text,
    read_token_shard,
    text_dataset,
)
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

SPLITS = ("train", "val", "test")
Documents = dict[str, "datasets.Dataset | bytes | list[Path]"]  # noqa: F821 (datasets is imported lazily; list: token shards)


@dataclasses.dataclass(frozen=True)
class Corpus:
    name: str
    default_tokenizer: str
    source: str
    load: Callable[[Path], Documents]  # data_root -> split -> documents (a `datasets.Dataset` with "text") or bytes
    train_bytes: int | None = None  # known size of the raw training split, for estimates before it is prepared
    proxy: str | None = None  # a corpus of the same kind whose bytes per token stand in for the estimate
    embedded: bool = False  # ships with an installed package: prepared on demand, offline


def _split_documents(texts: list[str], every: int = 20) -> Documents:
    """Deterministic split by document: 1 in `every` to val, 1 in `every` to test, the rest to train."""
    return {
        "train": text_dataset([t for i, t in enumerate(texts) if i % every > 1]),
        "val": text_dataset(texts[0::every]),
        "test": text_dataset(texts[1::every]),
    }


def _split_bytes(data: bytes, valid: int, test: int) -> Documents:
    """The enwik8 convention: the last `valid + test` bytes are validation then test."""
    train_end = len(data) - valid - test
    return {
        "train": data[:train_end],
        "val": data[train_end : train_end + valid],
        "test": data[train_end + valid :],
    }


def _load_pile(root: Path) -> Documents:
    """The deduplicated Pile (what Tokenformer and Pythia-deduped trained on); a random 0.1% of its documents is
    the held-out split (GPT-NeoX's 969/30/1 split held out 0.1% as test)."""
    return hub_text(root / "pile", "EleutherAI/the_pile_deduplicated", None, 0.001, 1234)


OPENWEBTEXT_HELD_OUT = 0.05  # both papers hold out 5% of OpenWebText's documents (it ships a train split only)


def _load_openwebtext(root: Path) -> Documents:
    """OpenWebText with the paper's random 5% validation split; local files under `<root>/openwebtext/` first."""
    return hub_text(root / "openwebtext", "Skylion007/openwebtext", None, OPENWEBTEXT_HELD_OUT, 2357)


def _token_shards(local: Path, train_glob: str, val_glob: str) -> Documents | None:
    """Pre-tokenized GPT-2 shards under `local`, if there are any for both splits."""
    train, val = sorted(local.glob(train_glob)), sorted(local.glob(val_glob))
    return {"train": train, "val": val} if train and val else None


def _load_fineweb(sample: str) -> Callable[[Path], Documents]:
    """FineWeb: llm.c shards `fineweb_{train,val}_*.bin` under `<root>/fineweb[_<sample>]/` (as the MoT runs used),
    else local text files there, else the hub sample (0.1% of documents held out for validation)."""

    def load(root: Path) -> Documents:
        local = root / _fineweb_name(sample)
        shards = _token_shards(local, "fineweb_train_*.bin", "fineweb_val_*.bin")
        return shards or hub_text(local, "HuggingFaceFW/fineweb", sample, 0.001, 2357)

    return load


def _fineweb_name(sample: str) -> str:
    return "fineweb" if sample == "sample-10BT" else f"fineweb_{sample.removeprefix('sample-').lower()}"


def _load_finemath(root: Path) -> Documents:
    """FineMath-4plus: the MoT data's token files `tokens/{train,val}/*.bin` under `<root>/finemath/`, else local
    text files there, else the hub (0.1% of documents held out for validation)."""
    local = root / "finemath"
    shards = _token_shards(local, "tokens/train/*.bin", "tokens/val/*.bin")
    return shards or hub_text(local, "HuggingFaceTB/finemath", "finemath-4plus", 0.001, 2357)


ENWIK8_BYTES, ENWIK8_HELD_OUT = 10**8, 5_000_000  # the standard 90M / 5M / 5M split


def _load_enwik8(root: Path) -> Documents:
    """enwik8 (first 10^8 bytes of the 2006 English Wikipedia XML), standard 90M / 5M / 5M split."""
    for path in (root / "enwik8" / "enwik8", root / "enwik8" / "enwik8.zip", root / "enwik8.zip"):
        if path.is_file():
            data = zipfile.ZipFile(path).read("enwik8") if path.suffix == ".zip" else path.read_bytes()
            if len(data) != ENWIK8_BYTES:
                raise ValueError(f"{path} holds {len(data):,} bytes; enwik8 has exactly {ENWIK8_BYTES:,}")
            return _split_bytes(data, ENWIK8_HELD_OUT, ENWIK8_HELD_OUT)
    raise FileNotFoundError(
        f"enwik8 not found under {root}; put http://mattmahoney.net/dc/enwik8.zip at {root / 'enwik8' / 'enwik8.zip'}"
        f" (or the unzipped file at {root / 'enwik8'})"
    )


def _load_embedded_news(_: Path) -> Documents:
    path = require_package_file("gensim", LEE_NEWS, "gensim")
    return _split_documents([line.strip() for line in path.read_text().splitlines() if line.strip()])


def _load_embedded_wiki(_: Path) -> Documents:
    data = bz2.decompress(require_package_file("gensim", WIKI_XML, "gensim").read_bytes())
    fifth = len(data) // 20
    return _split_bytes(data, fifth, fifth)


CORPORA = {
    c.name: c
    for c in (
        Corpus("openwebtext", "gpt2", "Skylion007/openwebtext (or local files)", _load_openwebtext),
        Corpus("enwik8", "bytes", "enwik8.zip (Hutter prize)", _load_enwik8, 90_000_000, "embedded_wiki"),
        *(
            Corpus(
                _fineweb_name(sample), "gpt2", f"HuggingFaceFW/fineweb {sample} (or local files)", _load_fineweb(sample)
            )
            for sample in ("sample-10BT", "sample-100BT", "sample-350BT")
        ),
        Corpus("finemath", "gpt2", "HuggingFaceTB/finemath finemath-4plus (or local files)", _load_finemath),
        Corpus("pile", "neox", "EleutherAI/the_pile_deduplicated (or local files)", _load_pile),
        Corpus(
            "pile_10k",
            "gpt2",
            "NeelNanda/pile-10k (or local files), evaluation only",
            lambda root: hub_eval_text(root / "pile_10k", "NeelNanda/pile-10k", None, "train"),
        ),
        Corpus(
            "wikitext",
            "gpt2",
            "Salesforce/wikitext wikitext-103-raw-v1 test (or local files), evaluation only",
            lambda root: hub_eval_text(
                root / "wikitext", "Salesforce/wikitext", "wikitext-103-raw-v1", "test", one_document=True
            ),
        ),
        Corpus("embedded_news", "gpt2", f"gensim {LEE_NEWS}", _load_embedded_news, embedded=True),
        Corpus("embedded_wiki", "bytes", f"gensim {WIKI_XML}", _load_embedded_wiki, embedded=True),
    )
}


def corpus_spec(corpus: str) -> Corpus:
    if corpus not in CORPORA:
        raise KeyError(f"unknown corpus {corpus!r}; available: {', '.join(CORPORA)}")
    return CORPORA[corpus]


def tokenizer_of(corpus: str, tokenizer: str | None = None) -> str:
    """The tokenizer `corpus` is read with: `tokenizer` where one is named, else the corpus's default."""
    return tokenizer or corpus_spec(corpus).default_tokenizer


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
