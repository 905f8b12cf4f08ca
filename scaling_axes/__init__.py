"""scaling-axes: Tokenformer, the Residual Matrix Transformer and Mixture of Tokenizers reproduced in one suite.

Layers, each importing only from those before it: `scaling_axes.io` (atomic files, CSV) <- `kernels` (Triton) <-
`modules` (models, LightningModules) <- `datamodules` <- `harness` (runner, training, results, evaluation) <-
`experiments` (one module per paper table or figure) <- `benchmarks` <- `cli`.
"""
