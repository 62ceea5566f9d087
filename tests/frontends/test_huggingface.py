"""HuggingFace models (transformers from PyPI, small configs built here, no weights downloaded) capture at
batch 1 and 8 as one graph, and a plan over two CPU workers gives their outputs."""

import random

import pytest
import torch
import transformers  # the test extra installs it: a missing one fails here, loudly

import diviml
from diviml import Assignment, Objective, Plan, Problem, preset
from diviml.frontends.pytorch import capture_at, profile
from diviml.runtime import ModelSource, run
from diviml.simulate import schedule


def gpt2():
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config).eval()  # returns a DynamicCache beside the logits


def bert():
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=1000, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def tokens(batch: int):
    return (torch.randint(0, 1000, (batch, 16), generator=torch.Generator().manual_seed(batch)),)


@pytest.mark.parametrize("build", [gpt2, bert])
def test_captures_at_batch_1_and_8_as_one_graph_with_the_modules_outputs(build):
    model = build()
    one, eight = capture_at(model, tokens, 1), capture_at(model, tokens, 8)
    assert one.method == "export" and one.dynamic_batch and eight.dynamic_batch
    assert [n.name for n in one.gm.graph.nodes] == [n.name for n in eight.gm.graph.nodes]
    for captured, batch in ((one, 1), (eight, 8)):
        ours = captured.run()[0]
        with torch.no_grad():
            theirs = model(*tokens(batch))[0]
        assert torch.allclose(ours, theirs, atol=1e-5)


@pytest.mark.parametrize("build", [gpt2, bert])
def test_a_random_two_worker_plan_runs_and_matches(build):
    source = ModelSource(build.__name__, build, tokens)
    graph = profile(build, tokens, name=build.__name__, batches=(1, 8), repeats=1, min_time_s=0.0)
    problem = Problem(graph, preset("cpu-workers-2"), Objective("latency"))
    rng = random.Random(0)
    parts = {t.id: [(rng.choice(["worker0", "worker1"]), 1)] for t in graph.tasks}
    timed = schedule(problem, parts)
    plan = Plan("latency", tuple(Assignment(j.task, j.device, j.start) for j in timed.jobs), timed.makespan, 0.0,
                "feasible", "random")
    report = run(source, plan, preset("cpu-workers-2"), problem=problem, repeats=1, warmup=0)
    assert report.outputs_match and report.pieces > 2
    assert diviml.solve(Problem(graph, preset("paper-server"), Objective("batch", 8)), "heft", time_limit=10)
