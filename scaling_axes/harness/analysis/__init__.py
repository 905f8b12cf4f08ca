"""A scale's claims decided as its pre-registered plan says: the plan (`plan`), the power analysis its seeds come
from (`power`), the row tests on each experiment's arm x seed model or on a row's own spread (`contrasts`), the
decision rule per claim kind and each paper's family (`decisions`), the judge over a scale's committed files
(`observed`, `judge`), and the Monte Carlo of the whole rule's error rate (`simulation`)."""
