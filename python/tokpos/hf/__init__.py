"""tokpos.hf: tokpos inside a loaded transformers model.

    patch(model) -> list[str]    replace, in place, what tokpos computes;
                                 returns the names of the replaced modules

Each model family lives in its own private module (_gpt2, _bert, _llama),
whose patch(model) returns the names it replaced, or None when the model is
not of that family. A model no family knows is left untouched, and a
warning names its class. transformers is imported only here and in those
modules.
"""

from __future__ import annotations

import importlib
import warnings

_FAMILIES = ("_gpt2", "_bert", "_llama")


def patch(model) -> list[str]:
    replaced: list[str] = []
    known = False
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                raise
            continue
        names = module.patch(model)
        if names is not None:
            known = True
        if names:
            replaced.extend(names)
    if not known:
        warnings.warn(
            f"tokpos.hf.patch: no tokpos family knows {type(model).__name__}; the model is left untouched",
            stacklevel=2,
        )
    return replaced


__all__ = ["patch"]
