"""Models of the suite. Importing this package registers every architecture's presets, and imports no torch.

`configs/` holds one file per architecture's config (its presets, parameter and FLOP formulas and examples), with no
torch; `architectures/` the nn.Modules that build them, imported when a model is first built; `tasks/` the
LightningModules that train them and their optimisers; `growth/` what grows a trained model into a bigger one
(Net2Net, Tokenformer's parameter tokens); `registry` and `flops` are shared by all of them.
"""

from scaling_axes.modules import configs  # noqa: F401  (registers every architecture's presets)
from scaling_axes.modules.registry import build_from_config, build_model, get_config, list_models

__all__ = ["build_from_config", "build_model", "get_config", "list_models"]

if __name__ != "scaling_axes.modules":  # the checkout's top-level `modules` link, imported by its bare name
    import scaling_axes

    scaling_axes.bare_import(__name__)
