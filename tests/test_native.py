"""Native libraries' prints: kept off stdout (which ``--json`` owns), or discarded where they tell a user nothing."""

import os

from diviml.native import native_output_discarded, native_stdout_to_stderr


def test_what_a_native_library_writes_on_either_descriptor_is_discarded(capfd):
    with native_output_discarded():
        os.write(1, b"HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\n")
        os.write(2, b"Cannot bisect a graph with 0 vertices\n")
    os.write(1, b"after\n")
    out, err = capfd.readouterr()
    assert out == "after\n" and err == ""


def test_what_a_native_library_writes_on_stdout_goes_to_stderr(capfd):
    with native_stdout_to_stderr():
        os.write(1, b"Set parameter Username\n")
    print("plan", flush=True)
    out, err = capfd.readouterr()
    assert out == "plan\n" and err == "Set parameter Username\n"


def test_the_streams_are_restored_when_the_call_inside_raises(capfd):
    try:
        with native_output_discarded():
            raise ValueError("inside")
    except ValueError:
        pass
    os.write(1, b"out\n")
    os.write(2, b"err\n")
    assert capfd.readouterr() == ("out\n", "err\n")
