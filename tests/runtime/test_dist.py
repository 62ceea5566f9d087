"""Values crossing torch.distributed ranks: each keeps the memory layout it was made with, so the operators
after it run on the other rank as they run in the unsplit program."""

import json
import subprocess
import sys

import pytest
from test_run import plan_from_placement

from diviml import Objective, Problem, preset
from diviml.runtime import model_source
from diviml.runtime._dist import memory_order

torch = pytest.importorskip("torch")


def test_a_contiguous_tensor_is_sent_in_its_own_order():
    t = torch.zeros(2, 3, 4)
    assert memory_order(t.shape, t.stride()) == (0, 1, 2)


def test_a_permuted_tensor_is_sent_in_its_memory_order_and_rebuilt_with_its_strides():
    t = torch.arange(24.0).reshape(2, 3, 4).permute(2, 0, 1)
    order = memory_order(t.shape, t.stride())
    assert order == (1, 2, 0)
    sent = t.permute(order).contiguous()  # as Comm.send makes it, one contiguous buffer
    back = sent.permute(sorted(range(3), key=order.__getitem__))  # as Comm.recv rebuilds it
    assert torch.equal(back, t) and back.stride() == t.stride()


@pytest.mark.parametrize("make", [
    lambda: torch.zeros(3, 1).expand(3, 4),  # stride 0: not dense
    lambda: torch.zeros(4, 6)[:, ::2],  # a strided slice: gaps between elements
    lambda: torch.zeros(4, 6)[:, :3],  # a narrowed slice: gaps between rows
])
def test_a_tensor_that_is_not_dense_is_sent_contiguous(make):
    t = make()
    assert memory_order(t.shape, t.stride()) == tuple(range(t.dim()))


def test_size_one_dimensions_and_scalars_are_dense_whatever_their_stride():
    t = torch.zeros(5, 1, 7).permute(2, 1, 0)
    assert sorted(memory_order(t.shape, t.stride())) == [0, 1, 2]
    assert memory_order((), ()) == ()


@pytest.mark.slow  # two ranks start torch: over 20 s on 2 cores
def test_a_permuted_value_read_by_a_view_on_another_rank_gives_the_unsplit_modules_outputs(tmp_path):
    # found on a lent H200 (a random gpt-tiny plan over the CPU and the GPU as two ranks): the value arrived
    # contiguous, the permute after it made a layout 'view' cannot read, and the rank's error was hidden by
    # its peer's 30 s wait for a value never sent
    (tmp_path / "transposed.py").write_text(
        "import torch\n"
        "class Transposed(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        a = (x + 1).permute(0, 2, 1)\n"
        "        return a.permute(0, 2, 1).view(1, 128) * 2\n"
        "def make():\n"
        "    return Transposed(), (torch.randn(1, 8, 16),)\n")
    source = f"{tmp_path / 'transposed.py'}:make"
    from diviml.frontends.pytorch import profile
    m = model_source(source)
    problem = Problem(profile(m.build, m.inputs, name="transposed", repeats=1, min_time_s=0.0),
                      preset("cpu-workers-2"), Objective("latency"))
    first = {"x", "add", "permute"}
    plan_from_placement(problem, {t.id: "worker0" if t.id in first else "worker1"
                                  for t in problem.graph.tasks}).save(tmp_path / "plan.json")
    r = subprocess.run([sys.executable, "-m", "diviml", "run", source, tmp_path / "plan.json", "--platform",
                        "cpu-workers-2", "--nproc", "2", "--repeats", "1", "--json", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["outputs_match"] is True and out["world_size"] == 2
