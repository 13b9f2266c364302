"""kvsim: discrete-event simulation of LLM serving with the KV cache as a first-class citizen.

import kvsim
result = kvsim.run(kvsim.load_scenario("scenarios/default.yaml"))
result.summary["ttft_p99_s"], result.requests.head()
"""

from __future__ import annotations

__version__ = "0.1.0"

from kvsim.engine.simulator import run
from kvsim.errors import KvsimError, ProfileError, ResultDirError, ScenarioError, TraceError
from kvsim.results.result import Result
from kvsim.scenario import Scenario, dump_scenario, load_scenario

__all__ = [
    "KvsimError",
    "ProfileError",
    "Result",
    "ResultDirError",
    "Scenario",
    "ScenarioError",
    "TraceError",
    "__version__",
    "dump_scenario",
    "load_scenario",
    "run",
]
