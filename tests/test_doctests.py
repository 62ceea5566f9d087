"""The examples in docstrings are specifications too: they run."""

import doctest
import importlib

import pytest

MODULES = ("diviml.plan", "diviml.batch_table", "diviml.bounds._energetic", "diviml.bounds._batch", "diviml.bounds._batch_rows", "diviml.solvers", "diviml.solvers.auto", "diviml.solvers.search", "diviml.solvers.engines.layers", "diviml.solvers.engines.arrays", "diviml.frontends.derive", "diviml.generators")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
