"""The committed cpu plans the tests read: issue 83's, in force, and issue 73's, which it replaced (its file and
its judged results moved whole into their history folders, `plan.replaced_plans`)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IN_FORCE = ROOT / "scaling_axes" / "plans" / "cpu.yaml"
ISSUE73 = ROOT / "scaling_axes" / "plans" / "history" / "cpu_issue73.yaml"
ISSUE73_RESULTS = ROOT / "results" / "cpu" / "issue73"


def issue73_plan(root: Path = ROOT):
    """Issue 73's plan as the suite reads it (no rules named: Student-t alone, Holm, the stability veto)."""
    from scaling_axes.harness.claims.plan import plan_for

    return plan_for("cpu", ISSUE73, root)
