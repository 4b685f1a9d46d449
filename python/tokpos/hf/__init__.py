"""tokpos.hf: tokpos inside a loaded transformers model.

    patch(model, *, rotary="tokpos") -> list[str]
                                 replace, in place, what tokpos computes;
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


ROTARY_CHOICES = ("tokpos", "model")


def patch(model, *, rotary: str = "tokpos") -> list[str]:
    """Replaces, in place, what tokpos computes in model and returns the
    replaced modules' names (docs/python.md, "Using tokpos in a transformers
    model"). rotary (the Llama family): "tokpos" puts tokpos's rotary
    embedding in place of the model's (tokpos's frequencies for every rope
    type, in transformers' float32 arithmetic) and applies cos and sin
    through tokpos; "model" keeps the model's own rotary embedding and
    applies its cos and sin through tokpos, so the logits are the unpatched
    model's bit for bit."""
    if rotary not in ROTARY_CHOICES:
        raise ValueError(f"tokpos.hf.patch: rotary = {rotary!r} is not one of 'tokpos', 'model'")
    replaced: list[str] = []
    known = False
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                raise
            continue
        names = module.patch(model, rotary=rotary) if family == "_llama" else module.patch(model)
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
