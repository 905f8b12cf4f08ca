"""What a claim's note is made of: its statement | what was measured | why it stands as it does, and the data it was
judged on at the end; the report and the judge read these separators back."""

from __future__ import annotations

NOTE_PARTS = " | "  # a claim's note: its statement | what was measured | why (each part only where there is one)
DATA_NOTE = "; data: "  # what `table.data_caveats` appends to a claim's note: the data it was judged on
