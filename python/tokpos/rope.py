"""Rotary position embeddings (RoPE)."""

__all__: list[str] = []
