"""The card is the model (issue 84): each statement an export's card makes about its size, window and padded targets
is checked against the loaded export. The card said a longer forward was refused where the remote code windows it,
counted a GPT-NeoX's parameters before its vocabulary was cut, and said nothing of GPT-NeoX's lack of a window or of
how either kind scores a padded batch's first real token."""

import re

import pytest
import torch
import torch.nn.functional as F

from scaling_axes.interop.model_card import DROPS_FIRST_TARGET, NO_WINDOW, SCORES_FIRST_TARGET, WINDOWED
from tests.test_export import EXAMPLES, EXPORTED, _finished_run, _loaded, by_model

FAST = ("transformer_nope", "rmt")  # one card of each kind in `make test`; every other example's in the slow set


@pytest.fixture
def carded(request, tmp_path):
    """(the loaded export, its card, the suite model's window) of example `request.param`, on GPT-2's tokenizer (a
    MoT's byte tables are its example's)."""
    from scaling_axes.interop.export import export

    example = EXAMPLES[request.param]
    padded = {} if example.tokenizer == "gpt2" else {"vocab_size": 50304}  # rows past the tokenizer's, cut on export
    model, run = _finished_run(tmp_path, example.preset, {**example.overrides, **padded}, "gpt2")
    export(run, tmp_path / "hf")
    return _loaded(tmp_path / "hf"), (tmp_path / "hf" / "README.md").read_text(), model.config.max_seq_len


@pytest.mark.parametrize("carded", by_model(EXPORTED, FAST), indirect=True)
def test_the_cards_size_is_the_exported_tensors_and_its_window_what_the_export_does(carded):
    hf, card, window = carded
    stated = int(re.search(r"([\d,]+) parameters in the exported tensors", card).group(1).replace(",", ""))
    assert stated == sum(p.numel() for p in hf.parameters())  # after the vocabulary's padded rows were cut
    assert re.search(rf"windows? of {window} tokens", card)
    ids = torch.randint(0, hf.config.vocab_size, (1, window + 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        whole, last = hf(ids, use_cache=False).logits[0, -1], hf(ids[:, -window:], use_cache=False).logits[0, -1]
    windowed = WINDOWED.format(window=window) in card
    assert windowed != (NO_WINDOW in card)  # the card says exactly one of the two
    assert torch.allclose(whole, last, atol=1e-5) == windowed


@pytest.mark.parametrize("carded", by_model(EXPORTED, FAST), indirect=True)
def test_the_card_says_how_a_padded_batchs_first_real_token_is_scored(carded):
    """A left-padded batch with -100 at the padding: the loss the card says, against the sequences' own (each row
    alone, every target after its first token, the mean over all of them)."""
    hf, card, _ = carded
    rows = [torch.arange(5, 17), torch.arange(40, 45)]
    length = max(len(r) for r in rows)
    ids = torch.stack([torch.cat((torch.zeros(length - len(r), dtype=torch.long), r)) for r in rows])
    mask = torch.stack([torch.cat((torch.zeros(length - len(r)), torch.ones(len(r)))).long() for r in rows])
    labels = ids.masked_fill(mask == 0, -100)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        own_terms = [F.cross_entropy(hf(r[None]).logits[0, :-1], r[1:], reduction="sum") for r in rows]
        own = sum(own_terms) / sum(len(r) - 1 for r in rows)
        loss = hf(ids, attention_mask=mask, labels=labels, position_ids=positions).loss
        first = labels.clone()
        first[1, length - len(rows[1])] = -100  # the padded row's first real token
        without_first = hf(ids, attention_mask=mask, labels=first, position_ids=positions).loss
    assert (DROPS_FIRST_TARGET in card) != (SCORES_FIRST_TARGET in card)
    torch.testing.assert_close(without_first, own, atol=1e-4, rtol=1e-4)
    assert torch.allclose(loss, own, atol=1e-4) == (DROPS_FIRST_TARGET in card)
