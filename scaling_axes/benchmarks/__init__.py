"""Speed on a CUDA GPU: the fused kernels and whole training steps, written to results/bench_*.csv."""

if __name__ != "scaling_axes.benchmarks":  # the checkout's top-level `benchmarks` link, imported by its bare name
    raise ImportError(
        f"import scaling_axes.benchmarks, not {__name__}: the same files under a second name would be a "
        "second copy of every module (and register every model twice)"
    )
