"""用纯 PyTorch 写的 token 嵌入与位置嵌入。

transformer 的输入阶段：(B, T) 的 token id -> (B, T, D) 的向量。
运行演示：python main.py
运行测试：python -m pytest tests
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class TokenEmbedding(nn.Module):
    """一张 V x D 的表：每个 token id 取出其中一行。"""

    def __init__(self, vocab_size, dim, init_std=0.02):
        super().__init__()
        self.table = nn.Embedding(vocab_size, dim)
        # 从小高斯分布初始化，均值 0、标准差 0.02；固定随机种子即可复现。
        nn.init.normal_(self.table.weight, mean=0.0, std=init_std)

    def forward(self, ids):
        # (B, T) int64 -> (B, T, D)：按行取出（gather）。反向传播只把
        # 梯度累加到这里用到的行。
        return self.table(ids)


class LearnedPositionalEmbedding(nn.Module):
    """一张 L x D 的参数表：位置 p 取出第 p 行。"""

    def __init__(self, max_context_length, dim, init_std=0.02):
        super().__init__()
        self.max_context_length = max_context_length
        self.table = nn.Embedding(max_context_length, dim)
        nn.init.normal_(self.table.weight, mean=0.0, std=init_std)

    def forward(self, seq_len):
        # 当 T = L 时第 T 行并不存在：那里没有可查的行。
        if not 0 <= seq_len <= self.max_context_length:
            raise IndexError(f"序列长度 T={seq_len} 超出了 "
                             f"max_context_length={self.max_context_length}")
        positions = torch.arange(seq_len, device=self.table.weight.device)
        return self.table(positions)  # (T, D)


class SinusoidalPositionalEmbedding(nn.Module):
    """由公式算出的固定 L x D 表：没有任何参数。"""

    def __init__(self, max_context_length, dim, base=10000.0):
        super().__init__()
        self.max_context_length = max_context_length
        # angle = p / base^(2*(i//2)/D)；偶数列取 sin，奇数列取 cos。
        # 只计算一次，用 float64 计算，再存为 float32。
        p = torch.arange(max_context_length, dtype=torch.float64)[:, None]
        i = torch.arange(dim)
        angle = p / base ** ((2 * (i // 2)).double() / dim)
        table = torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))
        # buffer 会随 .to(device) 移动、进入 state_dict，但不是参数。
        self.register_buffer("table", table.float())

    def forward(self, seq_len):
        # 公式本可以一直延伸下去，但这张表止于 L。
        if not 0 <= seq_len <= self.max_context_length:
            raise IndexError(f"序列长度 T={seq_len} 超出了 "
                             f"max_context_length={self.max_context_length}")
        return self.table[:seq_len]  # (T, D)


class EmbeddingComposer(nn.Module):
    """token 行 + 位置行：第一个块的唯一输入。"""

    def __init__(self, token_embedding, position_embedding):
        super().__init__()
        self.token = token_embedding
        self.position = position_embedding

    def forward(self, ids):
        tokens = self.token(ids)                 # (B, T, D)
        positions = self.position(ids.shape[1])  # (T, D)
        # 相加而不是拼接：D 保持不变。(1, T, D) 沿 B 广播。
        return tokens + positions.unsqueeze(0)


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
