"""The bridges to other tools: the Hugging Face export and its modeling file, lm-eval (the suite's model adapter,
its offline tasks, its command line) and evaluation of finished runs."""

if __name__ != "scaling_axes.interop":  # the checkout's top-level `interop` link, imported by its bare name
    import scaling_axes

    scaling_axes.bare_import(__name__)
