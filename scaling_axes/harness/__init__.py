"""The vocabulary the experiments speak: scales, run declarations and their names, sweeps, claims, results rows
and the rules of a stable run that learned. One run's life is in `training/`, one experiment's in `experiment/`."""

if __name__ != "scaling_axes.harness":  # the checkout's top-level `harness` link, imported by its bare name
    raise ImportError(
        f"import scaling_axes.harness, not {__name__}: the same files under a second name would be a "
        "second copy of every module (and register every model twice)"
    )
