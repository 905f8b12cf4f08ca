"""scaling-axes: Tokenformer, the Residual Matrix Transformer and Mixture of Tokenizers reproduced in one suite.

One package whose folders are its import names. Layers, each importing only from those before it: `io` (atomic files,
CSV) <- `kernels` (Triton) <- `datamodules.byte_slots`, `.byte_vocabulary`, `.tokenizers` and `.token_bytes` <-
`modules` (the registry and FLOP counts, then `configs` (presets and formulas, no torch), then `architectures`, then
`growth`) <- `modules.tasks` (LightningModules, optimisers) and `datamodules` (corpora, LightningDataModules) <-
`harness` (the vocabulary: scales, runs and their names, sweeps, claims, results; then `harness.training`, one run's
life; then `harness.experiment`, one experiment's runs and table) <- `interop` (Hugging Face export, lm-eval,
evaluation) <- `experiments` (one module per paper table or figure, and each paper's recipes) <- `benchmarks` <-
`cli`.
"""

import sys as _sys
import types as _types


class _LinkImportedBare(_types.ModuleType):
    """What a top-level link of the checkout answers to when imported by its bare name (`bare_import`): no file,
    no path, no version, no attributes; asked for one, it names the import to use."""

    def __getattr__(self, attribute: str) -> object:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise AttributeError(
            f"{self.__name__} is the checkout's link to scaling_axes.{self.__name__}: import "
            f"scaling_axes.{self.__name__} (the same files under a second name would register every model twice)"
        )


def bare_import(name: str) -> None:
    """Called by a package of ours imported under the bare name `name` of the checkout's top-level link to it
    (`import kernels` from the checkout root): `name` then answers as a package that is not there, so that a probe
    for another package of that name (transformers looks for the Hugging Face `kernels`) finds none, as it would
    anywhere else, and nothing of ours is imported, or registered, a second time under that name
    (`import modules.architectures` fails: `modules` is not a package)."""
    _sys.modules[name] = _LinkImportedBare(name)
