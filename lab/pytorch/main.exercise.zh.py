"""用纯 PyTorch 写的 token 嵌入与位置嵌入。

transformer 的输入阶段：(B, T) 的 token id -> (B, T, D) 的向量。
练习：写出下面四个模块的方法体（现在每个都抛出 NotImplementedError），
然后运行测试，直到全部通过：
    python -m pytest tests
再运行演示：
    python main.py
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class TokenEmbedding(nn.Module):
    """一张 V x D 的表：每个 token id 取出其中一行。"""

    def __init__(self, vocab_size, dim, init_std=0.02):
        # 要写：super().__init__()；self.table = nn.Embedding(vocab_size, dim)；
        # 再用均值 0、标准差 init_std 的正态分布填充 self.table.weight。
        raise NotImplementedError("TokenEmbedding.__init__：建立 V x D 的表")

    def forward(self, ids):
        # 要写：查出 ids 对应的行，(B, T) int64 -> (B, T, D)。
        raise NotImplementedError("TokenEmbedding.forward：查出 ids 对应的行")


class LearnedPositionalEmbedding(nn.Module):
    """一张 L x D 的参数表：位置 p 取出第 p 行。"""

    def __init__(self, max_context_length, dim, init_std=0.02):
        # 要写：super().__init__()；保存 max_context_length；self.table =
        # nn.Embedding(max_context_length, dim)，像 token 表一样初始化。
        raise NotImplementedError("LearnedPositionalEmbedding.__init__：建立 L x D 的表")

    def forward(self, seq_len):
        # 要写：seq_len 超出 max_context_length 时抛出 IndexError，消息里写出 T 和
        # max_context_length；否则返回位置 0..T-1 的行，形状 (T, D)。
        raise NotImplementedError("LearnedPositionalEmbedding.forward：返回第 0..T-1 行")


class SinusoidalPositionalEmbedding(nn.Module):
    """由公式算出的固定 L x D 表：没有任何参数。"""

    def __init__(self, max_context_length, dim, base=10000.0):
        # 要写：super().__init__()；用 float64 一次性算出
        # angle = p / base^(2*(i//2)/D)；第 i 列在 i 为偶数时取 sin(angle)，
        # 为奇数时取 cos(angle)；转成 float32 后用 self.register_buffer("table", ...) 保存。
        raise NotImplementedError("SinusoidalPositionalEmbedding.__init__：预先算出整张表")

    def forward(self, seq_len):
        # 要写：与可学习表相同的长度检查，然后返回前 T 行。
        raise NotImplementedError("SinusoidalPositionalEmbedding.forward：返回第 0..T-1 行")


class EmbeddingComposer(nn.Module):
    """token 行 + 位置行：第一个块的唯一输入。"""

    def __init__(self, token_embedding, position_embedding):
        # 要写：super().__init__()；把两个模块保存为 self.token 和 self.position。
        raise NotImplementedError("EmbeddingComposer.__init__：保存两个模块")

    def forward(self, ids):
        # 要写：token 行 (B, T, D) + T = ids.shape[1] 的位置行，后者变形为
        # (1, T, D) 以便沿 B 广播。相加，而不是拼接。
        raise NotImplementedError("EmbeddingComposer.forward：把 token 行和位置行相加")


def count_parameters(module):
    return sum(p.numel() for p in module.parameters())


def adjacent_cosine(table):
    """位置行 p 与 p + 1 之间余弦相似度的平均值。"""
    return F.cosine_similarity(table[:-1], table[1:], dim=-1).mean().item()


def wavelength_bands(dim, base=10000.0):
    """波长落在每个数量级区间 [10^k, 10^(k+1)) 内的 sin/cos 对有多少个。"""
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
    print(f"形状：ids {tuple(ids.shape)} -> 可学习 {tuple(learned(ids).shape)}，"
          f"正弦 {tuple(sinusoidal(ids).shape)}")
    print(f"参数量：token 表 {count_parameters(learned.token)}，"
          f"可学习位置 {count_parameters(learned.position)}，"
          f"正弦位置 {count_parameters(sinusoidal.position)}")
    print(f"参数总量：可学习 {count_parameters(learned)}，"
          f"正弦 {count_parameters(sinusoidal)}")
    print(f"相邻位置余弦相似度：可学习 {adjacent_cosine(learned.position.table.weight):.4f}，"
          f"正弦 {adjacent_cosine(sinusoidal.position.table):.4f}")
    bands = wavelength_bands(dim)
    print("每个波长数量级的 sin/cos 对数："
          + "，".join(f"10^{d}: {n}" for d, n in sorted(bands.items())))


if __name__ == "__main__":
    with torch.no_grad():
        demo(64)
        # 练习：维度减半。波长范围不变，每个数量级里的对数减半。
        demo(32)
