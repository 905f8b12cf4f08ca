"""Bytes of tokens for the Mixture of Tokenizers: vocabularies, tables, pulling against a slow reference."""

import pytest
import torch

from scaling_axes.datamodules.byte_slots import pull_from_left, pull_from_right
from scaling_axes.datamodules.token_bytes import byte_vocabulary, token_byte_table
from scaling_axes.datamodules.tokenizers import load_tokenizer

PAD, EOT = 9, 10


def slow_pull_left(slots: list[list[list[int]]]) -> list[list[list[int]]]:
    """Per row and token: the document's real bytes so far (since the last end-of-text), the last S, right-aligned."""
    out = []
    for row in slots:
        seen, pulled = [], []
        for token in row:
            if all(b == EOT for b in token):
                seen = []
                pulled.append(token)
                continue
            seen += [b for b in token if b not in (PAD, EOT)]
            kept = seen[-len(token) :]
            pulled.append([PAD] * (len(token) - len(kept)) + kept)
        out.append(pulled)
    return out


def slow_pull_right(slots: list[list[list[int]]]) -> list[list[list[int]]]:
    out = []
    for row in slots:
        pulled = []
        for t, token in enumerate(row):
            if all(b == EOT for b in token):
                pulled.append(token)
                continue
            following = []
            for later in row[t:]:
                if all(b == EOT for b in later):
                    break
                following += [b for b in later if b not in (PAD, EOT)]
            kept = following[: len(token)]
            pulled.append(kept + [PAD] * (len(token) - len(kept)))
        out.append(pulled)
    return out


def random_slots(batch: int, seq: int, width: int, padding: str, generator: torch.Generator) -> torch.Tensor:
    lengths = torch.randint(0, width + 1, (batch, seq), generator=generator)
    symbols = torch.randint(0, PAD, (batch, seq, width), generator=generator)
    slot = torch.arange(width)
    real = slot >= width - lengths[..., None] if padding == "left" else slot < lengths[..., None]
    slots = torch.where(real, symbols, PAD)
    eot = torch.rand(batch, seq, generator=generator) < 0.15
    return torch.where(eot[..., None], EOT, slots)


@pytest.mark.parametrize("width", [1, 3, 6])
@pytest.mark.parametrize("batch,seq", [(1, 1), (1, 9), (4, 17)])
def test_pulling_matches_the_slow_reference(batch: int, seq: int, width: int) -> None:
    generator = torch.Generator().manual_seed(batch * 100 + seq * 10 + width)
    for _ in range(5):
        left = random_slots(batch, seq, width, "left", generator)
        assert pull_from_left(left, PAD, EOT).tolist() == slow_pull_left(left.tolist())
        right = random_slots(batch, seq, width, "right", generator)
        assert pull_from_right(right, PAD, EOT).tolist() == slow_pull_right(right.tolist())


def test_pulling_on_a_batch_equals_pulling_each_row() -> None:
    generator = torch.Generator().manual_seed(7)
    slots = random_slots(6, 20, 4, "left", generator)
    rows = torch.cat([pull_from_left(slots[i : i + 1], PAD, EOT) for i in range(6)])
    assert torch.equal(pull_from_left(slots, PAD, EOT), rows)


def test_the_articles_example() -> None:
    """bpt 6, ':' is pad: [Hi] [,] [_my] -> [::::Hi] [:::Hi,] [Hi,_my] (MoT reference 1.4), bounded by an EOT."""
    h, i, comma, space, m, y = range(6)
    left = torch.tensor(
        [[[PAD] * 4 + [h, i], [PAD] * 5 + [comma], [PAD] * 3 + [space, m, y], [EOT] * 6, [PAD] * 5 + [y]]]
    )
    expected = [[[PAD] * 4 + [h, i], [PAD] * 3 + [h, i, comma], [h, i, comma, space, m, y], [EOT] * 6, [PAD] * 5 + [y]]]
    assert pull_from_left(left, PAD, EOT).tolist() == expected
    right = torch.tensor([[[h, i] + [PAD] * 4, [comma] + [PAD] * 5, [space, m, y] + [PAD] * 3, [EOT] * 6]])
    assert pull_from_right(right, PAD, EOT).tolist() == [
        [[h, i, comma, space, m, y], [comma, space, m, y, PAD, PAD], [space, m, y, PAD, PAD, PAD], [EOT] * 6]
    ]


def test_the_original_character_vocabulary() -> None:
    """456 characters of GPT-2's per-token decodes + pad + end-of-text = 458 (reference 1.1); head padded to 512."""
    chars = byte_vocabulary("chars")
    assert (chars.size, chars.pad_id, chars.eot_id, chars.head_size) == (458, 456, 457, 512)
    utf8 = byte_vocabulary("utf8")
    assert (utf8.size, utf8.pad_id, utf8.eot_id, utf8.head_size) == (258, 256, 257, 384)
    with pytest.raises(KeyError, match="available: chars, utf8"):
        byte_vocabulary("latin1")


def test_tables_pad_and_truncate_as_the_reference() -> None:
    tok = load_tokenizer("gpt2")
    (invite,) = tok.encode(" invite")
    left, right = token_byte_table("chars", 16, "left"), token_byte_table("chars", 16, "right")
    assert left[invite].tolist() == [456] * 9 + [ord(c) for c in " invite"]  # ASCII ids are the code points
    assert right[invite].tolist() == [ord(c) for c in " invite"] + [456] * 9
    assert left[tok.eot_id].tolist() == right[tok.eot_id].tolist() == [457] * 16
    texts = [tok.decode([i]) for i in range(tok.vocab_size - 1)]
    long_token = max(range(len(texts)), key=lambda i: len(texts[i]))
    assert len(texts[long_token]) == 66  # the notebook's maximum; input keeps the last 16, targets the first 16
    ascii_ids = [ord(c) for c in texts[long_token]]
    assert left[long_token].tolist() == ascii_ids[-16:] and right[long_token].tolist() == ascii_ids[:16]
    utf8 = token_byte_table("utf8", 16, "right")
    partial = next(i for i, t in enumerate(texts) if "\ufffd" in t and len(tok.decode_bytes([i])) == 1)
    assert utf8[partial, 0].item() == tok.decode_bytes([partial])[0] >= 128  # a real byte, not U+FFFD
    with pytest.raises(ValueError, match="padding='middle'"):
        token_byte_table("chars", 16, "middle")


@pytest.mark.parametrize("vocabulary", ["chars", "utf8"])
def test_synthetic_tables_have_the_real_ones_vocabulary_shape_and_padding(vocabulary) -> None:
    """For timing without the tokenizer file: the same vocabulary size (456 chars is checked against GPT-2 here),
    shape and padding side as the real tables, and end-of-text where it belongs."""
    from scaling_axes.datamodules.byte_slots import synthetic_token_byte_table

    real = byte_vocabulary(vocabulary)
    assert byte_vocabulary(vocabulary, synthetic=True) == real
    for padding in ("left", "right"):
        table = token_byte_table(vocabulary, 16, padding)
        synthetic = synthetic_token_byte_table(vocabulary, 16, padding)
        assert synthetic.shape == table.shape and synthetic.dtype == table.dtype
        assert (synthetic[50256] == real.eot_id).all()
        real_slots = (synthetic[:50256] != real.pad_id).int()
        assert ((real_slots.diff(dim=1) >= 0) if padding == "left" else (real_slots.diff(dim=1) <= 0)).all()
        assert 4.0 < real_slots.sum(1).float().mean() < 5.0
        assert int(synthetic[:50256][real_slots.bool()].max()) < real.symbols
