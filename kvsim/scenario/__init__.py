"""Scenarios in one place: the schema, every cross-field check, loading and overrides, the resolved plan.

schema.py    the pydantic models: fields, types, ranges, descriptions
checks.py    rules across fields, presets and cost profiles ("which combinations exist")
loading.py   YAML files, ``--set`` overrides, validation, the resolved YAML, JSON Schema
resolved.py  the resolved plan of a run (`resolve_plan`): model, GPUs, KV geometry, tiers, once
estimate.py  the work a scenario asks for (requests, tokens), checked before anything is built
"""

from kvsim.scenario.loading import (
    DEFAULT_SCENARIO,
    apply_overrides,
    dump_scenario,
    load_scenario,
    parse_yaml,
    read_yaml,
    scenario_json_schema,
    validate,
)
from kvsim.scenario.schema import (
    EngineConfig,
    KvTransferConfig,
    ReplicaGroup,
    RouterConfig,
    Scenario,
    SimConfig,
    SloConfig,
)

__all__ = [
    "DEFAULT_SCENARIO",
    "EngineConfig",
    "KvTransferConfig",
    "ReplicaGroup",
    "RouterConfig",
    "Scenario",
    "SimConfig",
    "SloConfig",
    "apply_overrides",
    "dump_scenario",
    "load_scenario",
    "parse_yaml",
    "read_yaml",
    "scenario_json_schema",
    "validate",
]
