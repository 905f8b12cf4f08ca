"""A paper's claims as result rows, judged from whatever runs finished: `claim_holds`, `claim_fails` or
`insufficient`, and the rows of what decides nothing (`never_reached`, `out_of_reach`, the exact checks):
`margins` (a margin per seed and the noise of paired margins), `verdicts` (one claim's test and verdict, and the
claims of a lower loss or as good as), `notes` (what a claim's note says), `outcomes` (the rows that decide nothing).

A claim is measured as a signed margin, positive where the paper's claim holds (say the Transformer's loss minus
the RMT's), once per seed at which every run it compares finished (`paired_margins`). It is judged only where the
data can support it: never at smoke scale. The arms of a margin share its seed, so its noise is the spread of the
experiment's paired margins on the same metric (`paired_noise`); an unpaired margin's is at least sqrt(2) x one
run's (`margin_floor`). The mean of n seeds must clear two Student-t tests: on that noise (its degrees of freedom)
and on the seeds' own spread (n - 1); its p is the larger. A claim stated within a tolerance is an equivalence: two
one-sided tests. Over a scale, every declared claim is one family whose false discoveries `experiment.family`
controls; the margin, p, the noise, the seeds and the narrowest difference the data exclude are in the note.
"""
