"""A scale's committed tables judged again by today's rules from their files alone (`results/<scale>/*.csv`, the
per-seed files beside them and the scale's plan), where the runs are not at hand; then its REPORT.md.

    python -m scaling_axes report --scale cpu
"""

from __future__ import annotations

from pathlib import Path

from scaling_axes.harness.claims.judge import judge_scale
from scaling_axes.harness.claims.plan import plan_for
from scaling_axes.harness.experiment.report import write_report
from scaling_axes.harness.experiment.report_files import check_ours
from scaling_axes.harness.results import RESULTS_DIR
from scaling_axes.harness.scales import Scale


def rejudge_scale(scale: Scale, results_dir: Path = RESULTS_DIR) -> Path:
    """Every claim of `results/<scale>/` judged again by the scale's plan, then the scale's REPORT.md (its header,
    which says where its runs were trained, kept) and results/REPORT.md. Returns the scale's report. The same files
    give the same bytes: nothing of when or where it was judged again is written."""
    scale_dir = Path(results_dir) / scale.name
    check_ours(Path(results_dir) / "REPORT.md", scale_dir / "REPORT.md")  # before a table is rewritten
    judge_scale(scale_dir, scale, plan_for(scale, root=Path(results_dir).parent))
    report = write_report(results_dir, scale)  # first: it reads every pilot, a replaced plan's too
    write_report(results_dir)
    return report
