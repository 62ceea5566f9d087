"""The CLI as a user runs it: a real subprocess, exit codes, one-line errors, no partial files."""

import json
import subprocess
import sys

import pytest
from conftest import REPO

EXAMPLE = str(REPO / "examples" / "layered40.json")


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "diviml", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_schedule_json_prints_one_object_with_the_promised_fields(tmp_path):
    r = run("schedule", EXAMPLE, "--json", "--out", tmp_path / "plan.json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["solver"] == "exact" and out["status"] == "optimal"  # auto's choice for 40 tasks
    assert "40 tasks" in out["chosen_because"]
    assert {"objective", "bound", "gap", "status", "solver", "solve_time_s"} <= set(out)
    assert out["bound"] <= out["objective"]
    v = run("validate", EXAMPLE, tmp_path / "plan.json", "--json")
    assert v.returncode == 0 and json.loads(v.stdout)["valid"] is True


def test_schedule_draws_png_svg_and_a_self_contained_html_page(tmp_path):
    files = [tmp_path / f"g.{ext}" for ext in ("png", "svg", "html")]
    r = run("schedule", EXAMPLE, *[x for f in files for x in ("--gantt", f)])
    assert r.returncode == 0, r.stderr
    assert files[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in files[1].read_bytes()
    page = files[2].read_text()
    assert "<script>" in page and "http" not in page.replace("http://www.w3.org", "")


def test_batch_objective_reports_throughput():
    r = run("schedule", EXAMPLE, "--objective", "batch", "--batch", "16", "--solver", "heft", "--json")
    out = json.loads(r.stdout)
    assert out["throughput"] == pytest.approx(16 / out["objective"])


def test_a_batch_plan_says_where_parts_are_priced_in_proportion_to_a_larger_batchs_times(tmp_path):
    note = "parts of fewer than 4 samples are priced in proportion"
    graph = json.loads((REPO / "examples" / "layered40.json").read_text())
    r = run("schedule", EXAMPLE, "--objective", "batch", "--batch", "8", "--solver", "heft", "--json")
    assert r.returncode == 0 and not any(note in n for n in json.loads(r.stdout)["notes"])  # times at batch 1
    graph["batch_size"] = 4  # times measured at 4 samples and nowhere below
    for task in graph["tasks"]:
        task.pop("time_by_batch", None)
    (tmp_path / "at4.json").write_text(json.dumps(graph))
    r = run("schedule", tmp_path / "at4.json", "--objective", "batch", "--batch", "8", "--solver", "heft", "--json")
    assert r.returncode == 0, r.stderr
    assert any(note in n and "--batch 4,1" in n for n in json.loads(r.stdout)["notes"])


def test_evaluate_reproduces_the_expert_split(data_dir):
    r = run("evaluate", data_dir / "throughput-inputs/LayerGraphs/bert24_inference.json",
            "--split", data_dir / "human-experts/bert24_inference_expert.json", "--json")
    assert r.returncode == 0, r.stderr
    assert round(json.loads(r.stdout)["objective"], 3) == 20.084


def test_a_scenario_file_is_auto_detected_and_can_export_a_split(data_dir, tmp_path):
    r = run("schedule", data_dir / "throughput-inputs/LayerGraphs/resnet50_inference.json", "--objective",
            "pipeline", "--solver", "greedy", "--split-out", tmp_path / "split.json", "--json")
    assert r.returncode == 0, r.stderr
    e = run("evaluate", data_dir / "throughput-inputs/LayerGraphs/resnet50_inference.json", "--split",
            tmp_path / "split.json", "--json")
    assert json.loads(e.stdout)["objective"] == pytest.approx(json.loads(r.stdout)["objective"])


def test_platforms_and_solvers_are_listed():
    platforms = json.loads(run("platforms", "--json").stdout)["platforms"]
    assert "paper-server" in platforms
    assert "heft" in json.loads(run("solvers", "--json").stdout)["solvers"]
    # what a crossing between the workers costs is part of what a user reads about a preset
    assert [d["handoff_s"] for d in platforms["cpu-workers-2"]["devices"]] == [3.75e-5, 3.75e-5]
    listed = run("platforms").stdout
    assert "worker0    host         unlimited    localhost   hand-off 37.5 us in or out" in listed
    # and so is who spends a transfer: the receiving worker there, no device on the papers' platforms
    assert platforms["cpu-workers-2"]["transfers"] == "receiver" and platforms["paper-server"]["transfers"] == "overlapped"
    assert listed.count("transfers: the receiving device spends each one") == sum(
        p["transfers"] == "receiver" for p in platforms.values())


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


CYCLE = json.dumps({"tasks": [{"id": "a", "time": {"cpu": 1}}, {"id": "b", "time": {"cpu": 1}}],
                    "edges": [["a", "b"], ["b", "a"]]})
HUGE = json.dumps({"tasks": [{"id": "a", "time": {"cpu": 1, "a100": 1}, "memory_bytes": 1e15}], "edges": []})


@pytest.mark.parametrize("make_args, message", [
    (lambda t: [_write(t, "bad.json", "{not json")], "not valid JSON"),
    (lambda t: [t / "missing.json"], "no such file"),
    (lambda t: [_write(t, "cyc.json", CYCLE)], "cycle: "),
    (lambda t: [EXAMPLE, "--platform", "no-such-preset"], "unknown platform 'no-such-preset'"),
    (lambda t: [EXAMPLE, "--solver", "no-such-solver"], "unknown solver 'no-such-solver'"),
    (lambda t: [_write(t, "huge.json", HUGE)], "no device it may run on"),
    (lambda t: [EXAMPLE, "--gantt", t / "chart.bmp"], "cannot draw"),
    (lambda t: [EXAMPLE, "--time-limit", "-1"], "time limit must be positive"),
    (lambda t: [EXAMPLE, "--time-limit", "inf"], "time limit must be positive and finite, got inf"),
    (lambda t: [EXAMPLE, "--objective", "pipeline", "--solver", "heft"], "does not handle objective"),
    (lambda t: [_write(t, "empty.json", "[]")], "neither a diviml graph"),
    (lambda t: [EXAMPLE, "--piece-size", "0"], "--piece-size must be a whole number >= 1"),
    # an option another objective reads is not silently ignored: --batch alone would give a latency plan
    (lambda t: [EXAMPLE, "--batch", "32"], "--batch applies to --objective batch, not latency"),
    (lambda t: [EXAMPLE, "--objective", "batch", "--training", "gpipe"], "--training applies to --objective pipeline"),
    (lambda t: [EXAMPLE, "--no-contiguous"], "--contiguous/--no-contiguous applies to --objective pipeline"),
    (lambda t: [EXAMPLE, "--objective", "pipeline", "--calls", "2"], "--calls applies to --objective call-latency"),
    (lambda t: ["gpt-tiny", "--accelerators", "2"], "apply to NeurIPS 2020 scenarios only"),  # before profiling
])
def test_bad_input_gives_exit_2_one_line_and_no_output_file(tmp_path, make_args, message):
    out = tmp_path / "plan.json"
    r = run("schedule", "--time-limit", "5", *make_args(tmp_path), "--out", out)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.stderr
    assert not out.exists()


def test_a_bad_option_is_one_line_too():
    r = run("schedule", EXAMPLE, "--objective", "fastest")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1


def test_an_invalid_plan_is_reported_with_exit_1(tmp_path):
    plan_file = tmp_path / "plan.json"
    assert run("schedule", EXAMPLE, "--out", plan_file).returncode == 0
    plan = json.loads(plan_file.read_text())
    plan["objective"] *= 0.5
    plan_file.write_text(json.dumps(plan))
    r = run("validate", EXAMPLE, plan_file, "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["valid"] is False


def test_evaluate_a_split_under_the_call_latency_model(data_dir):
    r = run("evaluate", data_dir / "latency-inputs/LayerGraphs/bert24_inference.json", "--split",
            data_dir / "human-experts/bert24_inference_expert.json", "--objective", "call-latency",
            "--accelerators", "6", "--memory", "1e12", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["objective"] > 0


def test_exact_solves_piece_by_piece_between_series_points_or_as_one_model_on_request():
    pieces = json.loads(run("schedule", EXAMPLE, "--json").stdout)
    whole = json.loads(run("schedule", EXAMPLE, "--no-decompose", "--json").stdout)
    assert pieces["solver"] == whole["solver"] == "exact"
    assert pieces["status"] == whole["status"] == "optimal"
    assert pieces["objective"] == pytest.approx(whole["objective"], rel=1e-5)
    assert any(n.startswith("decomposed at series points") for n in pieces["notes"])
    assert not any(n.startswith("decomposed") for n in whole["notes"])


def test_split_schedules_module_by_module_and_proves_a_chain_of_series_points_optimal(tmp_path):
    r = run("schedule", EXAMPLE, "--solver", "split", "--module-size", "10", "--json", "--out", tmp_path / "p.json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["solver"] == "split" and out["status"] == "optimal"
    exact = json.loads(run("schedule", EXAMPLE, "--json").stdout)
    assert out["objective"] == pytest.approx(exact["objective"], rel=1e-5)
    assert run("validate", EXAMPLE, tmp_path / "p.json").returncode == 0


@pytest.mark.parametrize("option", [("--module-size", "0"), ("--module-time-limit", "0")])
def test_split_rejects_a_bad_module_option_in_one_line(tmp_path, option):
    r = run("schedule", EXAMPLE, "--solver", "split", *option, "--out", tmp_path / "p.json")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_call_latency_is_solved_exactly_by_default_and_the_plan_validates(data_dir, tmp_path):
    scenario = data_dir / "latency-inputs/LayerGraphs/bert24_inference.json"
    r = run("schedule", scenario, "--objective", "call-latency", "--json", "--out", tmp_path / "p.json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["solver"] == "call-exact" and out["status"] == "optimal" and out["gap"] <= 1e-4
    r = run("validate", scenario, tmp_path / "p.json", "--objective", "call-latency", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["valid"] is True


def test_a_reader_that_stops_early_gets_no_traceback():
    # `diviml ... --json | head -c 100`: the pipe is closed before diviml writes
    proc = subprocess.Popen([sys.executable, "-m", "diviml", "solvers", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in err


def test_a_mistyped_zoo_name_points_to_the_nearest_models_and_to_diviml_models():
    r = run("schedule", "resnet5")
    assert r.returncode == 2 and "did you mean resnet50" in r.stderr and "diviml models" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run("schedule", "missing.json")
    assert r.returncode == 2 and "missing.json: no such file" in r.stderr and "did you mean" not in r.stderr


@pytest.mark.parametrize("workers", ["0", "-1"])
def test_workers_below_one_is_refused_not_read_as_all_cores_or_no_work(workers):
    r = run("schedule", EXAMPLE, "--solver", "exact", "--workers", workers)
    assert r.returncode == 2 and "--workers must be a whole number >= 1" in r.stderr


def test_batch_progress_runs_on_the_runs_clock_and_ends_with_the_final_value():
    r = run("schedule", EXAMPLE, "--objective", "batch", "--batch", "8", "--time-limit", "4", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    splits = [line for line in r.stderr.splitlines() if "batch split" in line and " at " in line]
    clocks = [float(line.split(" at ")[1].split(" s")[0]) for line in splits]
    assert len(splits) > 1 and clocks == sorted(clocks)  # one clock, never restarted
    final = r.stderr.strip().splitlines()[-1]
    assert final.strip().startswith("exact: best") and f"{out['objective']:.6g}" in final


def test_version():
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("diviml ")


def test_a_malformed_file_is_named_with_the_field_and_what_is_allowed(tmp_path):
    graph = json.loads(open(EXAMPLE).read())
    graph["tasks"][3]["memory_bytes"] = -5
    (tmp_path / "g.json").write_text(json.dumps(graph))
    (tmp_path / "p.yaml").write_text("devices:\n  - {name: g, type: a100, memory: -1, link: {bandwidth: 1e9}}\n"
                                     "  - {name: c, type: cpu, host: true}\n")
    for args, words in (([tmp_path / "g.json"], ["g.json:", "'t3'", "memory_bytes", ">= 0"]),
                        ([EXAMPLE, "--platform", tmp_path / "p.yaml"],
                         ["p.yaml:", "memory of g", "positive"])):
        r = run("schedule", *args, "--quiet")
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert all(w in r.stderr for w in words), r.stderr


def test_profile_says_which_types_it_measured(tmp_path):
    r = run("profile", "gpt-tiny", "--platform", "cpu-h100", "--json", "--out", tmp_path / "g.json", "--min-time", "0",
            "--repeats", "1", "--quiet")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["measured_types"] == ["host"]
    assert out["notes"] == []  # no GPU measured: the platform's H100 has the roofline, as asked


def test_a_platform_gpu_of_another_type_than_the_gpu_measured_is_named():
    # on a lent H200 the cpu-h100 preset's GPU kept the catalogue's H100 roofline while the times measured
    # there were recorded as h200: plans were predicted 2.6x faster than they ran
    from diviml import preset
    from diviml.cli._commands import _unmeasured_gpus
    platform = preset("cpu-h100")
    [note] = _unmeasured_gpus(platform, ["h200"])
    assert "h100 is a h100-sxm" in note and "give h100 the type h200" in note
    assert _unmeasured_gpus(platform, ["h100-sxm"]) == [] and _unmeasured_gpus(platform, []) == []
    assert _unmeasured_gpus(None, ["h200"]) == []
