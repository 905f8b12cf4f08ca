"""Corpora from the files people have on disk, in their real layouts: saved datasets, hub snapshots, the Pile's
.jsonl.zst, .txt documents, an unzipped enwik8; and preparations that never mistake the suite's own files for data."""

import gzip
import json

import datasets
import numpy as np
import pytest

from scaling_axes.datamodules import corpora, sources
from scaling_axes.datamodules.corpora import on_disk, open_split, prepare_corpus
from scaling_axes.datamodules.tokenizers import load_tokenizer
from scaling_axes.harness.scales import SMALL
from scaling_axes.io import CorruptFileError, atomic_write

DOCS = [f"Document {i}: a line,\nand a second line of document {i}." for i in range(40)]


def _documents(directory, split: str = "train") -> list[str]:
    """The documents of a prepared split, decoded and split at the end-of-text token."""
    tokens = np.asarray(open_split(directory, split)[0])
    return load_tokenizer("gpt2").decode([int(t) for t in tokens]).split("<|endoftext|>")[:-1]


def _all_documents(directory) -> list[str]:
    return sorted(_documents(directory, "train") + _documents(directory, "val"))


def _jsonl(docs: list[str]) -> bytes:
    return "".join(json.dumps({"text": d, "meta": {"pile_set_name": "Pile-CC"}}) + "\n" for d in docs).encode()


def test_a_saved_dataset_and_a_saved_dataset_dict_are_read_with_load_from_disk(tmp_path):
    datasets.Dataset.from_dict({"text": DOCS}).save_to_disk(str(tmp_path / "openwebtext"))
    assert _all_documents(prepare_corpus("openwebtext", "gpt2", tmp_path)) == sorted(DOCS)
    other = tmp_path / "other"
    held_out = ["a validation document that training must not see"]
    saved = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": DOCS}),
            "validation": datasets.Dataset.from_dict({"text": held_out}),
        }
    )
    saved.save_to_disk(str(other / "pile" / "saved"))
    assert _all_documents(prepare_corpus("pile", "gpt2", other)) == sorted(DOCS)  # the train split only


def test_a_hub_snapshot_reads_the_split_its_files_are_named_for(tmp_path):
    """`huggingface-cli download` layout: `<config>/<split>-0000k-of-0000n.parquet` beside `dataset_infos.json`."""
    snapshot = tmp_path / "wikitext" / "wikitext-103-raw-v1"
    snapshot.mkdir(parents=True)
    (tmp_path / "wikitext" / "dataset_infos.json").write_text(json.dumps({"wikitext-103-raw-v1": {}}))
    for split, texts in (("train", ["training text "] * 5), ("test", [" = Test = \n", "held-out text\n"])):
        datasets.Dataset.from_dict({"text": texts}).to_parquet(str(snapshot / f"{split}-00000-of-00001.parquet"))
    directory = prepare_corpus("wikitext", "gpt2", tmp_path)
    assert _documents(directory, "val") == [" = Test = \nheld-out text\n"]  # the test split, as one document


def test_the_pile_as_distributed_jsonl_zst_and_gzip(tmp_path):
    import zstandard

    (tmp_path / "pile" / "train").mkdir(parents=True)
    (tmp_path / "pile" / "train" / "00.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(_jsonl(DOCS[:20])))
    (tmp_path / "pile" / "train" / "01.jsonl.gz").write_bytes(gzip.compress(_jsonl(DOCS[20:])))
    (tmp_path / "pile" / "val.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(_jsonl(["not training"])))
    assert _all_documents(prepare_corpus("pile", "gpt2", tmp_path)) == sorted(DOCS)


def test_a_txt_file_is_one_document(tmp_path):
    (tmp_path / "openwebtext").mkdir()
    for i, doc in enumerate(DOCS):
        (tmp_path / "openwebtext" / f"{i:04d}.txt").write_text(doc + "\n\nwith a paragraph after a blank line\n")
    documents = _all_documents(prepare_corpus("openwebtext", "gpt2", tmp_path))
    assert documents == sorted(d + "\n\nwith a paragraph after a blank line\n" for d in DOCS)


def test_a_prepared_folder_is_never_read_as_data(tmp_path):
    """OpenWebText prepared for GPT-2 (`openwebtext/gpt2/meta.json`) beside its raw files; preparing it for NeoX
    later reads the raw files only."""
    (tmp_path / "openwebtext").mkdir()
    (tmp_path / "openwebtext" / "part0.jsonl").write_bytes(_jsonl(DOCS))
    gpt2 = json.loads((prepare_corpus("openwebtext", "gpt2", tmp_path) / "meta.json").read_text())
    neox = json.loads((prepare_corpus("openwebtext", "neox", tmp_path) / "meta.json").read_text())
    assert [neox["splits"][s]["documents"] for s in ("train", "val")] == [38, 2]
    assert neox["splits"]["train"]["bytes"] == gpt2["splits"]["train"]["bytes"]


def test_an_unzipped_enwik8_file_works(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "ENWIK8_BYTES", 1000)
    monkeypatch.setattr(sources, "ENWIK8_HELD_OUT", 50)
    data = (b"<page><text>enwik8 \xc3\xa9</text></page>\n" * 40)[:1000]
    (tmp_path / "enwik8").write_bytes(data)  # where `unzip enwik8.zip` in data/ puts it
    directory = prepare_corpus("enwik8", data_root=tmp_path)
    tokens = np.concatenate([np.asarray(open_split(directory, s)[0]) for s in ("train", "val", "test")])
    assert bytes(tokens.astype(np.uint8)) == data and (tmp_path / "enwik8" / "enwik8").read_bytes() == data


def test_a_failed_preparation_leaves_no_folder_to_hide_the_stand_in(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no local corpus"):
        prepare_corpus("openwebtext", "gpt2")  # the hub is unreachable in the tests
    assert not (tmp_path / "openwebtext").exists() and not on_disk("openwebtext")
    assert SMALL.corpus("openwebtext", "embedded_news") == "embedded_wiki"
    (tmp_path / "openwebtext").mkdir()  # an empty folder (made by hand, or by an older version) is not the corpus
    assert SMALL.corpus("openwebtext", "embedded_news") == "embedded_wiki"
    (tmp_path / "openwebtext" / "part0.jsonl").write_bytes(_jsonl(DOCS))
    monkeypatch.setattr(corpora, "_write_tokens", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError, match="No space left"):  # fails mid-way, after its folder was made
        prepare_corpus("embedded_news", "gpt2")
    assert not (tmp_path / "embedded_news").exists()


def test_a_preparation_killed_mid_write_is_redone_and_its_temporaries_removed(tmp_path):
    (tmp_path / "openwebtext").mkdir()
    (tmp_path / "openwebtext" / "part0.jsonl").write_bytes(_jsonl(DOCS))
    left = tmp_path / "openwebtext" / "gpt2" / ".train.bin.tmp4242"
    left.parent.mkdir()
    left.write_bytes(b"\0" * 10)  # a killed writer's file, and no meta.json
    assert _all_documents(prepare_corpus("openwebtext", "gpt2", tmp_path)) == sorted(DOCS)
    assert not left.exists()


def test_the_token_writer_names_its_temporary_file_for_its_process(tmp_path, monkeypatch):
    seen = []
    real_replace = corpora.os.replace
    monkeypatch.setattr(corpora.os, "replace", lambda a, b: (seen.append(a.name), real_replace(a, b)))
    corpora._write_tokens(tmp_path / "train.bin", iter([np.arange(5)]), np.uint16)
    assert seen == [f".train.bin.tmp{corpora.os.getpid()}"]


@pytest.mark.parametrize(
    "meta", ["{}", "[]", '{"tokenizer": "gpt2", "vocab_size": 50257, "dtype": "uint16", "splits": {"train": {}}}']
)
def test_a_malformed_meta_json_names_the_file_and_the_fix(tmp_path, meta):
    atomic_write(tmp_path / "meta.json", meta, checksum=True)  # checksummed: its content is what is checked
    with pytest.raises(CorruptFileError, match=rf"{tmp_path}/meta.json .*not a meta.json the suite wrote; delete"):
        open_split(tmp_path, "train")
