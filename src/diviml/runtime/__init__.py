"""Run a plan on real devices: the captured model cut into per-device pieces, run in the plan's order by a
worker per device (and a torch.distributed rank per server), its outputs checked against the unsplit
module, its time measured beside the plan's prediction; a pipeline plan as a stream of requests, timed per
request in its steady state.

>>> report = run("googlenet", plan, preset("cpu-workers-2"))      # doctest: +SKIP
>>> report.predicted_s, report.measured_s, report.outputs_match   # doctest: +SKIP
"""

from ._calibrate import Handoff, calibrated_graph, calibrated_platform
from ._dist import launch, rank_of_devices
from ._pieces import Piece, Program, cut
from ._run import PieceReport, RunReport, run, run_beside
from ._source import ModelSource, model_source
from ._tune import TuneReport, TuneRound, tune

__all__ = ["Handoff", "ModelSource", "calibrated_graph", "calibrated_platform", "Piece", "PieceReport", "Program",
           "RunReport", "TuneReport", "TuneRound", "cut", "launch", "model_source", "rank_of_devices", "run",
           "run_beside", "tune"]
