"""The transformers versions a family's patch was written against and tested
with, and the refusal outside them (private to tokpos.hf)."""

from __future__ import annotations

import re


def version_tuple(version: str) -> tuple:
    """(major, minor) of a version string ("5.24.0", "5.25.0.dev0"); (0, 0) if unreadable."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def require_transformers(family: str, first: tuple, below: tuple) -> None:
    """RuntimeError naming the installed transformers version and the
    supported range [first, below) when the installed one is outside it:
    a family's patch mirrors that range's code, so another version could
    differ in what the mirror leaves out."""
    import transformers

    found = getattr(transformers, "__version__", "unknown")
    if not first <= version_tuple(found) < below:
        raise RuntimeError(
            f"tokpos.hf.patch: the {family} patch supports transformers >= {'.'.join(map(str, first))}, "
            f"< {'.'.join(map(str, below))}, but transformers {found} is installed; the model is left untouched"
        )
