"""tfeff: cheap pretraining of contextual encoders, as Keras layers, models and binaries.

`import tfeff` imports nothing heavy: `tfeff.layers` and the others load on first use.
"""

import importlib

_SUBPACKAGES = ("config", "convert", "data", "evaluation", "export", "layers", "losses", "models",
               "training")


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"tfeff.{name}")
    raise AttributeError(f"module 'tfeff' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBPACKAGES))
