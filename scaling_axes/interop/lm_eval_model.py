"""Any language model of this suite as an lm-eval model, registered as ``scaling-axes``.

    lm_eval.simple_evaluate(model="scaling-axes", model_args="checkpoint=runs/.../rmt_305m", tasks=[...])
    lm_eval.simple_evaluate(model=SuiteLM(model=module, tokenizer="gpt2"), tasks=[...])

`SuiteLM` is a `TemplateLM` (lm-eval does the context/continuation split and the empty-context prefix): it scores
token sequences in length-sorted, right-padded batches (a causal model never sees the padding to its right),
truncating from the left to the model's window; rolling log-likelihoods use lm-eval's own disjoint windows; greedy
generation stops at the task's stop strings. A checkpoint is a finished run's directory (``final.safetensors``
and ``config.json``; an older run's ``final.pt`` and ``config.yaml``), the weights inside one, or a Lightning
``.ckpt``; official Tokenformer weights load with ``official_weights=<path or hub id>`` and ``model=<preset>``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from torch import Tensor, nn
from tqdm.auto import tqdm

from scaling_axes.datamodules.sources import tokenizer_of
from scaling_axes.datamodules.tokenizers import Tokenizer, load_tokenizer
from scaling_axes.harness.training.rundir import (
    FINAL_WEIGHTS,
    check_tokenizer,
    final_weights,
    read_done,
    read_final_config,
)
from scaling_axes.io import CorruptFileError, load_state, load_torch, verify_checksum
from scaling_axes.modules import build_model
from scaling_axes.modules.architectures.layers import windowed
from scaling_axes.modules.tasks.lm import load_weights as fit_weights


def load_checkpoint(path: str | Path) -> tuple[nn.Module, Tokenizer]:
    """(model with trained weights, its tokenizer) from a run directory of the runner, its final weights, or a
    Lightning ``.ckpt`` of the runner or of `fit` (LightningCLI), which carries its model's and its data's settings."""
    path = Path(path)
    if path.suffix == ".ckpt":
        checkpoint, hparams, data = read_lightning_checkpoint(path)
        fix = CHECKPOINT_FIX
        model = build_model(hparams["model"], **(hparams.get("model_overrides") or {}))
        state = {k.removeprefix("model."): v for k, v in checkpoint["state_dict"].items() if k.startswith("model.")}
    else:
        path = final_weights(path) if path.is_dir() else path
        if not path.exists():
            if (path.parent / "done.json").is_file():  # a run that keeps no weights says why
                read_done(path.parent / "done.json", weights=True)
            raise FileNotFoundError(f"no trained weights at {path}: train the run first (it writes {FINAL_WEIGHTS})")
        fix = f"delete {path.parent / 'done.json'} and rerun the run to write it again"
        state = load_state(path, fix)  # first: a crafted pickle is named as such
        if not (path.parent / "done.json").is_file():
            raise FileNotFoundError(
                f"{path.parent} holds no finished run (no done.json): train it first, or rerun its command to finish it"
            )
        read_done(path.parent / "done.json", weights=True)  # its record and final weights are what the run wrote
        data = read_final_config(path.parent)
        model = build_model(data["model"], **(data.get("overrides") or {}))
    load_weights(model, state, path, fix)
    name = tokenizer_of(data["corpus"], data.get("tokenizer"))
    tokenizer = load_tokenizer(name, data.get("tokenizer_path") or (data.get("data") or {}).get("tokenizer_path"))
    check_tokenizer(data, tokenizer, path.parent)
    return model, tokenizer


CHECKPOINT_FIX = "pass a checkpoint that a run of the suite or `python -m scaling_axes fit` wrote"


def read_lightning_checkpoint(path: Path) -> tuple[dict, dict, dict]:
    """(checkpoint, its LanguageModel's hyper_parameters, its data's settings) of a Lightning `.ckpt` of a run or of
    `fit`: read as tensors and plain data (a crafted pickle is named as such), its checksum verified, a model named
    (a run's checkpoint without data settings: its run's config)."""
    checkpoint = load_torch(path, CHECKPOINT_FIX)
    verify_checksum(path, CHECKPOINT_FIX)
    hparams = checkpoint.get("hyper_parameters") if isinstance(checkpoint, dict) else None
    if not isinstance(hparams, dict) or "model" not in hparams:
        raise CorruptFileError(
            f"{path} names no model in its hyper_parameters: not a checkpoint of the suite's LanguageModel; "
            f"{CHECKPOINT_FIX}"
        )
    return checkpoint, hparams, checkpoint.get("datamodule_hyper_parameters") or read_final_config(path.parent.parent)


def load_weights(model: nn.Module, state: object, path: Path, fix: str) -> None:
    """`state` (read from `path`) into `model` (`modules.tasks.lm.load_weights`, which names each tensor that does not
    fit), or an error naming the file and the fix when it is not the model's weights."""
    try:
        fit_weights(model, state, str(path))
    except ValueError as error:  # names the file and each tensor that does not fit
        raise CorruptFileError(f"{error}; {fix}") from error
    except (RuntimeError, TypeError, AttributeError) as error:  # not a state dict at all
        first = (str(error).splitlines() or [""])[0]
        raise CorruptFileError(f"{path} does not hold weights of {type(model).__name__} ({first}); {fix}") from error


@register_model("scaling-axes")
class SuiteLM(TemplateLM):
    """lm-eval's view of a model that maps token ids [batch, seq] to next-token logits [batch, seq, vocab]."""

    def __init__(
        self,
        model: nn.Module | str | None = None,
        tokenizer: Tokenizer | str | None = None,
        checkpoint: str | None = None,
        official_weights: str | None = None,
        batch_size: int | str | None = 8,
        max_length: int | None = None,
        device: str | None = None,
        **_: Any,  # lm-eval passes max_batch_size and others we do not use
    ) -> None:
        super().__init__()
        if checkpoint is not None:
            model, trained_with = load_checkpoint(checkpoint)
            tokenizer = tokenizer or trained_with
        elif isinstance(model, str):
            name, model = model, build_model(model)
            if official_weights is not None:
                from scaling_axes.modules.architectures.official_weights import load_official_tokenformer

                load_official_tokenformer(model, official_weights)
            tokenizer = tokenizer or ("neox" if name.startswith("tokenformer") else "gpt2")
        if not isinstance(model, nn.Module) or tokenizer is None:
            raise ValueError("SuiteLM needs checkpoint=<run dir>, or model=<module or preset> with tokenizer=<name>")
        if getattr(model, "predicts_bytes", False):
            raise ValueError("this model predicts bytes, not tokens: lm-eval's token log-likelihoods do not apply")
        self.tokenizer = load_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer
        if self.tokenizer.eot_id is None:
            raise ValueError(f"tokenizer {self.tokenizer.name!r} has no end-of-text token, which lm-eval needs")
        if self.tokenizer.vocab_size > model.config.vocab_size:
            raise ValueError(
                f"tokenizer {self.tokenizer.name} has {self.tokenizer.vocab_size} ids but the model's vocabulary is "
                f"{model.config.vocab_size}: pass the tokenizer the model was trained with"
            )
        if device is None or (str(device).startswith("cuda") and not torch.cuda.is_available()):
            device = "cuda" if torch.cuda.is_available() else "cpu"  # lm-eval's CLI says cuda even without a GPU
        self._device = torch.device(device)
        self.model = model.to(self._device).eval()
        self.batch_size = 8 if batch_size in (None, "auto") else int(str(batch_size).split(":")[0])
        self._max_length = max_length or model.config.max_seq_len

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eot_id

    @property
    def max_length(self) -> int:
        return self._max_length

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs: Any) -> list[int]:
        return self.tokenizer.encode(string)

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens)

    @torch.inference_mode()
    def _log_probs(self, idx: Tensor) -> Tensor:
        autocast = torch.autocast("cuda", torch.bfloat16) if self._device.type == "cuda" else contextlib.nullcontext()
        with autocast:
            logits = windowed(self.model, idx.to(self._device), self.model.config.max_seq_len)
        logits = logits[..., : self.tokenizer.vocab_size]  # no padded id of the model's vocabulary is a token
        return F.log_softmax(logits.float(), dim=-1)  # stays on the device: only the scored positions come back

    def _loglikelihood_tokens(
        self, requests: list[tuple[tuple[str, str], list[int], list[int]]], disable_tqdm: bool = False, **_: Any
    ) -> list[tuple[float, bool]]:
        """Sum of log p(continuation | context) and whether every continuation token is the argmax: the context
        truncated from the left to `max_length` + 1 tokens with the continuation, as lm-eval's `hf` model does, and
        a continuation longer than that kept whole (lm-eval's `hf` refuses it), its tokens scored window by window
        from its end (`_log_probs`)."""
        sequences = [
            (context + continuation)[-(max(self.max_length, len(continuation)) + 1) :]
            for _, context, continuation in requests
        ]
        order = sorted(range(len(requests)), key=lambda i: -len(sequences[i]))
        results: list[tuple[float, bool]] = [(0.0, True)] * len(requests)
        batches = range(0, len(order), self.batch_size)
        for start in tqdm(batches, desc="scoring requests", unit=" batches", disable=disable_tqdm):
            chunk = order[start : start + self.batch_size]
            for i, log_probs in zip(chunk, self._rows_log_probs([sequences[i][:-1] for i in chunk]), strict=True):
                scored = len(requests[i][2])
                targets = torch.tensor(sequences[i][-scored:], device=log_probs.device)
                rows = log_probs[-scored:]
                greedy = bool((rows.argmax(-1) == targets).all())
                results[i] = (rows.gather(-1, targets[:, None]).sum().item(), greedy)
                if requests[i][0] is not None:
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], results[i])
        return results

    def _rows_log_probs(self, rows: list[list[int]]) -> list[Tensor]:
        """Each row's log-probabilities [its length, vocabulary]: rows within the model's window batched, padded on
        the right (a causal model never sees the padding to its right); with a longer one, each row alone, so that
        its windows are cut from its own end."""
        if max(map(len, rows)) > self.model.config.max_seq_len:
            return [self._log_probs(torch.tensor([row]))[0] for row in rows]
        idx = torch.full((len(rows), max(map(len, rows))), self.eot_token_id, dtype=torch.long)
        for r, row in enumerate(rows):
            idx[r, : len(row)] = torch.tensor(row)
        log_probs = self._log_probs(idx)
        return [log_probs[r, : len(row)] for r, row in enumerate(rows)]

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Total log-likelihood of each text, in lm-eval's disjoint windows of the model's length."""
        windows, owners = [], []
        for owner, request in enumerate(requests):
            tokens = self.tok_encode(request.args[0])
            for context, target in map(
                make_disjoint_window, get_rolling_token_windows(tokens, self.prefix_token_id, self.max_length, 1)
            ):
                windows.append((None, context, target))
                owners.append(owner)
        totals = [0.0] * len(requests)
        for owner, (log_likelihood, _) in zip(owners, self._loglikelihood_tokens(windows), strict=True):
            totals[owner] += log_likelihood
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy continuation of each context until a stop string, end-of-text or `max_gen_toks` tokens."""
        outputs = []
        for request in requests:
            context, options = request.args
            if options.get("do_sample"):
                raise ValueError("SuiteLM generates greedily only (do_sample=True was asked for)")
            stops = options.get("until") or [self.tok_decode([self.eot_token_id])]
            stops = [stops] if isinstance(stops, str) else stops
            tokens, generated = self.tok_encode(context), []
            for _ in range(options.get("max_gen_toks", 256)):
                window = torch.tensor([(tokens + generated)[-self.max_length :]])
                next_token = int(self._log_probs(window)[0, -1].argmax())
                if next_token == self.eot_token_id:
                    break
                generated.append(next_token)
                if any(stop in self.tok_decode(generated) for stop in stops):
                    break
            text = self.tok_decode(generated)
            outputs.append(min((text.split(stop)[0] for stop in stops), key=len))
        return outputs
