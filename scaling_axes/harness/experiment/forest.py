"""The forest plot beside REPORT.md: one line per claim of the plan, a panel per unit, each claim's estimate (the
weakest step of an `each`) with the interval that decides it (thick: its two one-sided bounds at the level its
paper's control gives it) beside the unadjusted 95% (thin), each fresh seed's margin a dot, its effect of interest a
tick, an `each` claim's weakest step at alpha / k dashed (Holm's first step: conservative), the pilot's 95% and the
stability-filtered test (under a plan that keeps every seed) in grey beside it, its tolerance shaded
(non-inferiority: below -tolerance; equivalence: outside +-tolerance), intervals that run off the axis clipped with
an arrow and their bound printed; the claims outside the family listed under the panels; only the verdicts that
occur in the legend. Drawn in the plan's order, so that the same files give the same bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from scaling_axes.harness.results import VERDICTS, pyplot, save_figure

GREY = "0.45"  # what is drawn beside the verdict's test: the pilot, the stability-filtered test
PILOT, FILTERED = ("-", "D"), (":", "s")  # (line style, marker)
CLIP = 3.0  # an axis spans the estimates and unadjusted intervals, padded; what runs further is clipped


def forest_plot(lines: Sequence, path: Path, title: str, headings: Mapping[str, str]) -> bool:
    """The plot of `lines` (`report_claims.ClaimLine`); False (nothing written) where no claim was tested."""
    shown = [c for c in lines if c.tested is not None and c.claim.in_family]
    units = list(dict.fromkeys(c.unit for c in shown))
    if not shown:
        return False
    untested = [c for c in lines if c.tested is None or not c.claim.in_family]
    heights = [sum(c.unit == u for c in shown) + 1.2 for u in units] + [1.4 + 0.16 * len(untested)]
    fig, axes = pyplot().subplots(
        len(heights), 1, figsize=(11, 0.34 * sum(heights) + 1.2), squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    colours = {status: f"C{i}" for i, status in enumerate(VERDICTS)}
    for ax, unit in zip(axes[:-1, 0], units, strict=True):
        _panel(ax, [c for c in shown if c.unit == unit], unit, colours)
    _footer(axes[-1, 0], shown, untested, colours, headings)
    axes[0, 0].set_title(title, fontsize=9)
    save_figure(fig, path)
    return True


def _panel(ax, group: Sequence, unit: str, colours: Mapping[str, str]) -> None:
    ends = [v for c in group for v in (c.tested.low, c.tested.high, *c.margins)] + [0.0]
    ends += [c.claim.effect for c in group if c.claim.kind != "equivalence"]
    ends += [-c.claim.tolerance for c in group if c.claim.tolerance] + [c.claim.tolerance for c in group]
    low, high = min(ends), max(ends)
    pad = 0.12 * (high - low or 1.0)
    lo, hi = low - pad, high + pad
    for y, c in enumerate(group):
        colour = colours.get(c.status, "k")
        tol = c.claim.tolerance
        if c.claim.kind == "non_inferiority":
            ax.fill_betweenx([y - 0.4, y + 0.4], lo, -tol, color="0.9")
        elif c.claim.kind == "equivalence":
            ax.fill_betweenx([y - 0.4, y + 0.4], -tol, tol, color="0.9")
        deciding = c.tested.bounds(c.level)
        ax.plot(_clip(deciding, lo, hi), [y, y], color=colour, linewidth=3, alpha=0.55, solid_capstyle="butt")
        ax.plot([c.tested.low, c.tested.high], [y, y], color=colour, linewidth=0.9)
        ax.plot(list(c.margins), [y + 0.22] * len(c.margins), ".", color=colour, markersize=3, alpha=0.7)
        ax.plot(c.tested.estimate, y, "o", color=colour, markersize=4)
        if _stepped(c):  # a step alone at alpha / k: what Holm's first
            step = c.tested.bounds(c.level / len(c.claim.rows))  # step needs, wider than the intersection-union's
            ax.plot(_clip(step, lo, hi), [y - 0.2] * 2, color=colour, linewidth=0.9, linestyle="--")
        for beside, dy, (style, marker) in ((c.filtered_tested, -0.3, FILTERED), (c.pilot, 0.34, PILOT)):
            if beside is not None:
                ends = _clip((beside.low, beside.high), lo, hi)
                ax.plot(ends, [y + dy] * 2, color=GREY, linewidth=0.8, linestyle=style)
                ax.plot(min(max(beside.estimate, lo), hi), y + dy, marker, color=GREY, markersize=2.5, fillstyle="none")
        if c.claim.effect and c.claim.kind != "equivalence":
            ax.plot(min(c.claim.effect, hi), y, "|", color="k", markersize=9, markeredgewidth=1.2)
        for end, side in ((deciding[0], lo), (deciding[1], hi)):
            if (end < lo and side == lo) or (end > hi and side == hi):
                ax.annotate(
                    f"{end:+.3g}",
                    (side, y),
                    xytext=(-3 if side == lo else 3, -9),
                    textcoords="offset points",
                    ha="left" if side == lo else "right",
                    fontsize=5,
                    color=colour,
                )
                ax.plot(side, y, "<" if side == lo else ">", color=colour, markersize=5)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_xlim(lo, hi)
    labels = [f"{c.claim.id} ({c.claim.role}, {c.seeds} seeds)" for c in group]
    ax.set_yticks(range(len(group)), labels, fontsize=6.5)
    ax.set_ylim(len(group) - 0.5, -0.7)
    ax.set_xlabel(f"margin ({unit}; positive: the paper's direction)", fontsize=7)


def _stepped(c) -> bool:
    """Whether a claim line's steps are drawn apart: an `each` claim of several rows."""
    return c.claim.combine == "each" and len(c.claim.rows) > 1


def _clip(ends: tuple[float, float], lo: float, hi: float) -> list[float]:
    return [min(max(ends[0], lo), hi), min(max(ends[1], lo), hi)]


def _footer(ax, shown: Sequence, untested: Sequence, colours: Mapping[str, str], headings: Mapping) -> None:
    """The legend (the verdicts that occur, the two intervals, the seeds, a tolerance where one is drawn) and the
    claims with no interval here: kept from a verdict (unstable, not learning, ...) or outside the family."""
    from matplotlib.lines import Line2D  # after `pyplot()` chose the file-only backend
    from matplotlib.patches import Patch

    occurring = sorted({c.status for c in shown}, key=VERDICTS.index)
    handles = [Line2D([], [], color=colours[s], marker="o", label=headings.get(s, s)) for s in occurring]
    handles += [
        Line2D([], [], color="k", linewidth=3, alpha=0.55, label="the interval that decides (its family's level)"),
        Line2D([], [], color="k", linewidth=0.9, label="95% interval, unadjusted"),
        Line2D([], [], color="k", marker=".", linestyle="", label="each fresh seed's margin"),
        Line2D([], [], color="k", marker="|", linestyle="", markersize=9, label="the effect of interest"),
    ]
    if any(_stepped(c) for c in shown):
        label = "an each claim's step at alpha / k (conservative: Holm's first step)"
        handles.append(Line2D([], [], color="k", linestyle="--", linewidth=0.9, label=label))
    for drawn, (style, marker), label in (
        (any(c.pilot is not None for c in shown), PILOT, "the pilot (95%, never a verdict)"),
        (any(c.filtered_tested is not None for c in shown), FILTERED, "with the stability filter on (a sensitivity)"),
    ):
        if drawn:
            handles.append(
                Line2D([], [], color=GREY, marker=marker, fillstyle="none", linewidth=0.8, linestyle=style, label=label)
            )
    if any(c.claim.tolerance for c in shown):
        handles.append(Patch(color="0.9", label="beyond the tolerance"))
    ax.axis("off")
    ax.legend(handles=handles, loc="upper center", ncol=4, fontsize=6, frameon=False)
    kept = [c for c in untested if c.claim.in_family]
    outside = [c for c in untested if not c.claim.in_family]
    text = "; ".join(f"{c.claim.id} ({headings.get(c.status, c.status).lower()})" for c in kept)
    text = (f"in the family, no interval (kept from a verdict): {text}. " if kept else "") + (
        "outside the family, declared before the fresh seeds trained: "
        + "; ".join(f"{c.claim.id} ({headings.get(c.status, c.status).lower()})" for c in outside)
        if outside
        else ""
    )
    ax.text(0.0, 0.45, _wrap(text, 170), fontsize=5.5, va="top", transform=ax.transAxes)


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))
