"""Greedy generation of an exported model with and without its key/value cache:
``python -m scaling_axes bench-generate`` -> ``results/bench_generate.csv``.

Each language-model architecture, at one small shape (4 layers, width 128, a 1024-token window), runs as the
remote-code `transformers` model an export loads (`interop/hf_modeling.py`, its weights as initialised: generation
time does not depend on them), on the CPU unless told otherwise. It generates 128 and 512 tokens after a 16-token
prompt, forced to its full length, once with `use_cache=True` and once without; the row gives tokens per second
(new tokens over the wall time of `generate`, after one short untimed call) and, on the cached row, the speedup.
Without a cache each step runs the whole sequence so far; with it, only the new token.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from scaling_axes.benchmarks.common import check_options
from scaling_axes.io import write_csv

WIDTH = {"n_layer": 4, "d_model": 128, "n_head": 4, "max_seq_len": 1024, "vocab_size": 4096}
MODELS = {  # architecture -> (preset, overrides): one shape, the architecture's own fields at their presets'
    "transformer": ("transformer_124m", WIDTH),
    "transformer_rmt_paper": ("transformer_rmt_49m", WIDTH),
    "tokenformer": ("tokenformer_124m", {**WIDTH, "qkv_tokens": 128, "proj_tokens": 128, "ffn_tokens": 512}),
    "rmt": (
        "rmt_46m",
        {"n_layer": 4, "d_key": 12, "d_value": 32, "rank": 4, "d_ff": 512, "vocab_size": 4096, "max_seq_len": 1024},
    ),
    "mot": (
        "mot_concat_noop_256_48",
        {
            **{k: v for k, v in WIDTH.items() if k != "vocab_size"},
            "head_dim": 32,
            "attention_free_layers": (2,),
            "value_embeddings": 1,
            "d_token": 64,
            "d_byte": 16,
            "vocab_size": 50257,
            "byte_table": "synthetic",  # random bytes of GPT-2's tokens: timing only
        },
    ),
    "highway": ("highway_transformer_191m", WIDTH),
    "depthwise_lstm": ("depthwise_lstm_233m", WIDTH),
    "hierarchical_aggregation": ("hierarchical_aggregation_165m", {**WIDTH, "n_layer": 6}),
}
NEW_TOKENS, PROMPT = (128, 512), 16
COLUMNS = ("machine", "torch", "transformers", "architecture", "preset", "prompt_tokens", "new_tokens", "cache")
COLUMNS += ("seconds", "tokens_per_s", "speedup")


def generation_seconds(model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int, cache: bool) -> float:
    """Wall seconds of greedy `generate` of exactly `new_tokens` after `prompt`."""
    options = {"do_sample": False, "use_cache": cache, "eos_token_id": None, "pad_token_id": 0}
    model.generate(prompt, max_new_tokens=4, min_new_tokens=4, **options)  # untimed: first-call costs
    started = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **options)
    seconds = time.perf_counter() - started
    assert out.shape[1] == prompt.shape[1] + new_tokens
    return seconds


def rows(architecture: str, device: str) -> list[dict]:
    import transformers

    from scaling_axes.interop.export import remote_config
    from scaling_axes.interop.hf_modeling import ScalingAxesForCausalLM

    preset, overrides = MODELS[architecture]
    model = ScalingAxesForCausalLM(remote_config(preset, overrides, eot_id=None)).to(device).eval()
    vocab = model.backbone.config.vocab_size
    prompt = torch.randint(0, vocab, (1, PROMPT), generator=torch.Generator().manual_seed(0)).to(device)
    machine = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    found = []
    for new_tokens in NEW_TOKENS:
        uncached = generation_seconds(model, prompt, new_tokens, cache=False)
        cached = generation_seconds(model, prompt, new_tokens, cache=True)
        for cache, seconds in ((False, uncached), (True, cached)):
            found.append(
                {
                    "machine": f"{platform.machine()} {machine}",
                    "torch": torch.__version__,
                    "transformers": transformers.__version__,
                    "architecture": architecture,
                    "preset": preset,
                    "prompt_tokens": PROMPT,
                    "new_tokens": new_tokens,
                    "cache": cache,
                    "seconds": round(seconds, 3),
                    "tokens_per_s": round(new_tokens / seconds, 1),
                    "speedup": round(uncached / cached, 2) if cache else None,
                }
            )
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m scaling_axes bench-generate", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--architectures", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    parser.add_argument("--out", type=Path, default=Path("results/bench_generate.csv"))
    args = parser.parse_args(argv)
    check_options(args.device, args.out)
    found = []
    with torch.inference_mode():
        for architecture in args.architectures:
            found += rows(architecture, args.device)
            print(
                ", ".join(
                    f"{r['new_tokens']} tokens {'cached' if r['cache'] else 'uncached'} {r['tokens_per_s']}/s"
                    for r in found[-4:]
                ),
                f"({architecture})",
                flush=True,
            )
    write_csv(args.out, COLUMNS, found)
    print(f"wrote {args.out}")
