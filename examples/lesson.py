"""The first lesson's demo, with tokpos.torch modules.

The lesson builds TokenEmbedding, LearnedPositionalEmbedding,
SinusoidalPositionalEmbedding and EmbeddingComposer in PyTorch, runs both
position variants on one batch, and prints the shapes, the parameter counts
and the adjacent-position cosine similarity; then it asks the reader to change
the model width D from 64 to 32 and watch the sinusoidal wavelength bands.
This script does all of that with the tokpos modules (which are
torch.nn.Modules over tokpos's kernels) and runs both widths in one go.

    python examples/lesson.py                 # D = 64, then D = 32
    python examples/lesson.py --dims 128 64   # any widths
"""

from __future__ import annotations

import argparse
import math

import torch

from tokpos.torch import (
    EmbeddingComposer,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEmbedding,
    TokenEmbedding,
)


def adjacent_cosine(table: torch.Tensor) -> torch.Tensor:
    """cos(P[p], P[p+1]) for every p, in float64."""
    t = table.detach().double()
    return torch.nn.functional.cosine_similarity(t[:-1], t[1:], dim=-1)


def wavelength_bands(dim: int, base: float) -> list[tuple[int, int, int]]:
    """(decade lower bound, decade upper bound, pairs) for the wavelengths
    2*pi*base^(2k/D) of the D/2 sin/cos pairs, one row per power of ten."""
    pairs = (dim + 1) // 2
    counts: dict[int, int] = {}
    for k in range(pairs):
        wavelength = 2 * math.pi * base ** (2 * k / dim)
        decade = math.floor(math.log10(wavelength))
        counts[decade] = counts.get(decade, 0) + 1
    return [(10**e, 10 ** (e + 1), n) for e, n in sorted(counts.items())]


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def run(dim: int, vocab_size: int, max_context: int, batch: int, time: int, base: float, seed: int) -> None:
    print(f"=== D = {dim} (V = {vocab_size}, L = {max_context}, batch (B, T) = ({batch}, {time})) ===")
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, time), generator=generator)
    variants = {
        "learned": EmbeddingComposer(
            TokenEmbedding(vocab_size, dim, seed=seed),
            LearnedPositionalEmbedding(max_context, dim, seed=seed),
        ),
        "sinusoidal": EmbeddingComposer(
            TokenEmbedding(vocab_size, dim, seed=seed),
            SinusoidalPositionalEmbedding(max_context, dim, base=base),
        ),
    }
    print(f"ids {tuple(ids.shape)}")
    for name, composer in variants.items():
        out = composer(ids)
        position_rows = composer.position(time)
        print(f"  {name:<11} positions {tuple(position_rows.shape)} -> output {tuple(out.shape)}")

    print("parameters            token   position      total")
    for name, composer in variants.items():
        token, position = parameters(composer.token), parameters(composer.position)
        print(f"  {name:<11} {token:>11,} {position:>10,} {token + position:>10,}")

    print("adjacent-position cosine cos(P[p], P[p+1])   mean     min     max")
    for name, composer in variants.items():
        cos = adjacent_cosine(composer.position(max_context))
        print(f"  {name:<11} first {cos[0].item():+.3f}                 "
              f"{cos.mean().item():+.3f}  {cos.min().item():+.3f}  {cos.max().item():+.3f}")

    print(f"sinusoidal wavelength bands (base {base:g}, {(dim + 1) // 2} sin/cos pairs)")
    for lower, upper, n in wavelength_bands(dim, base):
        print(f"  [{lower:>8,}, {upper:>8,})  {'#' * n} {n}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[64, 32], help="model widths D to compare")
    parser.add_argument("--vocab", type=int, default=1000, help="vocabulary size V")
    parser.add_argument("--context", type=int, default=128, help="max context length L")
    parser.add_argument("--batch", type=int, default=2, help="batch size B")
    parser.add_argument("--time", type=int, default=16, help="sequence length T")
    parser.add_argument("--base", type=float, default=10000.0, help="sinusoidal base")
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    for dim in a.dims:
        run(dim, a.vocab, a.context, a.batch, a.time, a.base, a.seed)
    if a.dims == [64, 32]:
        print("D = 32 has half the sin/cos pairs of D = 64, spread over the same range of wavelengths "
              "(2*pi to 2*pi*base): each band holds about half as many pairs.")


if __name__ == "__main__":
    main()
