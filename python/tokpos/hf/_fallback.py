"""What tokpos.hf.patch does where a family's fused patch does not apply
(private to tokpos.hf): the plan every family returns, and tokpos.torch
modules in place of the model's nn.Embedding modules.

A family's plan(model) looks at the model and the installed transformers
without changing anything, and either returns a Plan (what to change, the
names it replaces, what is not fused and why) or None (the model is not of
that family), or raises RuntimeError (the family cannot do either: the
model is left untouched). tokpos.hf.patch makes every family's plan before
it applies any, so a refusal leaves the whole model as it was.

The fallback replaces modules, not forwards: each plain nn.Embedding the
family looks up (GPT-2's wte and wpe; BERT's word, token type and position
embeddings; the Llama family's embed_tokens) becomes a
tokpos.torch.Embedding, torch.nn.Embedding's contract on tokpos's lookup
(the same outputs bit for bit; docs/python.md, "tokpos.torch.Embedding and
nn.Embedding"). The module object stays the same (its class is changed in
place), so its Parameter, the tie to an LM head, hooks, state_dict keys and
every reference to it are kept. Nothing of transformers' code is mirrored,
so it does not depend on the installed version.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

from torch import nn

from . import _sources


@dataclass
class Plan:
    """What a family's patch changes: steps (each changes the model, in
    order), the names it returns, and what it leaves unfused: (what, why)
    pairs and the modules put in their place, for the warning."""

    family: str
    names: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    unfused: list = field(default_factory=list)
    replaced: list = field(default_factory=list)

    def replace_tables(self, module, tables, prefix: str, why: str) -> None:
        """Plans each of module's tables (an nn.Embedding) to become a
        tokpos.torch.Embedding, named prefix + table; refuses, before any
        change, where one is something else."""
        for table in tables:
            embedding = getattr(module, table, None)
            if not replaceable(embedding):
                raise refusal(
                    self.family,
                    f"{why}, and {prefix}{table} is a {type(embedding).__name__}, not an nn.Embedding "
                    "that tokpos.torch.Embedding can stand in for",
                )
            self.steps.append(to_tokpos_embedding(embedding))
            self.replaced.append(prefix + table)

    def apply(self, stacklevel: int = 3) -> list[str]:
        for step in self.steps:
            step()
        if self.unfused:
            warnings.warn(self.warning(), stacklevel=stacklevel)
        return list(self.names)

    def warning(self) -> str:
        what = "; ".join(f"{w} ({why})" for w, why in self.unfused)
        text = (
            f"tokpos.hf.patch: transformers {_sources.installed_version()}, {self.family}: not fused: {what}"
        )
        if self.replaced:
            text += f"; {', '.join(self.replaced)} {'is a' if len(self.replaced) == 1 else 'are'} tokpos.torch.Embedding"
            text += " in its place (exact, unfused)" if len(self.replaced) == 1 else " in their place (exact, unfused)"
        return text


def changed_sources(family: str, paths) -> str:
    """Why a fused patch does not apply: its mirrored functions whose installed
    source differs from the recorded one."""
    names = ", ".join(_sources.short_name(p) for p in paths)
    return (
        f"the source of {names} is not the one the fused patch mirrors "
        f"(recorded from transformers {_sources.recorded_versions(family)})"
    )


def replaceable(module) -> bool:
    """Whether module is an nn.Embedding that tokpos.torch.Embedding can stand
    in for (the class itself, or already a tokpos.torch.Embedding)."""
    from .._torch_embedding import Embedding

    return type(module) in (nn.Embedding, Embedding)


def to_tokpos_embedding(module) -> Callable[[], None]:
    """The step that makes module (an nn.Embedding) a tokpos.torch.Embedding, in place."""
    from .._torch_embedding import Embedding

    def step():
        if type(module) is nn.Embedding:
            module.__class__ = Embedding

    return step


def refusal(family: str, why: str) -> RuntimeError:
    return RuntimeError(
        f"tokpos.hf.patch: transformers {_sources.installed_version()}, {family}: {why}; the model is left untouched"
    )
