"""Observing a live server: `kvsim observe` and what reads an observation.

    from kvsim.observe import ObserveOptions, observe
    observation = observe(scenario, ObserveOptions(url="http://127.0.0.1:8000/v1"))

Modules:

    runner     `observe`: the scenario's requests sent on its clock, the server's /metrics
               scraped; Ctrl-C keeps what was measured
    client     one streamed completion, timed token by token (httpx); timeouts, retries
    stream     server-sent events, bounded; how many tokens each event brings
    metrics    the Prometheus metrics read (vLLM's, SGLang's), parsed by prometheus_client
    prompts    token ids (or words) of each prompt, equal content ids equal tokens
    record     an observation as a kvsim Result (the same tables and summary)
    compare    an observation beside a simulation: percentiles, per request, time series
    fit        the cost model's free terms fitted to an observation by simulating it
    vllm_server  a local vLLM OpenAI server for tests and benchmarks (started, stopped by PID)

httpx and prometheus_client (the ``observe`` extra) are imported only when an observation
runs: reading, comparing and fitting observations need neither.
"""

from __future__ import annotations

from kvsim.observe.record import is_observation
from kvsim.observe.runner import Observation, ObserveError, ObserveOptions, ServerUnreachable, observe

__all__ = ["Observation", "ObserveError", "ObserveOptions", "ServerUnreachable", "is_observation", "observe"]
