"""One file per architecture: its config, presets, parameter and FLOP formulas and examples, registered with the
registry, with no torch (what lists, plans and prices runs reads this package alone). Each module of this folder is
imported, so a new one registers with no list to edit; its model is `architectures/<arch>.py`."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
