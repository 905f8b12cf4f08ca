"""Grow the Tokenformer in a Lightning checkpoint by appending parameter tokens (paper section 3.3).

    python -m experiments.grow small.ckpt tokenformer_354m grown.ckpt [--new-keys random] [--no-pin-tau]

The grown checkpoint holds weights only: training it starts a fresh optimizer and schedule, as the paper does.
"""

from __future__ import annotations

import argparse

from modules import get_config
from modules.lm import load_lm_checkpoint, save_lm_checkpoint
from modules.tokenformer import TAU_FIELDS, TOKEN_FIELDS, Tokenformer, grow


def grow_checkpoint(src: str, target: str, dst: str, new_keys: str = "zero", pin_tau: bool = True) -> None:
    """Grow the Tokenformer in a Lightning checkpoint of `modules.lm.LanguageModel` and write a new one."""
    model, hparams = load_lm_checkpoint(src)
    if not isinstance(model, Tokenformer):
        raise TypeError(f"{src} holds a {type(model).__name__}, not a Tokenformer; only Tokenformers grow")
    overrides = {k: v for k, v in hparams.get("model_overrides", {}).items() if k not in (*TOKEN_FIELDS, *TAU_FIELDS)}
    grown = grow(model, get_config(target, **overrides), new_keys=new_keys, pin_tau=pin_tau)
    tau_pins = {f: getattr(grown.config, f) for f in TAU_FIELDS if getattr(grown.config, f) is not None}
    save_lm_checkpoint(dst, target, {**overrides, **tau_pins}, grown.state_dict(), hparams)


def grow_checkpoint_cli(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Grow a Tokenformer checkpoint by appending parameter tokens.")
    parser.add_argument("checkpoint", help="Lightning .ckpt of a modules.lm.LanguageModel with a Tokenformer")
    parser.add_argument("target", help="preset with the target token counts, e.g. tokenformer_354m")
    parser.add_argument("output", help="where to write the grown .ckpt")
    parser.add_argument("--new-keys", choices=("zero", "random"), default="zero")
    parser.add_argument("--no-pin-tau", dest="pin_tau", action="store_false", help="recompute tau from the new n")
    args = parser.parse_args(argv)
    grow_checkpoint(args.checkpoint, args.target, args.output, args.new_keys, args.pin_tau)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    grow_checkpoint_cli()
