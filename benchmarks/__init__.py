"""Speed on a CUDA GPU: the fused kernels and whole training steps, written to results/bench_*.csv."""
