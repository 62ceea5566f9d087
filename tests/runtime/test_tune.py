"""diviml tune: schedule, run, calibrate and schedule again until the plan stops changing, keeping the fastest
plan measured."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from diviml import InputError, Objective, Problem, preset  # noqa: E402
from diviml.frontends.pytorch import profile_zoo  # noqa: E402
from diviml.runtime import ModelSource, tune  # noqa: E402
from diviml.validate import validate  # noqa: E402

CPU2 = preset("cpu-workers-2")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def gpt():
    return Problem(profile_zoo("gpt-tiny", repeats=1, min_time_s=0.0), CPU2, Objective("latency"))


def test_every_round_is_solved_on_the_previous_runs_calibration_and_the_fastest_is_kept(gpt):
    report = tune("gpt-tiny", gpt, solver="heft", rounds=3, repeats=2, warmup=1)
    assert 1 <= len(report.rounds) <= 3 and (report.converged or len(report.rounds) == 3)
    assert report.rounds[0].graph is gpt.graph and report.rounds[0].platform is CPU2
    for k, r in enumerate(report.rounds):
        assert r.report.outputs_match
        assert validate(r.plan, Problem(r.graph, r.platform, gpt.objective)).ok
        assert r.report.predicted_s == pytest.approx(r.plan.objective)  # predicted on the graph it was solved on
        if k:
            assert "calibrated by a run" in r.graph.name and "calibrated by a run" in r.platform.name
    measured = [r.report.measured_s for r in report.rounds]
    assert report.best_round.report.measured_s == min(measured)
    assert report.to_dict()["speedup_over_first"] == pytest.approx(measured[0] / min(measured))


def test_the_loop_ends_when_the_solver_returns_a_plan_it_ran_already(gpt):
    # two workers of one type: calibration scales both alike, so the best single device stays the same one
    report = tune("gpt-tiny", gpt, solver="best-device", rounds=4, repeats=2, warmup=0)
    assert report.converged and len(report.rounds) == 1 and report.best == 0


def test_a_problem_it_cannot_tune_is_refused(gpt):
    with pytest.raises(InputError, match="rounds must be >= 1"):
        tune("gpt-tiny", gpt, rounds=0)
    with pytest.raises(InputError, match="tune a latency or batch problem"):
        tune("gpt-tiny", Problem(gpt.graph, CPU2, Objective("pipeline")))


def test_the_command_writes_the_fastest_plan_with_the_graph_and_platform_it_was_solved_on(tmp_path):
    g = tmp_path / "g.json"
    assert cli("profile", "gpt-tiny", "--platform", "cpu-workers-2", "--out", g, "--min-time", "0", "--repeats",
               "1", "--quiet").returncode == 0
    out = [tmp_path / "best.json", tmp_path / "bg.json", tmp_path / "bp.yaml"]
    r = cli("tune", "gpt-tiny", g, "--platform", "cpu-workers-2", "--rounds", "2", "--repeats", "2", "--warmup", "0",
            "--time-limit", "2", "--out", out[0], "--graph-out", out[1], "--platform-out", out[2], "--json", "--quiet")
    assert r.returncode == 0, r.stderr
    told = json.loads(r.stdout)
    assert 1 <= len(told["rounds"]) <= 2 and told["written"] == [str(p) for p in out]
    best = told["rounds"][told["best_round"]]
    assert told["best_measured_s"] == best["measured_s"] == min(x["measured_s"] for x in told["rounds"])
    # the files written re-predict the fastest plan as tune did
    again = cli("run", "gpt-tiny", out[0], "--platform", out[2], "--graph", out[1], "--repeats", "1", "--warmup", "0",
                "--json", "--quiet")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["predicted_s"] == pytest.approx(best["predicted_s"])


@pytest.mark.parametrize("args, says", [
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--platform-out", "p.txt"], "give a .yaml, .yml or .json file"),
    (["--batch", "4"], "--batch applies to --objective batch, not latency"),  # not a latency plan without a word
])
def test_bad_requests_get_one_line_and_exit_2_and_write_nothing(tmp_path, args, says):
    g = tmp_path / "g.json"
    g.write_text("{}")  # refused before the graph is read
    r = cli("tune", "gpt-tiny", g, "--platform", "cpu-workers-2", "--out", tmp_path / "best.json", *args)
    assert r.returncode == 2 and says in r.stderr and r.stderr.strip().count("\n") == 0
    assert not (tmp_path / "best.json").exists()


def test_a_graph_of_another_model_is_refused_before_anything_is_written(tmp_path):
    g = tmp_path / "g.json"
    assert cli("profile", "resnet18", "--platform", "cpu-workers-2", "--out", g, "--min-time", "0", "--repeats", "1",
               "--quiet").returncode == 0
    r = cli("tune", "gpt-tiny", g, "--platform", "cpu-workers-2", "--rounds", "1", "--out", tmp_path / "best.json",
            "--quiet")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "give the graph profiled from this model" in r.stderr
    assert not (tmp_path / "best.json").exists()


def test_the_rounds_run_one_capture_of_the_model(gpt):
    from diviml.frontends import zoo
    model, builds = zoo.get("gpt-tiny"), []
    source = ModelSource("gpt-tiny", lambda: builds.append(1) or model.build(), model.inputs)
    report = tune(source, gpt, solver="heft", rounds=2, repeats=2, warmup=0)
    assert all(r.report.outputs_match for r in report.rounds)
    assert len(builds) == 1  # each round cuts the same program by its plan
