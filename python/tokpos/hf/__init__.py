"""tokpos.hf: tokpos inside a loaded transformers model.

    patch(model) -> list[str]    replace, in place, what tokpos computes;
                                 returns the names of the replaced modules

Each model family lives in its own private module (_gpt2, _bert, _llama),
whose patch(model) returns the names it replaced, or None when the model is
not of that family. transformers is imported only here and in those modules.
"""

from __future__ import annotations

import importlib

_FAMILIES = ("_gpt2", "_bert", "_llama")


def patch(model) -> list[str]:
    replaced: list[str] = []
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                raise
            continue
        names = module.patch(model)
        if names:
            replaced.extend(names)
    return replaced


__all__ = ["patch"]
