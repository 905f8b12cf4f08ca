"""One LightningDataModule for every text corpus: random windows for training, fixed windows for validation.

Training windows are numbered globally: micro-batch b of rank r holds windows (b * world + r) * micro ... + micro - 1,
and window q is drawn from a generator seeded with (seed, q // 4096). So ranks see different windows, an optimizer
step sees the same global batch however it is split over devices and accumulation (a 2-process run and a 1-process
run with the same global batch train on the same tokens), and a run resumed at step s continues with exactly the
batches it would have drawn (micro-batch index s * grad-accumulation).
"""

from __future__ import annotations

from itertools import count
from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from scaling_axes.datamodules.as_run import AsRunStream, AsRunWindows
from scaling_axes.datamodules.corpora import check_tokenizer, default_data_root, open_split, prepare_corpus
from scaling_axes.datamodules.sources import CORPORA, corpus_spec, tokenizer_of
from scaling_axes.datamodules.tokenizers import load_tokenizer

RANDOM_BLOCK = 4096  # random-order windows drawn per generator seed


def _window(tokens: np.ndarray, start: int, seq_len: int) -> torch.Tensor:
    """The `seq_len + 1` tokens from `start`: the inputs are all but the last, the targets all but the first."""
    return torch.from_numpy(tokens[start : start + seq_len + 1].astype(np.int64))


def _in_vocabulary(ids: torch.Tensor, meta: dict, directory, split: str) -> torch.Tensor:
    """`ids`, after checking them against the vocabulary the split's meta.json declares (a corrupt file shows here)."""
    largest = int(ids.max())
    if largest >= meta["vocab_size"]:
        raise ValueError(
            f"{directory}/{split}.bin holds token id {largest}, outside the {meta['vocab_size']}-id vocabulary of "
            f"its meta.json ({meta['tokenizer']}): the file is corrupt; delete {directory} to tokenize again"
        )
    return ids


class RandomWindowBatches(IterableDataset):
    """Endless batches of `batch_size` windows of `seq_len + 1` tokens from one or more splits, from `start_batch` on.

    `order="random"`: each window starts at a uniformly random token of the splits put end to end. `order="epoch"`:
    the splits are cut into windows at stride `seq_len`, and every window is read exactly once per epoch, in an order
    shuffled per epoch. Either way the ranks take turns in one global stream of windows (module docstring).
    """

    def __init__(
        self,
        directory,
        split: str,
        seq_len: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        start_batch: int = 0,
        order: Literal["random", "epoch"] = "random",
        world_size: int = 1,
    ) -> None:
        super().__init__()
        if order not in ("random", "epoch"):
            raise ValueError(f"order={order!r}; allowed: 'random', 'epoch'")
        self.directories = list(directory) if isinstance(directory, (list, tuple)) else [directory]
        self.metas = []
        for d in self.directories:
            tokens, meta = open_split(d, split)
            self.metas.append(meta)
            if len(tokens) <= seq_len + 1:
                raise ValueError(f"split {split!r} of {d} has {len(tokens)} tokens, fewer than seq_len+1={seq_len + 1}")
        self.split, self.seq_len, self.batch_size = split, seq_len, batch_size
        self.seed, self.rank, self.start_batch, self.order, self.world_size = seed, rank, start_batch, order, world_size
        self._block: tuple[int, np.ndarray] | None = None  # the epoch's permutation, or a block of random draws

    def _starts(self, sources: list[np.ndarray]) -> np.ndarray:
        """Cumulative count of the window starts each source offers."""
        stride = 1 if self.order == "random" else self.seq_len
        return np.cumsum([(len(t) - self.seq_len - 1) // stride + 1 for t in sources])

    def _window_ids(self, total: int, index: int) -> np.ndarray:
        first = (index * self.world_size + self.rank) * self.batch_size
        ids = np.empty(self.batch_size, dtype=np.int64)
        for i, position in enumerate(range(first, first + self.batch_size)):
            block, offset = divmod(position, total if self.order == "epoch" else RANDOM_BLOCK)
            if self._block is None or self._block[0] != block:
                rng = np.random.default_rng([self.seed, block])
                draw = rng.permutation(total) if self.order == "epoch" else rng.integers(0, total, size=RANDOM_BLOCK)
                self._block = (block, draw)
            ids[i] = self._block[1][offset]
        return ids

    def batch(self, sources: list[np.ndarray], index: int) -> tuple[torch.Tensor, torch.Tensor]:
        cumulative = self._starts(sources)
        ids = self._window_ids(int(cumulative[-1]), index)
        source = np.searchsorted(cumulative, ids, side="right")
        offsets = ids - np.concatenate(([0], cumulative[:-1]))[source]
        stride = 1 if self.order == "random" else self.seq_len
        windows = torch.stack(
            [_window(sources[s], int(o) * stride, self.seq_len) for s, o in zip(source, offsets, strict=True)]
        )
        for index in set(source.tolist()):
            rows = torch.from_numpy(source == index)
            _in_vocabulary(windows[rows], self.metas[index], self.directories[index], self.split)
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()

    def __iter__(self):
        sources = [open_split(d, self.split)[0] for d in self.directories]
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        # DataLoader takes batches from its workers round-robin, so worker w serves batches w, w + W, ...
        for index in count(self.start_batch + worker_id, workers):
            yield self.batch(sources, index)


class FixedWindows(Dataset):
    """Consecutive non-overlapping windows of a split (the first `max_windows` if given)."""

    def __init__(self, directory, split: str, seq_len: int, max_windows: int | None = None) -> None:
        self.tokens, self.meta = open_split(directory, split)
        self.directory, self.split, self.seq_len = directory, split, seq_len
        available = (len(self.tokens) - 1) // seq_len
        if available == 0:
            raise ValueError(f"split {split!r} of {directory} is shorter than one window of {seq_len + 1} tokens")
        self.length = min(available, max_windows) if max_windows else available

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = _in_vocabulary(
            _window(self.tokens, i * self.seq_len, self.seq_len), self.meta, self.directory, self.split
        )
        return window[:-1], window[1:]


class TextDataModule(L.LightningDataModule):
    """A tokenized corpus (see `scaling_axes.datamodules.sources.CORPORA`) served as fixed-length windows.

    Args:
        corpus: corpus name, e.g. "openwebtext", "enwik8", "embedded_news" (the offline default).
        tokenizer: "gpt2", "neox" or "bytes"; default: the corpus's own.
        seq_len: tokens per window (the model sees seq_len inputs and predicts seq_len targets).
        batch_size: windows per micro-batch and device.
        val_windows: validation windows per evaluation (None: the whole split).
        eval_split: "val" or "test" for the validation loop.
        data_root: where tokenized corpora (and local raw corpora) live; default $SCALING_AXES_DATA or ./data.
        extra_corpora: corpora (same tokenizer) whose training splits join `corpus`'s and whose validation splits
            are evaluated separately (the MoT runs: FineWeb and FineMath).
        order: "random" windows, or "epoch" (every window once per epoch; see `RandomWindowBatches`).
        data_path: "fixed" (the above), or "as_run": the MoT original's loader with its quirks, on the corpora's
            llm.c shard files (`datamodules.as_run`; training order, re-reads and the uint16 view of int32 files),
            shuffled with `seed`, the extra corpora's files first; validation `as_run_val_rows` rows a step.
    """

    def __init__(
        self,
        corpus: str = "embedded_news",
        tokenizer: str | None = None,
        seq_len: int = 1024,
        batch_size: int = 8,
        val_windows: int | None = None,
        eval_split: str = "val",
        seed: int = 1234,
        data_root: str | None = None,
        tokenizer_path: str | None = None,
        num_workers: int = 0,
        extra_corpora: tuple[str, ...] = (),
        order: Literal["random", "epoch"] = "random",
        data_path: Literal["fixed", "as_run"] = "fixed",
        as_run_val_rows: int = 256,
    ) -> None:
        super().__init__()
        for name in (corpus, *extra_corpora):
            corpus_spec(name)  # an unknown name stops here, naming the corpora there are
        if data_path not in ("fixed", "as_run"):
            raise ValueError(f"data_path={data_path!r}; allowed: 'fixed', 'as_run'")
        self.save_hyperparameters()
        self.tokenizer = tokenizer_of(corpus, tokenizer)
        self.corpora = (corpus, *extra_corpora)
        self.directories: list = []
        self.meta: dict | None = None

    def prepare_data(self) -> None:
        if self.hparams.data_path == "as_run":
            self.shards()  # nothing to tokenize: the shard files are read as they are
            return
        for name in self.corpora:
            prepare_corpus(name, self.tokenizer, self.hparams.data_root, self.hparams.tokenizer_path)

    def shards(self) -> dict[str, dict[str, list]]:
        """Corpus -> split -> its llm.c shard files (data_path="as_run" reads nothing else)."""
        root = Path(self.hparams.data_root or default_data_root())
        found = {name: CORPORA[name].load(root) for name in self.corpora}
        missing = [name for name, splits in found.items() if not isinstance(splits.get("train"), list)]
        if missing:
            raise FileNotFoundError(
                f"data_path='as_run' reads llm.c token shards; {', '.join(missing)} under {root} "
                "has none (see scaling_axes.datamodules.corpora for the file names), or use data_path='fixed'"
            )
        return found

    def setup(self, stage: str | None = None) -> None:
        hp = self.hparams
        if hp.data_path == "as_run":
            self.as_run_files = self.shards()
            self.meta = {"vocab_size": load_tokenizer(self.tokenizer, hp.tokenizer_path).vocab_size, "splits": {}}
            return
        self.directories = [prepare_corpus(c, self.tokenizer, hp.data_root, hp.tokenizer_path) for c in self.corpora]
        for directory in self.directories:
            check_tokenizer(directory, self.tokenizer, hp.tokenizer_path)
        _, self.meta = open_split(self.directory, "train")

    @property
    def directory(self):
        """The primary corpus's directory."""
        return self.directories[0] if self.directories else None

    @property
    def val_names(self) -> list[str]:
        """Names of the validation sets, in dataloader order, when there are several."""
        return list(self.corpora) if len(self.corpora) > 1 else []

    @property
    def vocab_size(self) -> int:
        return self.meta["vocab_size"]

    def bytes_per_token(self, split: str | None = None) -> float | None:
        """UTF-8 bytes per token of a split (for bits per byte), None when unknown."""
        info = self.meta["splits"].get(split or self.hparams.eval_split, {})
        return info["bytes"] / info["tokens"] if info.get("bytes") else None

    def whole_splits(self) -> None:
        """Evaluate every window of the validation and test splits from here on (a run's final evaluation)."""
        self.hparams.val_windows = None

    def train_dataloader(self) -> DataLoader:
        rank, start = 0, 0
        if self.trainer is not None:  # resume: skip the batches the restored steps already consumed
            rank = self.trainer.global_rank
            start = self.trainer.global_step * self.trainer.accumulate_grad_batches
        world = self.trainer.world_size if self.trainer is not None else 1
        hp = self.hparams
        if hp.data_path == "as_run":
            accumulate = self.trainer.accumulate_grad_batches if self.trainer is not None else 1
            files = [f for name in (*self.corpora[1:], self.corpora[0]) for f in self.as_run_files[name]["train"]]
            stream = AsRunStream(
                files, hp.seq_len, hp.batch_size, hp.batch_size * accumulate * world, hp.seed, rank, world, start
            )
            return DataLoader(stream, batch_size=None, num_workers=min(hp.num_workers, 1))
        dataset = RandomWindowBatches(
            self.directories, "train", hp.seq_len, hp.batch_size, hp.seed, rank, start, hp.order, world
        )
        return DataLoader(dataset, batch_size=None, num_workers=hp.num_workers)

    def val_dataloader(self) -> DataLoader | list[DataLoader]:
        hp = self.hparams
        if hp.data_path == "as_run":
            sets = [
                AsRunWindows(self.as_run_files[c]["val"], hp.seq_len, hp.as_run_val_rows, hp.seed, hp.val_windows)
                for c in self.corpora
            ]
            loaders = [DataLoader(s, batch_size=hp.batch_size) for s in sets]
            return loaders if len(loaders) > 1 else loaders[0]
        loaders = [self._fixed_windows(self.hparams.eval_split, d) for d in self.directories]
        return loaders if len(loaders) > 1 else loaders[0]

    def test_dataloader(self) -> DataLoader:
        """The corpus's test split (enwik8's last 5M bytes); corpora without one (OpenWebText) raise."""
        return self._fixed_windows("test")

    @property
    def splits(self) -> list[str]:
        return list(self.meta["splits"])

    def _fixed_windows(self, split: str, directory=None) -> DataLoader:
        dataset = FixedWindows(directory or self.directory, split, self.hparams.seq_len, self.hparams.val_windows)
        return DataLoader(dataset, batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)
