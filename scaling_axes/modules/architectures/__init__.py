"""One file per architecture; importing this package registers them all. A new architecture is one file here: each
module of this folder is imported, so it registers with no list to edit."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
