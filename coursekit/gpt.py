"""A tiny GPT: the decoder-only transformer of real language models, small enough for a CPU.

Token and position embeddings, pre-norm blocks of causal self-attention and an MLP, a final
LayerNorm and a linear head: the shape of GPT-2 and nanoGPT, with some 30 000 parameters.
LayerNorm normalises each position on its own, so unlike BatchNorm it makes a micro-batch's
gradient independent of the other samples: accumulation can match the big batch exactly.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from coursekit.arguments import whole
from coursekit.environment import seeded


class Block(nn.Module):
    """One pre-norm transformer block: ``x + attention(norm(x))``, then ``x + mlp(norm(x))``."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(dim, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, dim))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """Token ids ``(batch, seq)`` to next-token logits ``(batch, seq, vocab_size)``."""

    def __init__(
        self, vocab_size: int, context: int, dim: int = 32, heads: int = 2, layers: int = 2
    ):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be a multiple of heads ({heads}).")
        self.context = context
        self.tokens = nn.Embedding(vocab_size, dim)
        self.positions = nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*(Block(dim, heads) for _ in range(layers)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        if length > self.context:
            raise ValueError(f"Sequences of {length} tokens exceed the context of {self.context}.")
        positions = torch.arange(length, device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        return self.head(self.norm(self.blocks(x)))


def tiny_gpt(
    vocab_size: int,
    context: int,
    dim: int = 32,
    heads: int = 2,
    layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> TinyGPT:
    """A :class:`TinyGPT` initialised from ``seed`` (locally: the global generator is kept)."""
    vocab_size, context = whole("vocab_size", vocab_size), whole("context", context)
    dim, heads = whole("dim", dim), whole("heads", heads)
    layers = whole("layers", layers, minimum=0)  # 0: embeddings and head only
    if dim % heads:
        raise ValueError(f"dim ({dim}) must be a multiple of heads ({heads}).")
    with seeded(seed):
        model = TinyGPT(vocab_size, context, dim, heads, layers)
    return model.to(dtype)


@torch.no_grad()
def generate(model: TinyGPT, prompt: list[int], new_tokens: int, seed: int = 0) -> list[int]:
    """``prompt`` continued by ``new_tokens`` tokens sampled from the model (seeded)."""
    new_tokens = whole("new_tokens", new_tokens, minimum=0)
    generator = torch.Generator().manual_seed(whole("seed", seed, minimum=None))
    device = next(model.parameters()).device
    ids = list(prompt)
    was_training = model.training
    model.eval()
    try:
        for _ in range(new_tokens):
            window = torch.tensor([ids[-model.context :]], device=device)
            probabilities = model(window)[0, -1].float().softmax(-1).cpu()
            ids.append(int(torch.multinomial(probabilities, 1, generator=generator)))
    finally:
        model.train(was_training)
    return ids
