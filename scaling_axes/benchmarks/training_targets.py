"""The training benchmark's targets, judged from its rows (`bench-training`, `gpu-check`): an RMT step against the
Transformer's, the MFU of the Tokenformer-150M family, the compiled transformer_124m step against the nanoGPT-style
one (issue 47's targets)."""

from __future__ import annotations

import dataclasses

RMT_TARGET, MFU_TARGET, NANOGPT_TARGET = 1.15, 0.45, 1.05


def against_transformer(rows: list[dict]) -> None:
    """Each step's time over the fastest Transformer step of its family, in place."""
    fastest = {}
    for r in rows:
        if r["architecture"] == "transformer" and r["step_ms"]:
            fastest[r["family"]] = min(fastest.get(r["family"], r["step_ms"]), r["step_ms"])
    for r in rows:
        base = fastest.get(r["family"])
        r["vs_transformer_best"] = round(r["step_ms"] / base, 3) if base and r["step_ms"] else None


@dataclasses.dataclass(frozen=True)
class Judged:
    """A target judged from the rows: its line, whether it is met, how far off (measured / asked, >= 1 where
    missed) and the case and variant it was measured on."""

    line: str
    met: bool
    shortfall: float
    case: tuple[str, str, str]  # family, architecture, variant


def judged(rows: list[dict]) -> list[Judged]:
    """Each target the rows can judge: the RMT step against the Transformer's, the MFU of the Tokenformer-150M
    family's Tokenformer and Transformer, the compiled transformer_124m step against the nanoGPT-style one."""
    found = []
    rmt = [r for r in rows if (r["family"], r["architecture"]) == ("rmt_paper", "rmt") and r.get("vs_transformer_best")]
    if rmt:
        best = min(rmt, key=lambda r: r["vs_transformer_best"])
        ratio = best["vs_transformer_best"]
        found.append(
            Judged(
                f"RMT-305M step / Transformer-405M step {ratio:.3f} (target <= {RMT_TARGET}, paper 1.77): "
                f"{_verdict(ratio <= RMT_TARGET)}",
                ratio <= RMT_TARGET,
                ratio / RMT_TARGET,
                ("rmt_paper", "rmt", best.get("variant", "")),
            )
        )
    for arch in ("tokenformer", "transformer"):
        measured = [r for r in rows if r["family"] == "tokenformer_150m" and r["architecture"] == arch and r.get("mfu")]
        if measured:
            best = max(measured, key=lambda r: r["mfu"])
            case = ("tokenformer_150m", arch, best.get("variant", ""))
            found.append(
                Judged(
                    f"{arch} at Tokenformer-150M shapes, best MFU {best['mfu']:.1%} (target >= 45%): "
                    f"{_verdict(best['mfu'] >= MFU_TARGET)}",
                    best["mfu"] >= MFU_TARGET,
                    MFU_TARGET / best["mfu"],
                    case,
                )
            )
    compiled = {
        r["architecture"]: r["step_ms"]
        for r in rows
        if r["family"] == "gpt2_124m" and r["variant"] == "compiled" and r.get("step_ms")
    }
    if {"transformer", "nanogpt"} <= set(compiled):
        ratio = compiled["transformer"] / compiled["nanogpt"]
        found.append(
            Judged(
                f"transformer_124m step / nanoGPT-style GPT-2 step, compiled, {ratio:.3f} (target <= "
                f"{NANOGPT_TARGET}): {_verdict(ratio <= NANOGPT_TARGET)}",
                ratio <= NANOGPT_TARGET,
                ratio / NANOGPT_TARGET,
                ("gpt2_124m", "transformer", "compiled"),
            )
        )
    return found


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def targets(rows: list[dict]) -> list[str]:
    """One line per target: the value measured, the target, met or not."""
    return [each.line for each in judged(rows)]


def numeric(rows: list[dict]) -> list[dict]:
    """A CSV's rows with the columns the targets compare as numbers."""
    keys = ("step_ms", "mfu", "vs_transformer_best")
    return [{**r, **{k: float(r[k]) if r.get(k) else None for k in keys}} for r in rows]
