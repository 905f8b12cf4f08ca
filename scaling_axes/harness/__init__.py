"""The machinery every table shares: runs and budgets, training, results rows, evaluation, growth, LightningCLI."""

if __name__ != "scaling_axes.harness":  # the checkout's top-level `harness` link, imported by its bare name
    raise ImportError(
        f"import scaling_axes.harness, not {__name__}: the same files under a second name would be a "
        "second copy of every module (and register every model twice)"
    )
