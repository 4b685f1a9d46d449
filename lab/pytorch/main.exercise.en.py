"""Token and position embeddings in plain PyTorch.

The input stage of a transformer: (B, T) token ids -> (B, T, D) vectors.
The exercise: write the bodies of the four modules below (each one now
raises NotImplementedError), then run the tests until they pass:
    python -m pytest tests
and the demo:
    python main.py
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class TokenEmbedding(nn.Module):
    """A V x D table: each token id picks one row."""

    def __init__(self, vocab_size, dim, init_std=0.02):
        # Write: super().__init__(); self.table = nn.Embedding(vocab_size, dim);
        # then fill self.table.weight from a normal distribution, mean 0, std init_std.
        raise NotImplementedError("TokenEmbedding.__init__: build the V x D table")

    def forward(self, ids):
        # Write: look up the rows of ids, (B, T) int64 -> (B, T, D).
        raise NotImplementedError("TokenEmbedding.forward: look up the rows of ids")


class LearnedPositionalEmbedding(nn.Module):
    """An L x D table of parameters: position p picks row p."""

    def __init__(self, max_context_length, dim, init_std=0.02):
        # Write: super().__init__(); keep max_context_length; self.table = an
        # nn.Embedding(max_context_length, dim) filled like the token table.
        raise NotImplementedError("LearnedPositionalEmbedding.__init__: build the L x D table")

    def forward(self, seq_len):
        # Write: raise IndexError naming T and max_context_length when seq_len is
        # past it; else return the rows of positions 0..T-1, shape (T, D).
        raise NotImplementedError("LearnedPositionalEmbedding.forward: return rows 0..T-1")


class SinusoidalPositionalEmbedding(nn.Module):
    """A fixed L x D table from a formula: no parameters at all."""

    def __init__(self, max_context_length, dim, base=10000.0):
        # Write: super().__init__(); compute, once and in float64,
        # angle = p / base^(2*(i//2)/D); column i holds sin(angle) if i is even,
        # cos(angle) if odd; store it as float32 with self.register_buffer("table", ...).
        raise NotImplementedError("SinusoidalPositionalEmbedding.__init__: precompute the table")

    def forward(self, seq_len):
        # Write: the same length check as the learned table, then the first T rows.
        raise NotImplementedError("SinusoidalPositionalEmbedding.forward: return rows 0..T-1")


class EmbeddingComposer(nn.Module):
    """Token rows + position rows: the single input of the first block."""

    def __init__(self, token_embedding, position_embedding):
        # Write: super().__init__(); keep the two modules as self.token and self.position.
        raise NotImplementedError("EmbeddingComposer.__init__: keep both modules")

    def forward(self, ids):
        # Write: token rows (B, T, D) + position rows for T = ids.shape[1], as
        # (1, T, D) so that they broadcast over B. A sum, not a concatenation.
        raise NotImplementedError("EmbeddingComposer.forward: add token and position rows")


def count_parameters(module):
    return sum(p.numel() for p in module.parameters())


def adjacent_cosine(table):
    """Mean cosine similarity of position rows p and p + 1."""
    return F.cosine_similarity(table[:-1], table[1:], dim=-1).mean().item()


def wavelength_bands(dim, base=10000.0):
    """How many sin/cos pairs have a wavelength in each decade [10^k, 10^(k+1))."""
    bands = {}
    for k in range(dim // 2):
        wavelength = 2 * math.pi * base ** (2 * k / dim)
        decade = math.floor(math.log10(wavelength))
        bands[decade] = bands.get(decade, 0) + 1
    return bands


def demo(dim, vocab_size=1000, max_context_length=128, batch=2, seq_len=16):
    torch.manual_seed(0)
    ids = torch.randint(0, vocab_size, (batch, seq_len))
    learned = EmbeddingComposer(TokenEmbedding(vocab_size, dim),
                                LearnedPositionalEmbedding(max_context_length, dim))
    sinusoidal = EmbeddingComposer(TokenEmbedding(vocab_size, dim),
                                   SinusoidalPositionalEmbedding(max_context_length, dim))
    print(f"== D = {dim} ==")
    print(f"shapes: ids {tuple(ids.shape)} -> learned {tuple(learned(ids).shape)}, "
          f"sinusoidal {tuple(sinusoidal(ids).shape)}")
    print(f"parameters: token table {count_parameters(learned.token)}, "
          f"learned positions {count_parameters(learned.position)}, "
          f"sinusoidal positions {count_parameters(sinusoidal.position)}")
    print(f"parameters in total: learned {count_parameters(learned)}, "
          f"sinusoidal {count_parameters(sinusoidal)}")
    print(f"adjacent-position cosine: learned {adjacent_cosine(learned.position.table.weight):.4f}, "
          f"sinusoidal {adjacent_cosine(sinusoidal.position.table):.4f}")
    bands = wavelength_bands(dim)
    print("sin/cos pairs per wavelength decade: "
          + ", ".join(f"10^{d}: {n}" for d, n in sorted(bands.items())))


if __name__ == "__main__":
    with torch.no_grad():
        demo(64)
        # The exercise: half the dimensions. Same wavelength range, half the pairs per decade.
        demo(32)
