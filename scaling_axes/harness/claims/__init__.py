"""A paper's claims: measured as result rows from whatever runs finished, and decided by a scale's pre-registered
plan.

Measured: `margins` (a margin per seed, positive where the paper's claim holds, and a contrast's arm values),
`verdicts` (a claim row, a lower loss, as good as), `notes` (what a claim's note is made of), `outcomes` (the rows no
test decides: a loss never reached, a claim out of this scale's reach, an exact check).

Decided: `plan` (the plan, checked field by field), `power` (the seeds its power analysis sets from the pilot),
`contrasts` (each row's test on its experiment's arm x seed model or its own spread), `decisions` (each kind's
one-sided tests, `each` / `average` / `one`, Holm and Benjamini-Yekutieli per paper), `observed` and `judge` (a
scale's committed files judged by its plan), `simulation` (the rule's error rate by Monte Carlo).
"""
