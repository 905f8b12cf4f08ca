"""The bridges to other tools: the Hugging Face export and its modeling file, lm-eval (the suite's model adapter,
its offline tasks, its command line) and evaluation of finished runs."""

if __name__ != "scaling_axes.interop":  # the checkout's top-level `interop` link, imported by its bare name
    raise ImportError(
        f"import scaling_axes.interop, not {__name__}: the same files under a second name would be a "
        "second copy of every module (and register every model twice)"
    )
