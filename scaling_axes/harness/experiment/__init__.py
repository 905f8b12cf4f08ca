"""One experiment's runs, in order, and back to its table: the schedule (sweeps, claim seeds, fallbacks, growth
sources first), the finished runs, the arms of its claims, the table and REPORT.md, the plan and the command."""
