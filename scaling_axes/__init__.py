"""scaling-axes: Tokenformer, the Residual Matrix Transformer and Mixture of Tokenizers reproduced in one suite.

One package whose folders are its import names. Layers, each importing only from those before it: `io` (atomic
files, CSV) <- `kernels` (Triton) <- `datamodules.byte_slots`, `.tokenizers` and `.token_bytes` <- `modules` (the
registry and FLOP counts, then `architectures`, then `growth`) <- `modules.tasks` (LightningModules, optimisers) and
`datamodules` (corpora, LightningDataModules) <- `harness` (the vocabulary: scales, runs and their names, sweeps,
claims, results; then `harness.training`, one run's life; then `harness.experiment`, one experiment's runs and table)
<- `interop` (Hugging Face export, lm-eval, evaluation) <- `experiments` (one module per paper table or figure, and
each paper's recipes) <- `benchmarks` <- `cli`.
"""

import importlib.util as _importlib_util
import sys as _sys
from pathlib import Path as _Path


def _hide_checkout_links() -> None:
    """From the checkout root (on `sys.path` under `python -m` and pytest) the top-level links would answer probes
    for packages of the same names: `transformers` imports any `kernels` it finds (the Hugging Face kernels hub), and
    our link refuses a bare import with an ImportError that the probe does not catch. Once this package is imported,
    a name that would resolve to one of its links resolves to nothing (a real package of that name is untouched)."""
    here = _Path(__file__).resolve().parent
    for name in ("kernels", "modules", "datamodules", "harness", "interop", "experiments", "benchmarks"):
        if name in _sys.modules:
            continue
        try:
            spec = _importlib_util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and _Path(spec.origin).resolve().parent.parent == here:
            _sys.modules[name] = None  # `import kernels` now fails as a missing package, and probes see none


_hide_checkout_links()
