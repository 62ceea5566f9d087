"""The model a plan runs, from a zoo name or the user's own factory."""

import pytest

from diviml.runtime import model_source

torch = pytest.importorskip("torch")


def test_a_factory_with_random_weights_and_inputs_builds_the_same_model_in_every_process(tmp_path):
    # each rank of 'diviml run --nproc N' calls the factory itself: unseeded, the ranks' weights and inputs
    # would differ, and a split plan would mix them
    (tmp_path / "net.py").write_text(
        "import torch\n"
        "def make():\n"
        "    return torch.nn.Linear(8, 8), (torch.randn(1, 8),)\n")
    first, second = (model_source(f"{tmp_path / 'net.py'}:make") for _ in range(2))
    assert torch.equal(first.build().weight, second.build().weight)
    assert torch.equal(first.inputs(1)[0], second.inputs(1)[0])
