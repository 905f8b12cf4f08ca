"""Tokenizers, the memmap path, window sampling and data errors, on small files in the real formats."""

import json
import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from scaling_axes.datamodules.corpora import open_split, prepare_corpus
from scaling_axes.datamodules.local_files import read_token_shard
from scaling_axes.datamodules.sources import _split_bytes
from scaling_axes.datamodules.text import FixedWindows, RandomWindowBatches, TextDataModule
from scaling_axes.datamodules.tokenizers import load_tokenizer


def test_embedded_tokenizers_give_the_known_ids():
    assert load_tokenizer("gpt2").encode("Hello world") == [15496, 995]
    assert load_tokenizer("gpt2").eot_id == 50256
    neox = load_tokenizer("neox")
    assert neox.encode("Hello world") == [12092, 1533] and neox.eot_id == 0


def test_unknown_tokenizer_is_named():
    with pytest.raises(KeyError, match="unknown tokenizer 'llama'"):
        load_tokenizer("llama")


def test_missing_tokenizer_file_is_reported(tmp_path, monkeypatch):
    import tiktoken

    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(FileNotFoundError, match=r"GPT-2 tokenizer.*offline"):
        load_tokenizer.__wrapped__("gpt2", str(tmp_path / "missing.tiktoken"))


@pytest.fixture
def owt_root(tmp_path):
    """A local OpenWebText in the hub's format (jsonl with a `text` field)."""
    docs = [f"Document number {i}: the quick brown fox jumps over {i} lazy dogs." for i in range(60)]
    (tmp_path / "openwebtext").mkdir()
    (tmp_path / "openwebtext" / "part0.jsonl").write_text("\n".join(json.dumps({"text": d}) for d in docs))
    return tmp_path, docs


def test_memmap_round_trip_reproduces_token_ids(owt_root):
    root, docs = owt_root
    directory = prepare_corpus("openwebtext", "gpt2", root)
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["splits"]["val"]["documents"] == 3 and meta["splits"]["train"]["documents"] == 57  # 5% held out
    tok = load_tokenizer("gpt2")
    tokens = np.concatenate([np.asarray(open_split(directory, s)[0]) for s in ("train", "val")])
    decoded = tok.decode([int(t) for t in tokens]).split("<|endoftext|>")[:-1]
    assert sorted(decoded) == sorted(docs)
    expected = sum(len(tok.encode(d)) + 1 for d in docs)
    assert len(tokens) == expected and meta["dtype"] == "uint16"


def test_truncated_memmap_is_detected(owt_root):
    root, _ = owt_root
    directory = prepare_corpus("openwebtext", "gpt2", root)
    path = directory / "train.bin"
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(ValueError, match=r"corrupt or truncated.*delete"):
        open_split(directory, "train")


def test_missing_corpora_say_what_to_provide(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"enwik8 not found.*enwik8\.zip"):
        prepare_corpus("enwik8", data_root=tmp_path)
    with pytest.raises(KeyError, match="unknown corpus 'c4'"):
        prepare_corpus("c4", data_root=tmp_path)


def test_enwik8_split_and_size_check(tmp_path):
    parts = _split_bytes(bytes(range(100)) * 10, 50, 30)
    assert [len(parts[s]) for s in ("train", "val", "test")] == [920, 50, 30]
    assert parts["test"] == (bytes(range(100)) * 10)[-30:]
    (tmp_path / "enwik8").mkdir()
    (tmp_path / "enwik8" / "enwik8").write_bytes(b"x" * 1000)
    with pytest.raises(ValueError, match="1,000 bytes; enwik8 has exactly 100,000,000"):
        prepare_corpus("enwik8", data_root=tmp_path)


def test_embedded_wiki_is_byte_level(tmp_path):
    directory = prepare_corpus("embedded_wiki", data_root=tmp_path)
    tokens, meta = open_split(directory, "val")
    assert meta["vocab_size"] == 256 and meta["splits"]["val"]["bytes"] == len(tokens)
    assert bytes(np.asarray(tokens[:200], dtype=np.uint8)).decode("utf-8", errors="ignore").strip()


def test_ranks_draw_different_windows_and_batches_are_reproducible(owt_root):
    root, _ = owt_root
    directory = prepare_corpus("openwebtext", "gpt2", root)
    rank0 = iter(RandomWindowBatches(directory, "train", 16, 4, seed=1, rank=0))
    rank1 = iter(RandomWindowBatches(directory, "train", 16, 4, seed=1, rank=1))
    a0, a1 = next(rank0), next(rank1)
    assert not torch.equal(a0[0], a1[0])
    torch.testing.assert_close(a0[1][:, :-1], a0[0][:, 1:])  # targets are inputs shifted by one
    resumed = next(iter(RandomWindowBatches(directory, "train", 16, 4, seed=1, rank=0, start_batch=1)))
    next_batch = next(rank0)
    assert torch.equal(resumed[0], next_batch[0])


def test_validation_windows_tile_the_split(owt_root):
    root, _ = owt_root
    directory = prepare_corpus("openwebtext", "gpt2", root)
    tokens, _ = open_split(directory, "val")
    windows = FixedWindows(directory, "val", 8)
    assert len(windows) == (len(tokens) - 1) // 8
    joined = torch.cat([windows[i][0] for i in range(len(windows))])
    assert torch.equal(joined, torch.from_numpy(np.asarray(tokens[: len(joined)], dtype=np.int64)))


def test_sequence_longer_than_the_split_is_rejected(owt_root):
    root, _ = owt_root
    directory = prepare_corpus("openwebtext", "gpt2", root)
    with pytest.raises(ValueError, match="shorter than one window"):
        FixedWindows(directory, "val", 10_000)


def test_datamodule_knows_bytes_per_token(owt_root):
    root, _ = owt_root
    data = TextDataModule("openwebtext", "gpt2", seq_len=8, batch_size=2, data_root=str(root))
    data.setup()
    assert data.vocab_size == 50257
    assert 2.0 < data.bytes_per_token() < 6.0


@pytest.fixture(scope="module")
def enwik8_root(tmp_path_factory):
    """A stand-in enwik8.zip in the real format: exactly 10^8 bytes of MediaWiki-like XML."""
    import zipfile

    root = tmp_path_factory.mktemp("enwik8_data")
    page = b"<page><title>Byte</title><text>A byte is 8 bits &amp; more \xc3\xa9t\xc3\xa9.</text></page>\n"
    data = (page * (10**8 // len(page) + 1))[: 10**8]
    (root / "enwik8").mkdir()
    with zipfile.ZipFile(root / "enwik8" / "enwik8.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("enwik8", data)
    return root, data


def test_enwik8_standard_split_and_bits_per_byte_on_val_and_test(enwik8_root):
    from scaling_axes.modules.tasks.lm import LanguageModel

    root, data = enwik8_root
    dm = TextDataModule("enwik8", seq_len=64, batch_size=4, val_windows=3, data_root=str(root))
    dm.setup()
    sizes = {s: v["tokens"] for s, v in dm.meta["splits"].items()}
    assert sizes == {"train": 90_000_000, "val": 5_000_000, "test": 5_000_000}
    assert dm.bytes_per_token("val") == dm.bytes_per_token("test") == 1.0
    test_tokens, _ = open_split(dm.directory, "test")
    assert bytes(np.asarray(test_tokens[-100:], dtype=np.uint8)) == data[-100:]
    inputs, targets = next(iter(dm.test_dataloader()))
    assert bytes(inputs[0].numpy().astype(np.uint8)) == data[95_000_000:95_000_064]
    module = LanguageModel("transformer_124m", {"n_layer": 1, "d_model": 16, "n_head": 2, "vocab_size": 256})
    logged = {}
    module.log_dict = lambda metrics, **_: logged.update(metrics)
    with torch.no_grad():
        module._eval_step((inputs, targets))
    module._trainer = SimpleNamespace(datamodule=dm)
    module.on_test_epoch_end()
    assert logged["test/bpb"].item() == pytest.approx(logged["test/loss"].item() / math.log(2))


def test_raw_xml_with_a_bpe_tokenizer_counts_bytes_per_token(tmp_path):
    """enwik8's path for token models (Fig. 6): its XML as UTF-8 text, bits per byte from the raw byte count."""
    directory = prepare_corpus("embedded_wiki", "gpt2", tmp_path)
    meta = json.loads((directory / "meta.json").read_text())
    val = meta["splits"]["val"]
    assert val["bytes"] == 304487 and 2.0 < val["bytes"] / val["tokens"] < 6.0
    tokens, _ = open_split(directory, "val")
    text = load_tokenizer("gpt2").decode([int(t) for t in tokens[:50]])
    assert len(text) > 100  # real text comes back, not byte soup


def write_llmc_shard(path, tokens, dtype):
    """A token shard in llm.c's layout: 256 int32 header (magic, version, count), then the tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, len(tokens))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype=dtype).tobytes())


def test_token_shards_are_read_in_the_dtype_they_were_written_in(tmp_path):
    """FineWeb's llm.c shards are uint16, the MoT FineMath files int32 (the original read both as uint16)."""
    rng = np.random.default_rng(0)
    fineweb = {s: rng.integers(0, 50257, size=n) for s, n in (("train", 700), ("val", 300))}
    finemath = {s: rng.integers(0, 50257, size=n) for s, n in (("train", 500), ("val", 200))}
    for split, tokens in fineweb.items():
        write_llmc_shard(tmp_path / "fineweb" / f"fineweb_{split}_000000.bin", tokens, np.uint16)
    for split, tokens in finemath.items():
        write_llmc_shard(tmp_path / "finemath" / "tokens" / split / "part_000.bin", tokens, np.int32)
    for corpus, expected in (("fineweb", fineweb), ("finemath", finemath)):
        directory = prepare_corpus(corpus, data_root=tmp_path)
        for split, tokens in expected.items():
            assert np.array_equal(open_split(directory, split)[0], tokens)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(np.zeros(300, dtype=np.int32).tobytes())
    with pytest.raises(ValueError, match=r"not an llm\.c token shard: magic 0"):
        read_token_shard(bad)
    write_llmc_shard(bad, np.arange(10), np.uint16)
    bad.write_bytes(bad.read_bytes()[:-6])
    with pytest.raises(ValueError, match="says 10 tokens but 14 bytes"):
        read_token_shard(bad)


def test_epoch_order_reads_every_window_of_every_corpus_once_per_epoch(tmp_path):
    """Two corpora, two ranks, resumed mid-epoch: each epoch covers each window exactly once (the original loader
    re-read its first shards instead, MoT reference 6.2)."""
    for split in ("train", "val"):  # 20 and 10 windows of 8 (+1) tokens
        write_llmc_shard(tmp_path / "fineweb" / f"fineweb_{split}_0.bin", np.arange(161), np.uint16)
        write_llmc_shard(tmp_path / "finemath" / "tokens" / split / "0.bin", 1000 + np.arange(81), np.int32)
    directories = [prepare_corpus(c, data_root=tmp_path) for c in ("fineweb", "finemath")]
    batches = {
        r: RandomWindowBatches(directories, "train", 8, 2, seed=3, rank=r, order="epoch", world_size=2) for r in (0, 1)
    }
    sources = [open_split(d, "train")[0] for d in directories]
    firsts = [int(b[0]) for i in range(15) for r in (0, 1) for b in batches[r].batch(sources, i)[0]]
    epochs = [sorted(firsts[:30]), sorted(firsts[30:60])]
    every_window = sorted([8 * i for i in range(20)] + [1000 + 8 * i for i in range(10)])
    assert epochs[0] == every_window and epochs[1] == every_window and firsts[:30] != firsts[30:60]
    resumed = next(
        iter(
            RandomWindowBatches(directories, "train", 8, 2, seed=3, rank=1, start_batch=7, order="epoch", world_size=2)
        )
    )
    assert torch.equal(resumed[0], batches[1].batch(sources, 7)[0])


def test_finemath_and_fineweb_from_local_text_files_in_the_hub_format(tmp_path):
    """Without token shards, local files with a `text` field (the hub's parquet/jsonl) are tokenized with GPT-2."""
    import datasets

    docs = [f"Problem {i}: compute ${i} + {i}$. Answer: {2 * i}." for i in range(40)]
    (tmp_path / "finemath" / "data").mkdir(parents=True)
    datasets.Dataset.from_dict({"text": docs}).to_parquet(str(tmp_path / "finemath" / "data" / "part.parquet"))
    directory = prepare_corpus("finemath", data_root=tmp_path)
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["splits"]["val"]["documents"] == 1 and meta["splits"]["train"]["documents"] == 39
    tokens = np.concatenate([np.asarray(open_split(directory, s)[0]) for s in ("train", "val")])
    texts = load_tokenizer("gpt2").decode([int(t) for t in tokens]).split("<|endoftext|>")[:-1]
    assert sorted(texts) == sorted(docs)
    with pytest.raises(FileNotFoundError, match=r"no local corpus in .*fineweb_100bt.*HuggingFaceFW/fineweb"):
        prepare_corpus("fineweb_100bt", data_root=tmp_path)


def _original_generator(files, seq_len, batch_size, seed):
    """The MoT original's loader loop, written out as `train_gpt.py` has it (torch.cat of the shards loaded so far,
    position reset to 0, files read as uint16, bad headers skipped): the slow reference for data_path='as_run'."""
    files = list(files)
    random.seed(seed)
    random.shuffle(files)
    pending = iter(files)

    def load():
        while True:
            path = next(pending)
            header = torch.from_numpy(np.fromfile(path, dtype=np.int32, count=256))
            if header[0] != 20240520 or header[1] != 1:
                continue
            with open(path, "rb") as f:
                f.seek(256 * 4)
                payload = f.read(2 * int(header[2]))
            return torch.frombuffer(bytearray(payload), dtype=torch.uint16).to(torch.int32)

    data, pos, row = load(), 0, seq_len + 1
    while True:
        if pos + batch_size * row + 1 >= len(data):
            try:
                data, pos = torch.cat([data, load()]), 0
            except StopIteration:
                return
        yield data[pos:][: batch_size * row].view(-1, row)
        pos += batch_size * row


@pytest.fixture
def as_run_shards(tmp_path):
    """Two uint16 FineWeb shards, two int32 FineMath files and one file with a bad header."""
    rng = np.random.default_rng(3)
    sizes = {
        "fineweb_train_000001.bin": (130, np.uint16),
        "fineweb_train_000002.bin": (90, np.uint16),
        "part_000.bin": (70, np.int32),
        "part_001.bin": (110, np.int32),
    }
    files = []
    for name, (size, dtype) in sizes.items():
        files.append(tmp_path / name)
        write_llmc_shard(files[-1], rng.integers(1, 50257, size=size), dtype)
    files.append(tmp_path / "broken.bin")
    files[-1].write_bytes(np.zeros(300, dtype=np.int32).tobytes())
    return files


def test_as_run_stream_equals_the_original_loader_loop(as_run_shards):
    """Every micro-batch of two ranks with two accumulation steps each, against the original's global batches, until
    the files run out; a run resumed at micro-batch 5 continues with the same batches."""
    from scaling_axes.datamodules.as_run import AsRunStream

    seq_len, global_batch, seed = 7, 4, 9090333
    expected = list(_original_generator(as_run_shards, seq_len, global_batch, seed))
    assert len(expected) * global_batch * (seq_len + 1) > 400  # more than the 400 tokens: the re-reads
    ranks = [AsRunStream(as_run_shards, seq_len, 1, global_batch, seed, rank, 2) for rank in range(2)]
    streams = [iter(r) for r in ranks]
    for batch in expected:
        got = [torch.cat((x, y[:, -1:]), dim=1) for s in streams for x, y in (next(s), next(s))]
        assert torch.equal(torch.cat(got), batch.long())
    with pytest.raises(RuntimeError, match="ran out"):
        next(streams[0])
    resumed = iter(AsRunStream(as_run_shards, seq_len, 1, global_batch, seed, 1, 2, start_batch=5))
    x, y = next(resumed)
    assert torch.equal(torch.cat((x, y[:, -1:]), 1)[0], expected[2][3].long())  # step 2, piece 1 of rank 1


def test_as_run_reads_int32_files_as_the_original_did(as_run_shards):
    from scaling_axes.datamodules.as_run import read_as_run

    written = np.fromfile(as_run_shards[2], dtype=np.int32, offset=1024)
    as_read = read_as_run(as_run_shards[2])
    assert len(as_read) == len(written) == 70  # the header's count, of uint16 values: half the file
    assert np.array_equal(as_read[0::2], written[:35]) and not as_read[1::2].any()  # each token, then a 0 ("!")
    assert read_as_run(as_run_shards[-1]) is None  # a bad header: skipped, as the original's AssertionError was


def test_datamodule_as_run_serves_the_original_stream_from_the_corpora_shards(tmp_path):
    rng = np.random.default_rng(4)
    fineweb = [tmp_path / "fineweb" / f"fineweb_{s}_000000.bin" for s in ("train", "val")]
    finemath = [tmp_path / "finemath" / "tokens" / s / "part_000.bin" for s in ("train", "val")]
    for path, dtype in (
        (fineweb[0], np.uint16),
        (fineweb[1], np.uint16),
        (finemath[0], np.int32),
        (finemath[1], np.int32),
    ):
        write_llmc_shard(path, rng.integers(1, 50257, size=600), dtype)
    data = TextDataModule(
        "fineweb",
        seq_len=15,
        batch_size=2,
        seed=7,
        data_root=str(tmp_path),
        extra_corpora=("finemath",),
        data_path="as_run",
        as_run_val_rows=4,
    )
    data.prepare_data()
    data.setup()
    x, y = next(iter(data.train_dataloader()))
    original = next(_original_generator([finemath[0], fineweb[0]], 15, 2, 7))  # the launcher lists FineMath first
    assert torch.equal(torch.cat((x, y[:, -1:]), 1), original.long())
    fineweb_val, fm_val = data.val_dataloader()
    # steps of 4 rows of 16 while 64 + 1 tokens remain past them: 9 in 600 values; FineMath's header count of 600
    # int32 tokens reads as 600 uint16: its first 300 tokens, each followed by a 0
    assert len(fineweb_val.dataset) == len(fm_val.dataset) == 4 * 9
    window, _ = fm_val.dataset[0]
    assert not window[1::2].any() and data.vocab_size == 50257  # FineMath validation as read: every other id a 0
    missing = TextDataModule("embedded_news", data_root=str(tmp_path), data_path="as_run")
    with pytest.raises(FileNotFoundError, match=r"llm\.c token shards; embedded_news"):
        missing.prepare_data()


def test_the_corpus_bpe_is_trained_on_its_training_split_deterministically_and_decodes_to_bytes(tmp_path, monkeypatch):
    """wiki_bpe2048: 2,048 ids, <|endoftext|> = 0, trained when a corpus is first prepared with it; the same split
    gives the same file; text and bytes round-trip; the MoT's byte table of each token is its decoded bytes."""
    from scaling_axes.datamodules.token_bytes import token_byte_table
    from scaling_axes.datamodules.tokenizers import corpus_bpe_file

    load_tokenizer.cache_clear()
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path / "a"))
    with pytest.raises(FileNotFoundError, match="preparing a corpus with it trains it"):
        load_tokenizer("wiki_bpe2048")
    meta = json.loads((prepare_corpus("embedded_wiki", "wiki_bpe2048") / "meta.json").read_text())
    assert (meta["vocab_size"], meta["eot_id"]) == (2048, 0) and meta["splits"]["train"]["tokens"] > 2_000_000
    first = corpus_bpe_file("wiki_bpe2048").read_text()
    tok = load_tokenizer("wiki_bpe2048")
    text = "The [[Anarchism]] page, ünïcode 日本 &amp; 1234"
    ids = tok.encode(text)
    assert tok.decode(ids) == text and tok.decode_bytes(ids) == text.encode("utf-8") and len(ids) < len(text)
    table = token_byte_table("utf8", 16, "right", "wiki_bpe2048")
    for token in ids:
        raw = list(tok.decode_bytes([token]))[:16]
        assert table[token, : len(raw)].tolist() == raw and set(table[token, len(raw) :].tolist()) <= {256}
    monkeypatch.setenv("SCALING_AXES_DATA", str(tmp_path / "b"))
    prepare_corpus("embedded_wiki", "wiki_bpe2048")
    assert corpus_bpe_file("wiki_bpe2048").read_text() == first
    load_tokenizer.cache_clear()
