"""One file per architecture; importing this package registers them all. A new architecture is one file here and
its name in the import below."""

from scaling_axes.modules.architectures import (  # noqa: F401
    modded_gpt,
    mot,
    rmt,
    tokenformer,
    transformer,
    variants,
    vit_tokenformer,
)
