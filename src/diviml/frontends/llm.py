"""Large language models as graphs of one serving phase: a prefill of a prompt, or one decoding step against a
KV cache.

A decoder-only transformer written with torch.nn, sized by :class:`DecoderConfig` (GPT-3: LayerNorm, GELU,
learned positions, as many key/value heads as query heads; Llama 2: RMSNorm, SwiGLU, grouped-query attention
with fewer key/value heads). Rotary position embeddings are left out (elementwise work, well under 1% of a
layer's). Both phases return the logits of the last position.

- ``prefill``: ``sequence`` tokens per request, causal attention over them.
- ``decode``: one new token per request, attending over a KV cache of ``context`` positions held as buffers
  (resident memory of the tasks that read them: weights plus 2 x layers x batch x kv_heads x context x head_dim
  values) and over its own key and value. The cache is read, not copied: scores over the cache and over the
  new token are joined, as an in-place cache update would leave them. The cache belongs to ``batch``
  requests, so a decode model is built for one batch size.

Built on the meta device by ``diviml profile --device none``: nothing is allocated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ._torch import import_torch

__all__ = ["DecoderConfig", "DECODERS", "decoder", "PHASES"]

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class DecoderConfig:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    style: str  # "gpt": LayerNorm, GELU, learned positions; "llama": RMSNorm, SwiGLU
    max_positions: int
    source: str


DECODERS = {
    "gpt3-175b": DecoderConfig(96, 12288, 96, 96, 4 * 12288, 50257, "gpt", 2048,
                               "Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1 (GPT-3 175B)"),
    "llama2-7b": DecoderConfig(32, 4096, 32, 32, 11008, 32000, "llama", 4096,
                               "Touvron et al. 2023, Llama 2, and meta-llama/Llama-2-7b-hf config.json"),
    "llama2-70b": DecoderConfig(80, 8192, 64, 8, 28672, 32000, "llama", 4096,
                                "Touvron et al. 2023, Llama 2 (grouped-query attention, 8 KV heads), and "
                                "meta-llama/Llama-2-70b-hf config.json"),
    "llama-tiny": DecoderConfig(2, 64, 4, 2, 176, 1000, "llama", 64, "a small configuration for tests"),
}


DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def decoder(cfg: DecoderConfig, phase: str = "prefill", *, sequence: int = 2048, context: int = 2048,
            batch: int = 1, dtype: str = "fp32"):
    """The model of one phase (see the module docstring); ``batch`` sizes the decode phase's cache;
    ``dtype`` (fp32, fp16, bf16) is its weights', activations' and cache's."""
    if dtype not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}: choose {', '.join(DTYPES)}")
    if phase not in PHASES:
        raise InputError(f"unknown phase {phase!r}: choose prefill or decode")
    if sequence < 1 or context < 1 or batch < 1:
        raise InputError(f"the prompt (--seq), the cache's context (--context) and the batch must each be at least 1, "
                         f"got {sequence}, {context} and {batch}")
    if phase == "prefill" and sequence > cfg.max_positions:
        raise InputError(f"a prompt of {sequence} tokens is longer than the model's {cfg.max_positions} positions")
    cache = (batch, cfg.kv_heads, context, cfg.hidden // cfg.heads) if phase == "decode" else None
    model = _decoder_class(cfg, _block_class(cfg, cache), cache)()
    return model.to(getattr(import_torch(), DTYPES[dtype]))


def _block_class(cfg: DecoderConfig, cache: tuple | None):
    """The module class of one layer: attention (over the cache too when there is one) and the MLP."""
    torch = import_torch()
    nn: Any = torch.nn  # torch is imported at call time, so its classes are Any to the type checker
    head_dim = cfg.hidden // cfg.heads

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            norm = nn.LayerNorm if cfg.style == "gpt" else nn.RMSNorm
            self.norm1, self.norm2 = norm(cfg.hidden), norm(cfg.hidden)
            bias = cfg.style == "gpt"
            self.q = nn.Linear(cfg.hidden, cfg.heads * head_dim, bias=bias)
            self.k = nn.Linear(cfg.hidden, cfg.kv_heads * head_dim, bias=bias)
            self.v = nn.Linear(cfg.hidden, cfg.kv_heads * head_dim, bias=bias)
            self.o = nn.Linear(cfg.heads * head_dim, cfg.hidden, bias=bias)
            if cfg.style == "gpt":
                self.up, self.down = nn.Linear(cfg.hidden, cfg.ffn), nn.Linear(cfg.ffn, cfg.hidden)
            else:
                self.gate = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
                self.up = nn.Linear(cfg.hidden, cfg.ffn, bias=False)
                self.down = nn.Linear(cfg.ffn, cfg.hidden, bias=False)
            if cache is not None:
                self.register_buffer("k_cache", torch.zeros(cache))
                self.register_buffer("v_cache", torch.zeros(cache))

        def mlp(self, x):
            if cfg.style == "gpt":
                return self.down(nn.functional.gelu(self.up(x)))
            return self.down(nn.functional.silu(self.gate(x)) * self.up(x))

        def attention(self, x):
            b, t, _ = x.shape
            group = cfg.heads // cfg.kv_heads  # query heads per key/value head, kv-major
            q = self.q(x).view(b, t, cfg.kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
            q = q.reshape(b, cfg.kv_heads, group * t, head_dim) / math.sqrt(head_dim)
            k = self.k(x).view(b, t, cfg.kv_heads, head_dim).transpose(1, 2)
            v = self.v(x).view(b, t, cfg.kv_heads, head_dim).transpose(1, 2)
            scores = q @ k.transpose(-1, -2)  # [b, kv, group * t, t]
            if cache is None:
                causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                scores = scores.view(b, cfg.kv_heads, group, t, t).masked_fill(causal, float("-inf"))
                out = torch.softmax(scores, -1).view(b, cfg.kv_heads, group * t, t) @ v
            else:  # one new token: over the cache, read in place, and over itself
                context = cache[2]
                joined = torch.cat([q @ self.k_cache.transpose(-1, -2), scores], -1)
                weights = torch.softmax(joined, -1)
                out = weights[..., :context] @ self.v_cache + weights[..., context:] @ v
            out = out.view(b, cfg.kv_heads, group, t, head_dim).permute(0, 3, 1, 2, 4).reshape(b, t, -1)
            return self.o(out)

        def forward(self, x):
            x = x + self.attention(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    return Block


def _decoder_class(cfg: DecoderConfig, block, cache: tuple | None):
    """The module class of the model: embedding (and GPT's learned positions), the layers, the last
    position's logits."""
    torch = import_torch()
    nn: Any = torch.nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
            if cfg.style == "gpt":
                self.position = nn.Embedding(cfg.max_positions, cfg.hidden)
            self.blocks = nn.ModuleList(block() for _ in range(cfg.layers))
            self.norm = nn.LayerNorm(cfg.hidden) if cfg.style == "gpt" else nn.RMSNorm(cfg.hidden)
            self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

        def forward(self, tokens):
            x = self.embed(tokens)
            if cfg.style == "gpt":
                start = cache[2] if cache is not None else 0
                positions = torch.arange(start, start + tokens.shape[1], device=tokens.device) % cfg.max_positions
                x = x + self.position(positions)
            for layer in self.blocks:
                x = layer(x)
            return self.head(self.norm(x[:, -1]))

    return Decoder


def parameters(cfg: DecoderConfig) -> float:
    """Parameters of the model, for its summary."""
    attention = cfg.hidden * (cfg.heads + 2 * cfg.kv_heads) * (cfg.hidden // cfg.heads) + cfg.hidden ** 2
    mlp = (2 if cfg.style == "gpt" else 3) * cfg.hidden * cfg.ffn
    return cfg.layers * (attention + mlp) + 2 * cfg.vocab * cfg.hidden
