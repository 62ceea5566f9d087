"""Language models in one serving phase: a decoding step over a KV cache computes what the prefill computes for
that token, and the graph holds the weights and the cache as resident memory."""

import subprocess
import sys

import pytest
import torch

from diviml.frontends import zoo
from diviml.frontends.llm import DECODERS, DecoderConfig, decoder
from diviml.frontends.pytorch import profile

GPT_TINY = DecoderConfig(2, 64, 4, 4, 256, 1000, "gpt", 64, "test")


def _prompt_cache(model, cfg, tokens):
    """Each block's keys and values for ``tokens``, as a decode model's cache holds them."""
    kept = {}
    hooks = [getattr(block, part).register_forward_hook(
        lambda _m, _i, out, key=(k, part): kept.__setitem__(key, out))
        for k, block in enumerate(model.blocks) for part in ("k", "v")]
    with torch.no_grad():
        model(tokens)
    for h in hooks:
        h.remove()
    b, t = tokens.shape
    shape = (b, t, cfg.kv_heads, cfg.hidden // cfg.heads)
    return {key: out.view(shape).transpose(1, 2) for key, out in kept.items()}


@pytest.mark.parametrize("cfg", [DECODERS["llama-tiny"], GPT_TINY], ids=["llama-gqa", "gpt"])
def test_a_decoding_step_over_the_prompts_cache_gives_the_prefills_last_logits(cfg):
    torch.manual_seed(0)
    tokens = torch.randint(0, cfg.vocab, (3, 9))
    full = decoder(cfg, "prefill", sequence=9).eval()
    step = decoder(cfg, "decode", context=8, batch=3).eval()
    step.load_state_dict(full.state_dict(), strict=False)  # the same weights; the caches are the step's own
    for (k, part), value in _prompt_cache(full, cfg, tokens[:, :8]).items():
        getattr(step.blocks[k], f"{part}_cache").copy_(value)
    with torch.no_grad():
        assert torch.allclose(step(tokens[:, 8:]), full(tokens), atol=1e-5, rtol=1e-4)


def test_the_decode_graph_holds_the_weights_and_the_kv_cache_of_its_batch_and_context():
    cfg = DECODERS["llama-tiny"]  # grouped-query: 2 key/value heads for 4 query heads
    spec = zoo.llm_spec("llama-tiny", "decode", context=24, batch=3)
    graph = profile(spec.build, spec.inputs, name=spec.name, batches=(3,), measured_type=None,
                    analytic_types=("a100",), device="cpu", repeats=1)
    weights = sum(p.numel() for p in spec.build().parameters()) * 4
    cache = 2 * cfg.layers * 3 * cfg.kv_heads * 24 * (cfg.hidden // cfg.heads) * 4
    assert sum(t.memory_bytes for t in graph.tasks) == weights + cache
    assert {t.module.split(".")[1] for t in graph.tasks if t.module and t.module.startswith("blocks.")} == {"0", "1"}


def test_prefill_costs_grow_with_the_prompt_and_llama_70b_has_its_published_size():
    from diviml.frontends.llm import parameters
    assert 68e9 < parameters(DECODERS["llama2-70b"]) < 70e9 and 174e9 < parameters(DECODERS["gpt3-175b"]) < 176e9
    short, long = (zoo.llm_spec("llama-tiny", "prefill", sequence=s) for s in (8, 32))
    flops = [sum(t.flops or 0 for t in profile(m.build, m.inputs, name=m.name, measured_type=None,
                                                analytic_types=("a100",), repeats=1).tasks) for m in (short, long)]
    assert 3.5 * flops[0] < flops[1]  # four times the tokens: the projections four times, attention more


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "diviml", *args], capture_output=True, text=True, timeout=300)


def test_the_cli_profiles_a_phase_and_refuses_phases_of_models_that_have_none(tmp_path):
    out = _cli("profile", "llama-tiny", "--phase", "decode", "--context", "16", "--batch", "2", "--device", "none",
               "--out", str(tmp_path / "d.json"), "--quiet")
    assert out.returncode == 0 and (tmp_path / "d.json").exists()
    for bad, says in ((["resnet50", "--phase", "decode"], "language models"),
                      (["llama-tiny", "--phase", "prefill", "--context", "16"], "--seq sizes a prefill"),
                      (["llama-tiny", "--phase", "decode", "--batch", "1,2"], "one batch size"),
                      (["llama-tiny", "--seq", "100"], "longer than the model's 64 positions")):
        out = _cli("profile", *bad, "--device", "none", "--out", str(tmp_path / "x.json"))
        assert out.returncode == 2 and says in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("flags", [["--seq", "0"], ["--context", "0"], ["--phase", "decode", "--context", "0"]])
def test_a_prompt_or_cache_of_zero_tokens_is_refused_not_read_as_the_default(tmp_path, flags, capsys):
    from diviml.cli import main
    assert main(["profile", "llama-tiny", *flags, "--device", "none", "--out", str(tmp_path / "x.json")]) == 2
    assert "must each be at least 1, got" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


WIDE = DecoderConfig(1, 4096, 32, 32, 11008, 1000, "llama", 4096, "one Llama-2-7B layer, for costs")


@pytest.mark.parametrize("half", ["bf16", "fp16"])
def test_a_half_precision_decoder_holds_half_the_bytes_and_its_products_run_at_tensor_core_rates(half):
    from diviml.catalogue import spec

    def graph(dtype):
        return profile(lambda: decoder(WIDE, "prefill", sequence=2048, dtype=dtype), lambda b: (torch.zeros(b, 2048, dtype=torch.long),), name=dtype,
                       measured_type=None, analytic_types=("a100", "v100"), repeats=1)
    full, short = graph("fp32"), graph(half)
    # the weights halve; the causal mask (bool) does not
    assert sum(t.memory_bytes for t in short.tasks) == pytest.approx(sum(t.memory_bytes for t in full.tasks) / 2,
                                                                    rel=0.01)
    largest = max(full.tasks, key=lambda t: t.flops or 0)  # the MLP's up-projection: compute-bound on both
    twin = next(t for t in short.tasks if t.id == largest.id)
    assert twin.time["a100"] / largest.time["a100"] == pytest.approx(
        spec("a100").peak_flops / spec("a100").peak("float16" if half == "fp16" else "bfloat16"), rel=0.05)
    v100 = twin.time["v100"] / largest.time["v100"]  # tensor cores for FP16, none for BF16
    assert v100 == pytest.approx(14 / 112, rel=0.05) if half == "fp16" else 0.9 < v100 <= 1.0


def test_the_cli_profiles_a_language_model_in_bf16_and_refuses_dtypes_of_other_models(tmp_path):
    import json
    out = _cli("profile", "llama-tiny", "--dtype", "bf16", "--device", "none", "--out", str(tmp_path / "b.json"),
               "--quiet")
    assert out.returncode == 0
    assert json.loads((tmp_path / "b.json").read_text())["name"].endswith("-bf16")
    out = _cli("profile", "resnet18", "--dtype", "bf16", "--device", "none", "--out", str(tmp_path / "x.json"))
    assert out.returncode == 2 and "language models" in out.stderr and not (tmp_path / "x.json").exists()
