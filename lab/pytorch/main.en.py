"""Token and position embeddings in plain PyTorch.

The input stage of a transformer: (B, T) token ids -> (B, T, D) vectors.
Run the demo:   python main.py
Run the tests:  python -m pytest tests
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class TokenEmbedding(nn.Module):
    """A V x D table: each token id picks one row."""

    def __init__(self, vocab_size, dim, init_std=0.02):
        super().__init__()
        self.table = nn.Embedding(vocab_size, dim)
        # Small Gaussian start, mean 0 and std 0.02; a seed makes it repeatable.
        nn.init.normal_(self.table.weight, mean=0.0, std=init_std)

    def forward(self, ids):
        # (B, T) int64 -> (B, T, D): a row gather. The backward pass adds
        # gradient only into the rows used here.
        return self.table(ids)


class LearnedPositionalEmbedding(nn.Module):
    """An L x D table of parameters: position p picks row p."""

    def __init__(self, max_context_length, dim, init_std=0.02):
        super().__init__()
        self.max_context_length = max_context_length
        self.table = nn.Embedding(max_context_length, dim)
        nn.init.normal_(self.table.weight, mean=0.0, std=init_std)

    def forward(self, seq_len):
        # Row T does not exist when T = L: there is nothing to look up there.
        if not 0 <= seq_len <= self.max_context_length:
            raise IndexError(f"sequence length T={seq_len} is past "
                             f"max_context_length={self.max_context_length}")
        positions = torch.arange(seq_len, device=self.table.weight.device)
        return self.table(positions)  # (T, D)


class SinusoidalPositionalEmbedding(nn.Module):
    """A fixed L x D table from a formula: no parameters at all."""

    def __init__(self, max_context_length, dim, base=10000.0):
        super().__init__()
        self.max_context_length = max_context_length
        # angle = p / base^(2*(i//2)/D); sin at even columns, cos at odd ones.
        # Computed once, in float64, then stored as float32.
        p = torch.arange(max_context_length, dtype=torch.float64)[:, None]
        i = torch.arange(dim)
        angle = p / base ** ((2 * (i // 2)).double() / dim)
        table = torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))
        # A buffer follows .to(device) and state_dict, but is not a parameter.
        self.register_buffer("table", table.float())

    def forward(self, seq_len):
        # The formula would go on, but this table stops at L.
        if not 0 <= seq_len <= self.max_context_length:
            raise IndexError(f"sequence length T={seq_len} is past "
                             f"max_context_length={self.max_context_length}")
        return self.table[:seq_len]  # (T, D)


class EmbeddingComposer(nn.Module):
    """Token rows + position rows: the single input of the first block."""

    def __init__(self, token_embedding, position_embedding):
        super().__init__()
        self.token = token_embedding
        self.position = position_embedding

    def forward(self, ids):
        tokens = self.token(ids)                 # (B, T, D)
        positions = self.position(ids.shape[1])  # (T, D)
        # A sum, not a concatenation: D stays D. (1, T, D) broadcasts over B.
        return tokens + positions.unsqueeze(0)


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
