"""The MoT original's data path, reproduced with its quirks (`data_path="as_run"`; MoT reference 4.3, 6.2, 6.3).

`scaled-pre-train/train_gpt.py` (`_load_data_shard`, `distributed_data_generator`) trained on llm.c shard files:
- the file list (FineMath's token files, then FineWeb's shards, each sorted) shuffled with `random.seed(seed)`;
- every file read as uint16 (`"bytes/" in file.name` never holds for a basename): the int32 FineMath files come out
  as their first header-count uint16 values, each token followed by a 0 (GPT-2's "!");
- one position into the concatenation of the files loaded so far, which advances by B (T + 1) tokens per step of B
  rows; when fewer than B (T + 1) + 1 tokens remain past it, the next file is appended and the position returns to
  0, so the k-th pass re-reads files 1..k from the start;
- rank r of W takes rows r B / W ... (r + 1) B / W of each step's B rows of T + 1 tokens.
The validation sets went through the same generator (8 GPUs x 32 rows a step) until their files ran out.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from scaling_axes.datamodules.local_files import LLMC_MAGIC

HEADER_INTS = 256


def read_as_run(path: Path) -> np.ndarray | None:
    """A shard as `_load_data_shard` read it: header-count uint16 values after the 256-int32 header, whatever the
    file's dtype. None for a file whose header fails the original's checks (it skipped those)."""
    header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    if len(header) < HEADER_INTS or header[0] != LLMC_MAGIC or header[1] != 1:
        return None
    return np.memmap(path, dtype=np.uint16, mode="r", offset=header.nbytes, shape=(int(header[2]),))


def shuffled(files: Sequence[Path], seed: int) -> list[Path]:
    """The file list in the original's order: `random.seed(seed); random.shuffle(files)`."""
    order = list(files)
    random.Random(seed).shuffle(order)
    return order


class ConcatenatedShards:
    """The files loaded so far, end to end, without copying them (the original's `torch.cat`)."""

    def __init__(self, files: Sequence[Path]) -> None:
        self.pending = iter(files)
        self.shards: list[np.ndarray] = []
        self.ends: list[int] = []

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    def load_next(self) -> None:
        """Append the next readable file; the list running out ends the stream, as it ended the original's."""
        for path in self.pending:
            if (tokens := read_as_run(path)) is not None:
                self.shards.append(tokens)
                self.ends.append(len(self) + len(tokens))
                return
        raise StopIteration

    def read(self, start: int, count: int) -> np.ndarray:
        pieces, position = [], start
        for shard, end in zip(self.shards, self.ends, strict=True):
            begin = end - len(shard)
            if position < end and position < start + count:
                pieces.append(shard[position - begin : min(end, start + count) - begin])
                position = min(end, start + count)
        return np.concatenate(pieces)


class AsRunStream(IterableDataset):
    """The original's training batches for this rank, as micro-batches of `micro_batch` rows from `start_batch` on:
    micro-batch b is piece b % accumulate of step b // accumulate, where each rank's B / W rows of a step are split
    into `accumulate` consecutive pieces."""

    def __init__(
        self,
        files: Sequence[Path],
        seq_len: int,
        micro_batch: int,
        global_batch: int,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        start_batch: int = 0,
    ) -> None:
        super().__init__()
        per_rank, remainder = divmod(global_batch, world_size)
        if remainder or per_rank % micro_batch:
            raise ValueError(
                f"a global batch of {global_batch} rows does not split into {world_size} ranks of "
                f"micro-batches of {micro_batch}"
            )
        self.files, self.seq_len, self.micro_batch, self.global_batch = (
            shuffled(files, seed),
            seq_len,
            micro_batch,
            global_batch,
        )
        self.rank, self.world_size, self.start_batch = rank, world_size, start_batch
        self.accumulate = per_rank // micro_batch

    def steps(self) -> Iterator[tuple[ConcatenatedShards, int]]:
        """(loaded shards, position) of every step, as the original's loop advances them."""
        shards, position, step_tokens = ConcatenatedShards(self.files), 0, self.global_batch * (self.seq_len + 1)
        shards.load_next()
        while True:
            if position + step_tokens + 1 >= len(shards):
                try:
                    shards.load_next()
                except StopIteration:
                    return
                position = 0
            yield shards, position
            position += step_tokens

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        worker = get_worker_info()
        if worker is not None and worker.num_workers > 1:
            raise ValueError("data_path='as_run' is one sequential stream: use num_workers <= 1")
        row = self.seq_len + 1
        first_step, first_piece = divmod(self.start_batch, self.accumulate)
        for step, (shards, position) in enumerate(self.steps()):
            if step < first_step:
                continue
            for piece in range(first_piece if step == first_step else 0, self.accumulate):
                first_row = (self.rank * self.accumulate + piece) * self.micro_batch
                tokens = shards.read(position + first_row * row, self.micro_batch * row).astype(np.int64)
                windows = torch.from_numpy(tokens).view(self.micro_batch, row)
                yield windows[:, :-1].contiguous(), windows[:, 1:].contiguous()
        raise RuntimeError(
            f"the as-run stream of {len(self.files)} files ran out (the original stopped there too: it "
            "never cycled its files); train for fewer steps or add shards"
        )


class AsRunWindows(Dataset):
    """A validation set as the original's generator served it: the windows of `rows_per_step`-row steps over the
    files as read (so FineMath's uint16 view) until they ran out, the first `max_windows` of them."""

    def __init__(
        self, files: Sequence[Path], seq_len: int, rows_per_step: int, seed: int, max_windows: int | None = None
    ) -> None:
        stream = AsRunStream(files, seq_len, rows_per_step, rows_per_step, seed)
        self.row, self.starts = seq_len + 1, []
        for shards, position in stream.steps():
            self.starts += [position + k * self.row for k in range(rows_per_step)]
            self.shards = shards
            if max_windows and len(self.starts) >= max_windows:
                break
        if not self.starts:
            raise ValueError(
                f"the validation files {[str(f) for f in files]} hold less than one step of "
                f"{rows_per_step} x {self.row} tokens"
            )
        self.starts = self.starts[:max_windows] if max_windows else self.starts

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        window = torch.from_numpy(self.shards.read(self.starts[i], self.row).astype(np.int64))
        return window[:-1], window[1:]
