"""A corpus's raw documents from the files people have on disk, read through `datasets` itself.

Under `<data_root>/<corpus>/`, searched recursively:

* a `Dataset.save_to_disk` or `DatasetDict.save_to_disk` folder (`state.json` / `dataset_dict.json`), read with
  `datasets.load_from_disk`;
* llm.c token shards (`read_token_shard`), where a corpus has them;
* data files with a "text" field: `.parquet` (a hub snapshot, beside its `dataset_infos.json`), `.jsonl` / `.json`,
  also compressed (`.jsonl.zst`, the Pile as distributed, or `.gz`), and `.txt`, one document per file.

A file or folder named for a split (`train-00000-of-00080.parquet`, `val.jsonl.zst`, `test/00.jsonl`) is read for
that split only. Never read as data: the suite's prepared folders (any folder holding a `meta.json`, such as
`<corpus>/gpt2/` beside the raw files), the `datasets` metadata files, hidden and temporary files.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".txt": "text"}
COMPRESSED = (".gz", ".zst")
METADATA = {"dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json"}
SAVED = ("dataset_dict.json", "state.json")  # what save_to_disk writes at the top of its folder
_SPLIT_NAME = re.compile(r"^(train|validation|valid|val|test)(?:[-._ 0-9]|$)")
_SPLITS = {"train": "train", "validation": "validation", "valid": "validation", "val": "validation", "test": "test"}


def _builder(path: Path) -> str | None:
    suffixes = path.suffixes[-2:] if path.suffix in COMPRESSED else path.suffixes[-1:]
    return BUILDERS.get(suffixes[0]) if suffixes else None


def _walk(local: Path) -> tuple[list[Path], list[Path]]:
    """(saved-dataset folders, data files) under `local`, prepared folders and hidden names left out."""
    saved, files = [], []
    pending = [local] if local.is_dir() else []
    while pending:
        folder = pending.pop()
        entries = list(folder.iterdir())
        names = {p.name for p in entries}
        if folder != local and "meta.json" in names:
            continue  # a folder the suite prepared (tokens and meta.json), never a source
        if any(name in names for name in SAVED):
            saved.append(folder)
            continue
        for path in entries:
            if path.name.startswith("."):  # hidden, as the suite's temporary files are
                continue
            if path.is_dir():
                pending.append(path)
            elif path.name not in METADATA and _builder(path):
                files.append(path)
    return sorted(saved), sorted(files)


def split_of(path: Path, local: Path) -> str | None:
    """The split a file is named for (by its own name or a folder's under `local`), or None."""
    for part in reversed(path.relative_to(local).parts):
        if match := _SPLIT_NAME.match(part.lower()):
            return _SPLITS[match.group(1)]
    return None


def holds_data(local: Path) -> bool:
    """Whether `local` is a raw corpus file or a folder holding any file (an empty folder left behind is not data)."""
    if local.is_file():
        return True
    return local.is_dir() and any(p.is_file() and not p.name.startswith(".") for p in local.rglob("*"))


def local_documents(local: Path, split: str):
    """The documents of `split` ("train", "validation", "test") under `local` as one `datasets.Dataset` with a "text"
    column, or None when there are none; unreadable or textless files stop with what to fix (the hub is not tried)."""
    saved, files = _walk(local)
    if saved:
        return _with_text(_saved(saved[0], split), saved[0])
    if not files:
        return None
    named = {path: split_of(path, local) for path in files}
    if any(named.values()):
        files = [path for path, name in named.items() if name == split]
        if not files:
            found = sorted({name for name in named.values() if name})
            raise FileNotFoundError(
                f"the files under {local} are named for the splits {', '.join(found)}, none for "
                f"{split!r}, which this corpus reads; add its files or rename them"
            )
    return _data_files(files, local)  # each format's part checked for text as it is read


def _saved(folder: Path, split: str):
    import datasets

    loaded = datasets.load_from_disk(str(folder))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise FileNotFoundError(
                f"the saved DatasetDict {folder} has the splits {', '.join(loaded)}, not "
                f"{split!r}, which this corpus reads; save it with that split"
            )
        return loaded[split]
    return loaded


def _data_files(files: list[Path], local: Path):
    """The files as one dataset: each format through its `datasets` builder, their "text" columns concatenated."""
    import datasets

    parts = []
    for builder in sorted({_builder(f) for f in files}):
        data_files = [str(f) for f in files if _builder(f) == builder]
        options = {"sample_by": "document"} if builder == "text" else {}
        try:
            part = datasets.load_dataset(builder, data_files=data_files, split="train", **options)
        except Exception as err:
            raise ValueError(
                f"could not read the local corpus files under {local} ({type(err).__name__}: {err}); "
                "they must be UTF-8 .txt, or .jsonl/.json(.gz/.zst)/.parquet with a 'text' "
                "field"
            ) from err
        parts.append(_with_text(part, local).select_columns(["text"]))
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def _with_text(documents, where: Path):
    if (
        "text" not in documents.column_names
        or len(documents) == 0
        or not any(t and t.strip() for t in documents[:1000]["text"])
    ):
        raise ValueError(
            f"the local corpus under {where} holds no text (columns: {', '.join(documents.column_names)}"
            f", {len(documents)} rows); put the corpus there with a 'text' field, or remove it to use "
            "the hub"
        )
    return documents


LLMC_MAGIC = 20240520


def read_token_shard(path: Path) -> np.ndarray:
    """An llm.c token shard: a 256 x int32 header (magic 20240520, version, token count), then the tokens, read in
    the dtype the file was written in (uint16 for llm.c's GPT-2 shards, int32 for the MoT FineMath files), which its
    size gives away. The original MoT loader read the int32 files as uint16 (MoT reference 6.3)."""
    header = np.fromfile(path, dtype=np.int32, count=256)
    if len(header) < 256 or header[0] != LLMC_MAGIC:
        found = header[0] if len(header) else "nothing"
        raise ValueError(f"{path} is not an llm.c token shard: magic {found}, expected {LLMC_MAGIC}")
    count, payload = int(header[2]), path.stat().st_size - header.nbytes
    itemsize = payload // count if count > 0 and payload % count == 0 else 0
    if itemsize not in (2, 4):
        raise ValueError(
            f"{path}: the header says {count} tokens but {payload} bytes follow it; neither uint16 nor int32 fits"
        )
    return np.memmap(
        path, dtype=np.uint16 if itemsize == 2 else np.int32, mode="r", offset=header.nbytes, shape=(count,)
    )


def checked_ids(ids: np.ndarray, vocab_size: int, path: Path) -> np.ndarray:
    if len(ids) and (int(ids.max()) >= vocab_size or int(ids.min()) < 0):
        raise ValueError(f"{path} holds ids outside 0..{vocab_size - 1}: not a GPT-2 token shard")
    return ids


def text_dataset(texts: list[str]):
    import datasets

    return datasets.Dataset.from_dict({"text": texts})


def local_or_hub(local: Path, hub: str, config: str | None, split: str):
    """The documents of `split` in the local files under `local` (`datamodules.local_files`: saved datasets, hub
    snapshots, .jsonl(.zst/.gz), .parquet, .txt), else the hub dataset's `split`."""
    import datasets

    local_split = "validation" if split == "val" else split
    if (documents := local_documents(local, local_split)) is not None:
        return documents
    try:
        return datasets.load_dataset(hub, name=config, split=split)
    except Exception as err:
        raise FileNotFoundError(
            f"no local corpus in {local} (a save_to_disk folder, or .parquet/.jsonl(.zst/.gz)/.json/.txt files with a "
            f"'text' field) and loading {hub}{f' ({config})' if config else ''} {split} from the hub failed: {err}"
        ) from err


def hub_text(local: Path, hub: str, config: str | None, val_fraction: float, seed: int) -> dict:
    """A training corpus (see `local_or_hub`); a random `val_fraction` of its documents is the validation split."""
    parts = local_or_hub(local, hub, config, "train").train_test_split(test_size=val_fraction, seed=seed)
    return {"train": parts["train"], "val": parts["test"]}


def hub_eval_text(local: Path, hub: str, config: str | None, split: str, one_document: bool = False) -> dict:
    """An evaluation-only corpus, all of it as "val". With `one_document` the texts are joined into one (WikiText's
    lines are paragraphs of a few articles, not documents)."""
    texts = local_or_hub(local, hub, config, split)
    return {"val": text_dataset(["".join(texts["text"])]) if one_document else texts.select_columns(["text"])}
