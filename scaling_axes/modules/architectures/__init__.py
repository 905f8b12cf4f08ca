"""One file per architecture's model (its nn.Modules; its config is `configs/<arch>_config.py`); importing this
package registers them all, as `registry.build_from_config` does when it first builds a model. Each module of this
folder is imported, so a new one registers with no list to edit."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
