"""What a claim's note says: its statement, what was measured, why it was not decided, the data it was judged
on; their separators, which the report and the family read back."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scaling_axes.harness.results import Row
from scaling_axes.significance import Significance, t_critical

NOTE_PARTS = " | "  # a claim's note: its statement | what was measured | why it was not decided (when it was not)
DATA_NOTE = "; data: "  # what `table.data_caveats` appends to a claim's note: the data it was judged on


EXCLUDES = "cannot exclude a difference of "  # the narrowest equivalence bound the data support, in every note


def measured_note(
    claim: Row, test: Significance | None, p: float | None, noise_floor: float, noise_dof: float, rests_on: str
) -> str:
    """What a claim's note says was measured: the margin, its bound and p, the noise it rests on, the tolerance's
    two one-sided tests, and the narrowest difference the data exclude."""
    if test is None:
        return ""
    e, n = claim.evidence, len(claim.evidence.margins)
    how = "one seed against the floor" if n < 2 else f"Student-t {t_critical(n - 1):.3g}"
    estimated = "assumed" if math.isinf(noise_dof) else f"measured on {noise_dof} degrees of freedom"
    source = "paired margins' spread" if rests_on == "paired" else "floor"
    difference = statistics.fmean(e.margins) - (e.tolerance or 0.0)
    tost = ""
    if e.tolerance is not None:
        beyond = "" if abs(difference) < e.tolerance else "; p is the test that it lies beyond"
        tost = (
            f"; the difference {difference:+.4g} against +-{e.tolerance:g}: two one-sided tests that it lies "
            f"within, p {test.equivalence_p(difference, e.tolerance):.3g}{beyond}"
        )
    return (
        f"margin {statistics.fmean(e.margins):+.4g} {claim.unit}, 95% bound {test.bound:.3g}, p {p:.3g}, "
        f"noise {test.noise:.3g} ({source} {noise_floor:.3g}, {estimated}; {n} seed{'s' * (n != 1)}; {how})"
        f"{tost}; {EXCLUDES}{test.excluded_beyond(difference):.3g} {claim.unit}"
    )


def more(reasons: Sequence[str]) -> str:
    return f" (and {len(reasons)} more run{'s' * (len(reasons) > 1)} or seeds)" if reasons else ""
