"""Model zoo by name: torchvision CNNs and vision transformers (random weights, nothing downloaded), randomly
wired networks (Xie et al. 2019: WS, ER and BA generators, seeded), GPT-style decoders / BERT-style encoders
built from torch.nn and sized by config, and HuggingFace BERT and GPT-2 (default configs, random weights).
Names: ``diviml models``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import InputError
from ._torch import import_torch


@dataclass(frozen=True)
class ModelSpec:
    name: str
    summary: str
    build: Callable[[], object]  # -> torch.nn.Module
    inputs: Callable[[int], tuple]  # batch size -> example inputs




def _images(size: int) -> Callable[[int], tuple]:
    """Example inputs of an image model: a seeded batch of size x size RGB images."""
    def inputs(batch: int):
        torch = import_torch()
        return (torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0)),)
    return inputs


# -- torchvision ---------------------------------------------------------------------------------------
def _vision(name: str, size: int, **kw) -> ModelSpec:
    def build():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw)

    return ModelSpec(name, f"torchvision {name}, random weights, {size}x{size} input", build, _images(size))


# -- transformers ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TransformerConfig:
    layers: int
    hidden: int
    heads: int
    vocab: int = 50257
    sequence: int = 128


GPT = {"gpt-tiny": TransformerConfig(2, 128, 4, 1000, 32), "gpt2-small": TransformerConfig(12, 768, 12),
       "gpt2-medium": TransformerConfig(24, 1024, 16)}
BERT = {"bert-tiny": TransformerConfig(2, 128, 2, 1000, 32), "bert-base": TransformerConfig(12, 768, 12, 30522),
        "bert-large": TransformerConfig(24, 1024, 16, 30522)}


def transformer(cfg: TransformerConfig, causal: bool):
    torch = import_torch()
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(cfg.hidden)
            self.attn = nn.MultiheadAttention(cfg.hidden, cfg.heads, batch_first=True)
            self.ln2 = nn.LayerNorm(cfg.hidden)
            self.mlp = nn.Sequential(nn.Linear(cfg.hidden, 4 * cfg.hidden), nn.GELU(), nn.Linear(4 * cfg.hidden, cfg.hidden))

        def forward(self, x, mask):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
            self.position = nn.Parameter(torch.zeros(1, cfg.sequence, cfg.hidden))
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.hidden)
            self.head = nn.Linear(cfg.hidden, cfg.vocab if causal else cfg.hidden)
            mask = torch.triu(torch.full((cfg.sequence, cfg.sequence), float("-inf")), 1) if causal else None
            self.register_buffer("mask", mask if mask is not None else torch.zeros(cfg.sequence, cfg.sequence))

        def forward(self, tokens):
            x = self.embed(tokens) + self.position
            for block in self.blocks:
                x = block(x, self.mask)
            return self.head(self.ln(x))

    return Model()


def _transformer_spec(name: str, cfg: TransformerConfig, causal: bool) -> ModelSpec:
    def inputs(batch: int):
        torch = import_torch()
        return (torch.randint(0, cfg.vocab, (batch, cfg.sequence), generator=torch.Generator().manual_seed(0)),)

    kind = "GPT-style decoder" if causal else "BERT-style encoder"
    params = cfg.layers * 12 * cfg.hidden ** 2 + cfg.vocab * cfg.hidden
    return ModelSpec(name, f"{kind}: {cfg.layers} layers, hidden {cfg.hidden}, {cfg.heads} heads, sequence "
                     f"{cfg.sequence}, about {params / 1e6:.0f}M parameters", lambda: transformer(cfg, causal), inputs)


# -- large language models, one serving phase each (frontends/llm.py) -------------------------------------
PREFILL_TOKENS = 2048  # a zoo LLM's prompt unless the phase is chosen (diviml profile --phase/--seq/--context)


def llm_spec(name: str, phase: str = "prefill", *, sequence: int | None = None, context: int = 2048,
             batch: int | None = None, dtype: str = "fp32") -> ModelSpec:
    """The LLM ``name`` (:data:`.llm.DECODERS`) in one phase: a prefill of ``sequence`` tokens (any batch;
    default :data:`PREFILL_TOKENS`, or the model's positions where it has fewer), or a decoding step over a
    ``context``-token cache for ``batch`` requests (the cache fixes the batch), its numbers in ``dtype``
    (fp32, fp16, bf16)."""
    from .llm import DECODERS, DTYPES, decoder, parameters
    if name not in DECODERS:
        raise InputError(f"--phase, --seq, --context and --dtype apply to the language models "
                         f"{', '.join(DECODERS)}, not {name!r}")
    if dtype not in DTYPES:
        raise InputError(f"unknown --dtype {dtype!r}: choose {', '.join(DTYPES)}")
    cfg = DECODERS[name]
    default = min(PREFILL_TOKENS, cfg.max_positions)
    sequence = default if sequence is None else sequence
    if phase == "decode":
        fixed = batch or 1
        label = f"{name}-decode-c{context}-b{fixed}"
        summary = f"one decoding step of {fixed} request(s) over a {context}-token KV cache"
    else:
        fixed, label, summary = None, name if sequence == default else f"{name}-prefill-s{sequence}", \
            f"prefill of {sequence} tokens"
    if dtype != "fp32":
        label, summary = f"{label}-{dtype}", f"{summary}, in {dtype.upper()}"

    def inputs(b: int):
        if fixed is not None and b != fixed:
            raise InputError(f"{label}'s KV cache holds {fixed} request(s): profile it at --batch {fixed}")
        torch = import_torch()
        tokens = 1 if phase == "decode" else sequence
        return (torch.randint(0, cfg.vocab, (b, tokens), generator=torch.Generator().manual_seed(0)),)

    return ModelSpec(label, f"{cfg.style.upper() if cfg.style == 'gpt' else 'Llama'}-style decoder, {cfg.layers} "
                     f"layers, hidden {cfg.hidden}, {cfg.heads} heads ({cfg.kv_heads} key/value), about "
                     f"{parameters(cfg) / 1e9:.3g}B parameters: {summary} ({cfg.source})",
                     lambda: decoder(cfg, phase, sequence=sequence, context=context, batch=fixed or 1, dtype=dtype),
                     inputs)


# -- randomly wired networks ------------------------------------------------------------------------------
def random_dag(generator: str, nodes: int, seed: int) -> list[tuple[int, int]]:
    """Edges (i < j) of a WS(k=4, p=0.75), ER(p=0.2) or BA(m=5) graph oriented by node index (Xie et al.)."""
    import networkx as nx
    if generator == "ws":
        g = nx.connected_watts_strogatz_graph(nodes, 4, 0.75, seed=seed)
    elif generator == "er":
        g = nx.gnp_random_graph(nodes, 0.2, seed=seed)
    elif generator == "ba":
        g = nx.barabasi_albert_graph(nodes, min(5, nodes - 1), seed=seed)
    else:
        raise InputError(f"unknown random graph generator {generator!r}: use ws, er or ba")
    return sorted((min(a, b), max(a, b)) for a, b in g.edges)


def randwire(generator: str, nodes: int = 32, channels: int = 32, stages: int = 2, seed: int = 0, classes: int = 10,
             regime: str = "tiny"):
    """A randomly wired network: ``stages`` random stages of ``nodes`` nodes each (ReLU, separable 3x3
    convolution, batch norm; inputs summed with learned sigmoid weights; the first node(s) stride 2).

    ``regime="tiny"``: one strided stem convolution, stages of ``channels`` x 1, 2, ... and a linear
    classifier (CIFAR-sized, launch-bound on GPUs). ``regime="small"``: Xie et al.'s small regime (their
    Table 1): conv1 3x3/2 to C/2, conv2 3x3/2 to C, random stages of N/2, N, N nodes at C, 2C, 4C (``stages``
    of them), a 1x1 convolution to 1280 channels, global pooling and a linear classifier."""
    torch = import_torch()
    if regime not in ("tiny", "small"):
        raise InputError(f"unknown randwire regime {regime!r}: use tiny or small")
    nn = torch.nn
    stage_class = _randwire_stage(torch, generator)

    def conv_bn(c_in: int, c_out: int, kernel: int, stride: int, relu: bool) -> list:
        layers = [nn.ReLU()] if relu else []
        return layers + [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False), nn.BatchNorm2d(c_out)]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            small = regime == "small"
            widths = [channels * 2 ** i for i in range(stages)]
            sizes = [nodes // 2] + [nodes] * (stages - 1) if small else [nodes] * stages
            stem = (conv_bn(3, channels // 2, 3, 2, False) + conv_bn(channels // 2, channels, 3, 2, True) if small
                    else conv_bn(3, channels, 3, 2, False))
            self.stem = nn.Sequential(*stem)
            self.stages = nn.Sequential(*[stage_class(n, widths[max(i - 1, 0)], widths[i], seed * 100 + i)
                                          for i, n in enumerate(sizes)])
            self.top = nn.Sequential(*conv_bn(widths[-1], 1280, 1, 1, True), nn.ReLU()) if small else nn.Identity()
            self.head = nn.Linear(1280 if small else widths[-1], classes)

        def forward(self, x):
            x = self.top(self.stages(self.stem(x)))
            return self.head(x.mean(dim=(2, 3)))

    return Net()


def _randwire_stage(torch, generator: str):
    """The module class of a random stage: nodes wired by ``generator`` (ReLU, separable 3x3 convolution,
    batch norm; inputs summed with learned sigmoid weights), its sinks averaged."""
    nn = torch.nn

    class Node(nn.Module):
        def __init__(self, n_in: int, c_in: int, c_out: int, stride: int):
            super().__init__()
            self.weights = nn.Parameter(torch.zeros(max(n_in, 1)))
            self.op = nn.Sequential(nn.ReLU(), nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False),
                                    nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out))

        def forward(self, *xs):
            w = torch.sigmoid(self.weights)
            x = xs[0] * w[0]
            for i in range(1, len(xs)):
                x = x + xs[i] * w[i]
            return self.op(x)

    class Stage(nn.Module):
        def __init__(self, size: int, c_in: int, c_out: int, stage_seed: int):
            super().__init__()
            edges = random_dag(generator, size, stage_seed)
            self.preds = [[a for a, b in edges if b == j] for j in range(size)]
            succs = {a for a, _ in edges}
            self.sinks = [j for j in range(size) if j not in succs]
            self.nodes = nn.ModuleList(
                Node(len(p), c_out if p else c_in, c_out, 1 if p else 2) for p in self.preds)

        def forward(self, x):
            out = []
            for j, p in enumerate(self.preds):
                out.append(self.nodes[j](*[out[i] for i in p]) if p else self.nodes[j](x))
            y = out[self.sinks[0]]
            for s in self.sinks[1:]:
                y = y + out[s]
            return y / len(self.sinks)

    return Stage


def _randwire_spec(generator: str, seed: int) -> ModelSpec:
    return ModelSpec(f"randwire-{generator}-s{seed}",
                     f"randomly wired network ({generator.upper()} graphs, 32 nodes per stage, 2 stages, seed {seed}), "
                     "64x64 input", lambda: randwire(generator, seed=seed), _images(64))


def _randwire_small_spec(generator: str, seed: int) -> ModelSpec:
    return ModelSpec(f"randwire-{generator}-small-s{seed}",
                     f"randomly wired network, Xie et al.'s small regime ({generator.upper()} graphs, C=78, "
                     f"stages of 16, 32, 32 nodes, seed {seed}), 224x224 input, 1000 classes",
                     lambda: randwire(generator, channels=78, stages=3, seed=seed, classes=1000, regime="small"),
                     _images(224))


# -- HuggingFace transformers (the package from PyPI, default configs, random weights, nothing downloaded) --------
def _hf_spec(name: str, summary: str, make: Callable[[object], object], vocab: int, sequence: int = 128) -> ModelSpec:
    def build():
        try:
            import transformers
        except ImportError:
            raise InputError(f"{name} needs the transformers package: pip install transformers") from None
        import_torch().manual_seed(0)
        return make(transformers).eval()

    def inputs(batch: int):
        torch = import_torch()
        return (torch.randint(0, vocab, (batch, sequence), generator=torch.Generator().manual_seed(0)),)

    return ModelSpec(name, f"{summary}, random weights, sequence {sequence} (needs transformers)", build, inputs)


def _registry() -> dict[str, ModelSpec]:
    specs = [
        _vision("resnet50", 224), _vision("googlenet", 224, aux_logits=False, init_weights=False),
        _vision("inception_v3", 299, aux_logits=False, init_weights=False), _vision("vgg16", 224),
        _vision("mobilenet_v3_large", 224), _vision("densenet121", 224), _vision("resnet18", 224),
        _vision("efficientnet_b0", 224), _vision("convnext_tiny", 224), _vision("vit_b_16", 224),
        _vision("swin_t", 224),
    ]
    specs += [_hf_spec("hf-bert-base", "HuggingFace BertModel, bert-base config (12 layers, hidden 768)",
                       lambda t: t.BertModel(t.BertConfig()), 30522),
              _hf_spec("hf-gpt2", "HuggingFace GPT2LMHeadModel, gpt2 config (12 layers, hidden 768)",
                       lambda t: t.GPT2LMHeadModel(t.GPT2Config()), 50257)]
    specs += [_transformer_spec(n, c, True) for n, c in GPT.items()]
    from .llm import DECODERS
    specs += [llm_spec(n) for n in DECODERS]
    specs += [_transformer_spec(n, c, False) for n, c in BERT.items()]
    specs += [_randwire_spec(g, s) for g in ("ws", "er", "ba") for s in range(3)]
    specs += [_randwire_small_spec(g, s) for g in ("ws", "er", "ba") for s in range(3)]
    return {s.name: s for s in specs}


MODELS = _registry()


def get(name: str) -> ModelSpec:
    if name not in MODELS:
        raise InputError(f"unknown model {name!r}: choose one of {', '.join(MODELS)} (see 'diviml models')")
    return MODELS[name]

