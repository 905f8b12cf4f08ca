"""One LightningDataModule for every text corpus: random windows for training, fixed windows for validation.

Training batch b on rank r is drawn from a generator seeded with (seed, r, b), so ranks see different windows, and a
run resumed at step s continues with exactly the batches it would have drawn (batch index s * grad-accumulation).
"""

from __future__ import annotations

from itertools import count

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from datamodules.corpora import CORPORA, open_split, prepare_corpus


def _window(tokens: np.ndarray, start: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    chunk = torch.from_numpy(tokens[start : start + seq_len + 1].astype(np.int64))
    return chunk[:-1], chunk[1:]


class RandomWindowBatches(IterableDataset):
    """Endless batches of `batch_size` random windows of `seq_len + 1` tokens, from batch `start_batch` on."""

    def __init__(
        self,
        directory,
        split: str,
        seq_len: int,
        batch_size: int,
        seed: int,
        rank: int = 0,
        start_batch: int = 0,
    ) -> None:
        super().__init__()
        tokens, _ = open_split(directory, split)
        if len(tokens) <= seq_len + 1:
            raise ValueError(
                f"split {split!r} of {directory} has {len(tokens)} tokens, fewer than seq_len+1={seq_len + 1}"
            )
        self.directory, self.split, self.seq_len, self.batch_size = directory, split, seq_len, batch_size
        self.seed, self.rank, self.start_batch = seed, rank, start_batch

    def batch(self, tokens: np.ndarray, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, self.rank, index])
        starts = rng.integers(0, len(tokens) - self.seq_len - 1, size=self.batch_size, endpoint=True)
        inputs, targets = zip(*(_window(tokens, int(s), self.seq_len) for s in starts), strict=True)
        return torch.stack(inputs), torch.stack(targets)

    def __iter__(self):
        tokens, _ = open_split(self.directory, self.split)
        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        # DataLoader takes batches from its workers round-robin, so worker w serves batches w, w + W, ...
        for index in count(self.start_batch + worker_id, workers):
            yield self.batch(tokens, index)


class FixedWindows(Dataset):
    """Consecutive non-overlapping windows of a split (the first `max_windows` if given)."""

    def __init__(self, directory, split: str, seq_len: int, max_windows: int | None = None) -> None:
        self.tokens, _ = open_split(directory, split)
        self.seq_len = seq_len
        available = (len(self.tokens) - 1) // seq_len
        if available == 0:
            raise ValueError(f"split {split!r} of {directory} is shorter than one window of {seq_len + 1} tokens")
        self.length = min(available, max_windows) if max_windows else available

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _window(self.tokens, i * self.seq_len, self.seq_len)


class TextDataModule(L.LightningDataModule):
    """A tokenized corpus (see `datamodules.corpora.CORPORA`) served as fixed-length windows.

    Args:
        corpus: corpus name, e.g. "openwebtext", "enwik8", "embedded_news" (the offline default).
        tokenizer: "gpt2", "neox" or "bytes"; default: the corpus's own.
        seq_len: tokens per window (the model sees seq_len inputs and predicts seq_len targets).
        batch_size: windows per micro-batch and device.
        val_windows: validation windows per evaluation (None: the whole split).
        eval_split: "val" or "test" for the validation loop.
        data_root: where tokenized corpora (and local raw corpora) live; default $SCALING_AXES_DATA or ./data.
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
    ) -> None:
        super().__init__()
        if corpus not in CORPORA:
            raise KeyError(f"unknown corpus {corpus!r}; available: {', '.join(CORPORA)}")
        self.save_hyperparameters()
        self.tokenizer = tokenizer or CORPORA[corpus].default_tokenizer
        self.directory = None
        self.meta: dict | None = None

    def prepare_data(self) -> None:
        prepare_corpus(self.hparams.corpus, self.tokenizer, self.hparams.data_root, self.hparams.tokenizer_path)

    def setup(self, stage: str | None = None) -> None:
        self.directory = prepare_corpus(
            self.hparams.corpus, self.tokenizer, self.hparams.data_root, self.hparams.tokenizer_path
        )
        _, self.meta = open_split(self.directory, "train")

    @property
    def vocab_size(self) -> int:
        return self.meta["vocab_size"]

    def bytes_per_token(self, split: str | None = None) -> float | None:
        """UTF-8 bytes per token of a split (for bits per byte), None when unknown."""
        info = self.meta["splits"][split or self.hparams.eval_split]
        return info["bytes"] / info["tokens"] if info.get("bytes") else None

    def train_dataloader(self) -> DataLoader:
        rank, start = 0, 0
        if self.trainer is not None:  # resume: skip the batches the restored steps already consumed
            rank = self.trainer.global_rank
            start = self.trainer.global_step * self.trainer.accumulate_grad_batches
        dataset = RandomWindowBatches(
            self.directory,
            "train",
            self.hparams.seq_len,
            self.hparams.batch_size,
            self.hparams.seed,
            rank,
            start,
        )
        return DataLoader(dataset, batch_size=None, num_workers=self.hparams.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._fixed_windows(self.hparams.eval_split)

    def test_dataloader(self) -> DataLoader:
        """The corpus's test split (enwik8's last 5M bytes); corpora without one (OpenWebText) raise."""
        return self._fixed_windows("test")

    @property
    def splits(self) -> list[str]:
        return list(self.meta["splits"])

    def _fixed_windows(self, split: str) -> DataLoader:
        dataset = FixedWindows(self.directory, split, self.hparams.seq_len, self.hparams.val_windows)
        return DataLoader(dataset, batch_size=self.hparams.batch_size, num_workers=self.hparams.num_workers)
