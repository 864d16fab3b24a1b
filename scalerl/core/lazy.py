"""Heavy libraries, imported the first time one of their attributes is read.

Every option module (one per design-axis option) is imported whenever a config
is composed: by ``--help``, ``--dry-run`` and ``--status``, and by every arm's
validation before a sweep launches. Importing torch costs about 1.7 s on a
laptop CPU and transformers about 5 s more, so modules that define config
schemas reach those libraries through these proxies instead of a top-level
``import``. The first attribute read (``torch.exp``) imports the real module and
copies its namespace into the proxy, so later reads cost nothing extra.
``tests/test_layers.py`` checks that composing and validating a config imports
neither library.
"""
from __future__ import annotations

import importlib
import types


class LazyModule(types.ModuleType):
    def __getattr__(self, attr: str):
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return getattr(module, attr)


torch = LazyModule("torch")
transformers = LazyModule("transformers")
tokenizers = LazyModule("tokenizers")
