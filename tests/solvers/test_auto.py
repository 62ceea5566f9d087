"""--solver auto chooses by the problem and says why; exact decomposes only where it pays."""

import diviml
from diviml.generators import layered_dag, random_dag
from diviml.solvers import auto, exact
from diviml.solvers.engines.modules import detect

PAPER = diviml.preset("paper-server")
LATENCY = diviml.Objective("latency")


def test_small_graphs_go_to_exact_large_ones_to_split_and_pipelines_to_ip():
    assert auto.choose(diviml.Problem(layered_dag(40), PAPER, LATENCY))[0] == "exact"
    solver, because = auto.choose(diviml.Problem(layered_dag(320), PAPER, LATENCY))
    assert solver == "split" and "320 tasks" in because
    pipeline = diviml.Problem(layered_dag(40), PAPER, diviml.Objective("pipeline"))
    assert auto.choose(pipeline)[0] == "ip"


def test_auto_through_the_api_runs_the_chosen_solver_and_notes_why():
    plan = diviml.solve(diviml.Problem(layered_dag(30, seed=2), PAPER, LATENCY), "auto", time_limit=20)
    assert plan.solver == "exact" and plan.notes[0].startswith("auto chose exact: 30 tasks")


def test_exact_solves_a_graph_whose_one_piece_holds_nearly_every_task_as_one_model():
    problem = diviml.Problem(random_dag(48, seed=48, ccr=(0.8, 1.2)), PAPER, LATENCY)
    pieces = detect(problem.graph, exact.PIECE_SIZE, cut_large=False)
    assert len(pieces.modules) == 2 and not exact.pays_to_decompose(problem, pieces)
    assert exact.pays_to_decompose(diviml.Problem(layered_dag(80), PAPER, LATENCY),
                                   detect(layered_dag(80), exact.PIECE_SIZE, cut_large=False))
    # by pieces it spent its 20 s on the (entry, exit) pairs of the 47-task piece and ended 5% above this
    plan = diviml.solve(problem, "exact", time_limit=20)
    whole = diviml.solve(problem, "exact", time_limit=20, decompose=False)
    assert plan.objective <= whole.objective * (1 + 1e-6) and plan.status == "optimal"
