"""Speed on a CUDA GPU: the fused kernels and whole training steps, written to results/bench_*.csv."""

if __name__ != "scaling_axes.benchmarks":  # the checkout's top-level `benchmarks` link, imported by its bare name
    import scaling_axes

    scaling_axes.bare_import(__name__)
