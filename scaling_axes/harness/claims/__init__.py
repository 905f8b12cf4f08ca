"""A paper's claims as result rows, built from whatever runs finished: `margins` (a margin per seed, positive where
the paper's claim holds, and a contrast's arm values), `verdicts` (a claim row, a lower loss, as good as), `notes`
(what a claim's note is made of), `outcomes` (the rows that no test decides: a loss never reached, a claim out of
this scale's reach, an exact check). The scale's pre-registered plan decides the claim rows (`harness.analysis`).
"""
