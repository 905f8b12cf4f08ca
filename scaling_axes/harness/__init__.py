"""The vocabulary the experiments speak: scales, run declarations and their names, sweeps, claims, results rows
and the rules of a stable run that learned. One run's life is in `training/`, one experiment's in `experiment/`."""

if __name__ != "scaling_axes.harness":  # the checkout's top-level `harness` link, imported by its bare name
    import scaling_axes

    scaling_axes.bare_import(__name__)
