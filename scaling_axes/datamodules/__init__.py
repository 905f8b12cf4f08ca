"""Data: tokenizers and the bytes of their tokens, corpora tokenized once into flat memmaps, the
LightningDataModules that sample them, and the embedded default data.

`byte_slots`, `tokenizers` and `token_bytes` are the bottom of this layer and import nothing above
`scaling_axes.io`: the Mixture of Tokenizers model is defined by a tokenizer's bytes and reads them from here. The
rest imports no model code.
"""

if __name__ != "scaling_axes.datamodules":  # the checkout's top-level `datamodules` link, imported by its bare name
    import scaling_axes

    scaling_axes.bare_import(__name__)
