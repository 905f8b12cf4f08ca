"""One module per paper table or figure, grouped per paper; each declares an `EXPERIMENT`."""

if __name__ != "scaling_axes.experiments":  # the checkout's top-level `experiments` link, imported by its bare name
    import scaling_axes

    scaling_axes.bare_import(__name__)
