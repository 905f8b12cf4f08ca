"""scaling-axes: Tokenformer, the Residual Matrix Transformer and Mixture of Tokenizers reproduced in one suite.

One package whose folders are its import names. Layers, each importing only from those before it: `io` (atomic
files, CSV) <- `kernels` (Triton) <- `datamodules.tokenizers` and `datamodules.token_bytes` <- `modules` (the
registry and FLOP counts, then `architectures`, then `growth`) <- `modules.tasks` (LightningModules, optimisers) and
`datamodules` (corpora, LightningDataModules) <- `harness` (scales, runs, training, results, evaluation) <-
`experiments` (one module per paper table or figure, and each paper's recipes) <- `benchmarks` <- `cli`.
"""
