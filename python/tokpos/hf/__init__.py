"""tokpos.hf: tokpos inside a loaded transformers model.

    patch(model, *, rotary="tokpos") -> list[str]
                                 replace, in place, what tokpos computes;
                                 returns the names of the replaced modules

Each model family lives in its own private module (_gpt2, _bert, _llama),
whose plan(model) says what its patch would change (a _fallback.Plan), or
None when the model is not of that family, or raises RuntimeError when the
family can do nothing for it. patch makes every family's plan before it
applies any, so a refusal leaves the whole model as it was. A model no
family knows is left untouched, and a warning names its class.

Each family's fused patch applies where the transformers functions it
mirrors have the sources it was written against (their fingerprints,
_sources.RECORDED), whatever the version number; where one differs, the
family puts tokpos.torch modules in place of the model's embeddings
instead (exact, unfused) and warns, naming the version and what is not
fused (_fallback). transformers is imported only here and in those
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
    model's bit for bit.

    Fused where the transformers functions a family mirrors have the
    sources recorded for it; where one differs, tokpos.torch modules in
    place of the embeddings (exact, unfused) and a UserWarning naming the
    transformers version and what is not fused; RuntimeError (the model
    untouched) where neither applies."""
    if rotary not in ROTARY_CHOICES:
        raise ValueError(f"tokpos.hf.patch: rotary = {rotary!r} is not one of 'tokpos', 'model'")
    plans = []
    for family in _FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{family}":
                raise
            continue
        plan = module.plan(model, rotary=rotary) if family == "_llama" else module.plan(model)
        if plan is not None:
            plans.append(plan)
    replaced: list[str] = []
    for plan in plans:
        replaced.extend(plan.apply(stacklevel=3))
    if not plans:
        warnings.warn(
            f"tokpos.hf.patch: no tokpos family knows {type(model).__name__}; the model is left untouched",
            stacklevel=2,
        )
    return replaced


__all__ = ["patch"]
