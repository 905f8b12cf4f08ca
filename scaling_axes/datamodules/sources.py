"""The corpora the suite trains and evaluates on: what each is (`Corpus`: its default tokenizer, where it comes
from, its terms and Hub id), how its documents are read and split, one place for all of them (`CORPORA`).
Preparing one (tokenizing it once into flat token files) is `corpora.py`'s."""

from __future__ import annotations

import bz2
import dataclasses
import zipfile
from collections.abc import Callable
from pathlib import Path

from scaling_axes.datamodules.embedded import LEE_NEWS, WIKI_XML, require_package_file
from scaling_axes.datamodules.local_files import (
    hub_eval_text,
    hub_text,
    text_dataset,
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
    terms: str = "its source's"  # the data's license or terms of use, as a model card states them
    hub_dataset: str | None = None  # its id on the Hugging Face Hub, where it is there (a model card's `datasets`)


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
        Corpus(
            "openwebtext",
            "gpt2",
            "Skylion007/openwebtext (or local files)",
            _load_openwebtext,
            terms="CC0-1.0",
            hub_dataset="Skylion007/openwebtext",
        ),
        Corpus(
            "enwik8",
            "bytes",
            "enwik8.zip (Hutter prize)",
            _load_enwik8,
            90_000_000,
            "embedded_wiki",
            terms="CC BY-SA (Wikipedia text)",
        ),
        *(
            Corpus(
                _fineweb_name(sample),
                "gpt2",
                f"HuggingFaceFW/fineweb {sample} (or local files)",
                _load_fineweb(sample),
                terms="ODC-By 1.0",
                hub_dataset="HuggingFaceFW/fineweb",
            )
            for sample in ("sample-10BT", "sample-100BT", "sample-350BT")
        ),
        Corpus(
            "finemath",
            "gpt2",
            "HuggingFaceTB/finemath finemath-4plus (or local files)",
            _load_finemath,
            terms="ODC-By 1.0",
            hub_dataset="HuggingFaceTB/finemath",
        ),
        Corpus(
            "pile",
            "neox",
            "EleutherAI/the_pile_deduplicated (or local files)",
            _load_pile,
            terms="the Pile's, per component (its datasheet)",
            hub_dataset="EleutherAI/the_pile_deduplicated",
        ),
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
        Corpus(
            "embedded_news",
            "gpt2",
            f"gensim {LEE_NEWS}",
            _load_embedded_news,
            embedded=True,
            terms="the Lee news corpus as gensim's test data ships it (gensim: LGPL-2.1)",
        ),
        Corpus(
            "embedded_wiki",
            "bytes",
            f"gensim {WIKI_XML}",
            _load_embedded_wiki,
            embedded=True,
            terms="CC BY-SA (Wikipedia text)",
        ),
    )
}


def corpus_spec(corpus: str) -> Corpus:
    if corpus not in CORPORA:
        raise KeyError(f"unknown corpus {corpus!r}; available: {', '.join(CORPORA)}")
    return CORPORA[corpus]


def tokenizer_of(corpus: str, tokenizer: str | None = None) -> str:
    """The tokenizer `corpus` is read with: `tokenizer` where one is named, else the corpus's default."""
    return tokenizer or corpus_spec(corpus).default_tokenizer
