"""One module per paper table or figure, grouped per paper; each declares an `EXPERIMENT`."""

if __name__ != "scaling_axes.experiments":  # the checkout's top-level `experiments` link, imported by its bare name
    raise ImportError(
        f"import scaling_axes.experiments, not {__name__}: the same files under a second name would be a "
        "second copy of every module (and register every model twice)"
    )
