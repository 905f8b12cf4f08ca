"""Regenerate results/REPORT.md from every results CSV: ``python -m experiments.report``."""

from experiments.results import write_report

if __name__ == "__main__":
    print(f"wrote {write_report()}")
