"""The forest plot beside REPORT.md: every claim's mean margin with the interval that decides it (adjusted for the
scale's family) and its 95% interval, a panel per unit, the never-reached gaps apart, whole labels, the legend below
the data."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scaling_axes.harness.results import VERDICTS, pyplot, save_figure


def forest_plot(claims: Sequence[Any], path: Path, title: str, headings: Mapping[str, str]) -> bool:
    """Every claim's mean margin, a panel per unit, coloured by verdict: thick its interval adjusted for the family
    (the one that decides), thin its 95% interval; a fragile claim's margin under the other tuning policy a hollow
    diamond; the never-reached gaps in a panel of their own. Whole labels, the legend below the panels. False if
    no claim has a margin. `claims`: REPORT.md's (`report.Claim`), `headings` its name of each verdict."""
    shown = [c for c in claims if c.margin and ((c.low and c.high) or c.status == "never_reached")]
    panels = [
        (unit, [c for c in shown if c.unit == unit and c.status != "never_reached"])
        for unit in sorted({c.unit for c in shown}, key=lambda u: -sum(c.unit == u for c in shown))
    ]
    panels = [(unit, group) for unit, group in panels if group]
    if gaps := [c for c in shown if c.status == "never_reached"]:
        panels.append(("gap", gaps))
    if not panels:
        return False
    heights = [len(group) + 1 for _, group in panels] + [4]  # the last row holds the legend, below the data
    fig, axes = pyplot().subplots(
        len(heights), 1, figsize=(11, 0.24 * sum(heights) + 1.6), squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    colours = {status: f"C{i}" for i, status in enumerate(VERDICTS)}
    for ax, (unit, group) in zip(axes[:-1, 0], panels, strict=True):
        for y, c in enumerate(group):
            colour, mean = colours.get(c.status, "k"), float(c.margin)
            if c.status != "never_reached":
                ax.plot([float(c.low), float(c.high)], [y, y], color=colour, linewidth=0.8)
                if c.adjusted:
                    ax.plot(c.adjusted, [y, y], color=colour, linewidth=2.5, alpha=0.6)
            ax.plot(mean, y, "x" if c.status == "never_reached" else "o", color=colour, markersize=4)
            if c.status == "fragile" and c.other_margin is not None:
                ax.plot(c.other_margin, y, "D", markerfacecolor="none", color=colour, markersize=4)
        ax.axvline(0, color="grey", linewidth=0.8)
        ends = [float(v) for c in group for v in (c.low, c.high, c.margin) if v] + [0.0]
        pad = 0.15 * (max(ends) - min(ends) or 1.0)
        ax.set_xlim(min(ends) - pad, max(ends) + pad)  # the adjusted intervals run off where they are wider
        labels = [c.where[0] + (f" (+{len(c.where) - 1})" if len(c.where) > 1 else "") for c in group]
        ax.set_yticks(range(len(group)), labels, fontsize=6)
        ax.set_ylim(len(group) - 0.5, -0.5)
        ax.set_xlabel(
            "never reached: the loss it is measured at minus the run's lowest (nats/token)"
            if unit == "gap"
            else f"margin ({unit}; > 0: the claim holds)",
            fontsize=7,
        )
    from matplotlib.lines import Line2D  # after `pyplot()` chose the file-only backend

    handles = [Line2D([], [], color=colour, label=headings[status]) for status, colour in colours.items()]
    handles += [
        Line2D([], [], color="k", linewidth=2.5, alpha=0.6, label="adjusted for the family (runs off)"),
        Line2D([], [], color="k", linewidth=0.8, label="95% interval, unadjusted"),
        Line2D(
            [],
            [],
            marker="D",
            linestyle="",
            markerfacecolor="none",
            color="k",
            label="fragile: its margin under the other tuning policy",
        ),
    ]
    axes[-1, 0].axis("off")
    axes[-1, 0].legend(handles=handles, loc="center", ncol=4, fontsize=6, frameon=False)
    axes[0, 0].set_title(title, fontsize=9)
    save_figure(fig, path)
    return True
