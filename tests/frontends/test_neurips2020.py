import json

import pytest

import diviml
from diviml import InputError, Objective
from diviml.frontends import neurips2020
from diviml.simulate import pipeline_loads


def _problem(data_dir, rel, **kw):
    return diviml.load_problem(data_dir / "throughput-inputs" / rel, objective=Objective("pipeline", **kw))


@pytest.mark.parametrize("scenario, expert, expected, digits", [
    ("LayerGraphs/bert24_inference.json", "bert24_inference_expert.json", 20.084, 3),
    ("LayerGraphs/resnet50_inference.json", "resnet50_inference_expert.json", 43.9183, 4),
])
def test_expert_splits_reproduce_the_authors_max_load(data_dir, scenario, expert, expected, digits):
    problem = _problem(data_dir, scenario)
    placement = neurips2020.load_split(data_dir / "human-experts" / expert, problem.graph, problem.platform)
    assert round(pipeline_loads(problem, placement).objective, digits) == expected


def test_scenario_machine_and_costs_are_imported_exactly(data_dir):
    problem = _problem(data_dir, "LayerGraphs/bert24_inference.json")
    raw = json.loads((data_dir / "throughput-inputs/LayerGraphs/bert24_inference.json").read_text())
    accs = [d for d in problem.platform.devices if d.type == "accelerator"]
    cpus = [d for d in problem.platform.devices if d.type == "cpu"]
    assert len(accs) == raw["maxFPGAs"] and len(cpus) == raw["maxCPUs"]
    assert all(d.memory_bytes == raw["maxSizePerFPGA"] for d in accs) and all(d.is_host for d in cpus)
    node = raw["nodes"][1]
    task = problem.graph.by_id[str(node["id"])]
    assert task.time == {"cpu": node["cpuLatency"], "accelerator": node["fpgaLatency"]}
    assert task.memory_bytes == node["size"]
    assert problem.graph.time_unit == "ms?"


def _tiny_scenario(node_extra=None):
    nodes = [{"id": 1, "cpuLatency": 10, "fpgaLatency": 1, "size": 5, "supportedOnFpga": 1, "isBackwardNode": 0},
             {"id": 2, "cpuLatency": 20, "fpgaLatency": 2, "size": 5, "supportedOnFpga": 1, "isBackwardNode": 0},
             {"id": 3, "cpuLatency": 30, "fpgaLatency": 3, "size": 5, "supportedOnFpga": 1, "isBackwardNode": 0}]
    for n in nodes:
        n.update((node_extra or {}).get(n["id"], {}))
    return {"maxFPGAs": 2, "maxCPUs": 1, "maxSizePerFPGA": 100, "nodes": nodes,
            "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 1, "destId": 3, "cost": 0.5},
                      {"sourceId": 2, "destId": 3, "cost": 0.25}]}


def _tiny_problem(node_extra=None):
    data = _tiny_scenario(node_extra)
    g = neurips2020.graph_from_scenario(data)
    return diviml.Problem(g, neurips2020.platform_from_scenario(data), Objective("pipeline"))


def test_transfer_costs_go_out_once_on_the_sender_in_once_per_receiver_and_never_on_the_cpu():
    p = _tiny_problem()
    loads = pipeline_loads(p, {"1": "acc0", "2": "acc1", "3": "cpu0"}).total
    # node 1 leaves acc0 once (0.5) though both consumers are elsewhere; acc1 takes it in (0.5) and
    # sends node 2's output out (0.25); the CPU pays nothing
    assert loads == {"acc0": 1 + 0.5, "acc1": 2 + 0.5 + 0.25, "cpu0": 30}


def test_cpu_only_nodes_cannot_go_on_accelerators():
    p = _tiny_problem({2: {"supportedOnFpga": 0}})
    assert p.allowed_devices["2"] == ("cpu0",)


def test_colour_classes_become_colocation_groups_and_backward_nodes_follow_their_twin():
    data = _tiny_scenario({1: {"colorClass": 7}, 3: {"colorClass": 7, "isBackwardNode": 1}})
    g = neurips2020.graph_from_scenario(data)
    platform = neurips2020.platform_from_scenario(data)
    assert g.by_id["3"].phase == "backward"
    placement = neurips2020.split_to_placement({"fpgas": [{"nodes": [1]}, {"nodes": [2]}]}, g, platform)
    assert placement == {"1": "acc0", "2": "acc1", "3": "acc0"}


def test_training_objectives_pipedream_and_gpipe(data_dir):
    pd = _problem(data_dir, "LayerGraphs/bert24_training.json")
    gp = _problem(data_dir, "LayerGraphs/bert24_training.json", training="gpipe")
    split = data_dir / "human-experts" / "bert24_training_expert.json"
    placement = neurips2020.load_split(split, pd.graph, pd.platform)
    a, b = pipeline_loads(pd, placement), pipeline_loads(gp, placement)
    assert a.objective == pytest.approx(max(a.forward[d] + a.backward[d] for d in a.forward))
    assert b.objective == pytest.approx(max(a.forward.values()) + max(a.backward.values()))
    assert b.objective >= a.objective


def test_a_split_that_leaves_nodes_out_is_rejected(data_dir):
    problem = _problem(data_dir, "LayerGraphs/bert24_inference.json")
    with pytest.raises(InputError, match="unplaced"):
        neurips2020.split_to_placement({"fpgas": [{"nodes": [1]}]}, problem.graph, problem.platform)


def _mutated(data_dir, change):
    data = json.loads((data_dir / "latency-inputs" / "OperatorGraphs" / "bert_l-3_inference.json").read_text())
    change(data)
    return data


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(maxFPGAs=10 ** 9), "maxFPGAs must be between 0 and 1024"),  # once built a billion devices
    (lambda d: d.update(maxCPUs=2.5), "maxCPUs must be a whole number"),
    (lambda d: d.update(maxSizePerFPGA="big"), "maxSizePerFPGA: expected a number"),
    (lambda d: d["nodes"][0].update(cpuLatency=1e308), r"beyond 1e\+100"),  # once overflowed a sum of times
    (lambda d: d["edges"][0].update(cost=1e308), r"beyond 1e\+100"),
    (lambda d: d["nodes"][0].update(fpgaLatency=True), "expected a number, got True"),
    (lambda d: d["nodes"][0].update(size=[1]), "expected a number"),
    # once read as true: a string flag put a CPU-only node on the accelerators (the files write booleans and 0/1)
    (lambda d: d["nodes"][0].update(supportedOnFpga="no"), r"supportedOnFpga must be true or false \(or 1 or 0\)"),
    (lambda d: d["nodes"][0].update(isBackwardNode=2), "isBackwardNode must be true or false"),
])
def test_a_malformed_scenario_is_one_clear_error(data_dir, change, says):
    data = _mutated(data_dir, change)
    with pytest.raises(InputError, match=says):
        neurips2020.graph_from_scenario(data)
        neurips2020.platform_from_scenario(data)


def test_plans_export_back_to_the_split_format_and_reimport(data_dir):
    problem = _problem(data_dir, "LayerGraphs/bert24_inference.json")
    plan = diviml.solve(problem, "greedy", time_limit=10)
    split = neurips2020.plan_to_split(plan, problem.platform)
    assert neurips2020.split_to_placement(split, problem.graph, problem.platform) == plan.placement
    assert split["maxLoad"] == plan.objective


def _call_problem(calls):
    data = _tiny_scenario()
    return diviml.Problem(neurips2020.graph_from_scenario(data), neurips2020.platform_from_scenario(data),
                          Objective("call-latency", max_calls=calls))


def test_call_latency_runs_an_accelerator_set_as_one_call_with_hops_in_and_out():
    from diviml.simulate import call_latency
    p = _call_problem(1)
    s = call_latency(p, {"1": "cpu0", "2": "acc0", "3": "cpu0"})
    # cpu: node 1 [0, 10]; acc0 call [2]: in 0.5 + compute 2 + out 0.25 -> [10, 12.75]; cpu: node 3 -> 42.75
    assert s.makespan == pytest.approx(42.75)


def test_call_latency_allows_at_most_q_calls_per_accelerator():
    from diviml import ValidationError
    from diviml.simulate import call_latency
    placement = {"1": "acc0", "2": "cpu0", "3": "acc0"}
    with pytest.raises(ValidationError, match="needs 2 calls"):
        call_latency(_call_problem(1), placement)
    # call [1]: compute 1 + out 0.5; cpu node 2 [1.5, 21.5]; call [3]: in 0.5 + 0.25, compute 3 -> 25.25
    assert call_latency(_call_problem(2), placement).makespan == pytest.approx(25.25)


def test_latency_scenarios_schedule_under_the_call_model(data_dir):
    p = diviml.load_problem(data_dir / "latency-inputs/LayerGraphs/bert24_inference.json",
                            objective=Objective("call-latency", max_calls=2))
    plan = diviml.solve(p, "greedy", time_limit=10)
    assert diviml.validate(plan, p).ok and plan.bound <= plan.objective
