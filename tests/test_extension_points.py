"""Each extension point is one file plus a registration, with no edit to kvsim.

For each kind (router, eviction policy, cost model, workload kind, GPU preset) a module is
written to a temporary folder and imported, as a user's own file would be; importing it
registers the extension; a scenario names it and runs through `kvsim.run`; the test checks
that the extension was really used, then unregisters it.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from conftest import ROOT

import kvsim
from kvsim.engine.simulator import scenario_workload
from kvsim.errors import ScenarioError
from kvsim.model.presets import GPU_ALIASES, GPU_PRESETS, register_gpu, resolve_gpu, unregister_gpu
from kvsim.registry import (
    COST_MODELS,
    EVICTION_POLICIES,
    ROUTERS,
    SCHEDULING_POLICIES,
    WORKLOAD_KINDS,
)
from kvsim.scenario.loading import scenario_json_schema

#: A few requests arriving at 20/s: every test's scenario starts from it.
TRAFFIC = {"num_requests": 12, "arrival": {"kind": "poisson", "rate_per_s": 20.0}}


@pytest.fixture
def load_module(tmp_path: Path) -> Iterator[Callable[[str, str], ModuleType]]:
    """Write ``source`` to ``tmp_path/<name>.py`` and import it; forget it afterwards."""
    names: list[str] = []

    def load(name: str, source: str) -> ModuleType:
        path = tmp_path / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        names.append(name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in names:
        sys.modules.pop(name, None)


ROUTER = """
    from kvsim.registry import ROUTERS

    @ROUTERS.register("ext_highest_index")
    class HighestIndex:
        '''Every request to the replica with the highest index.'''

        reads_prefix_cache = False

        def __init__(self, config):
            pass

        def route(self, req, view):
            return max(view.replicas, key=lambda r: r.index)
"""


def test_a_router_in_its_own_file(load_module) -> None:
    load_module("ext_router", ROUTER)
    try:
        res = kvsim.run(
            {"workload": TRAFFIC, "replicas": [{"count": 3}], "router": {"kind": "ext_highest_index"}}
        )
    finally:
        ROUTERS.unregister("ext_highest_index")
    assert set(res.requests.replica_id) == {"replica-2"}
    assert res.summary["num_finished"] == 12
    assert "ext_highest_index" not in ROUTERS


EVICTION = """
    from kvsim.registry import EVICTION_POLICIES

    @EVICTION_POLICIES.register("ext_mru")
    class MostRecentlyFreedFirst:
        '''The block freed last is reused first: a stack of free blocks.'''

        def __init__(self, blocks):
            self._stack = list(reversed(list(blocks)))  # block 0 on top

        def __len__(self):
            return len(self._stack)

        def append(self, block):  # a freed block that holds cached data
            self._stack.append(block)

        def appendleft(self, block):  # a freed block that holds nothing: reused next
            self._stack.append(block)

        def popleft(self):
            return self._stack.pop()

        def remove(self, block):  # a cache hit takes the block back
            self._stack.remove(block)

        def __iter__(self):  # in the order the blocks will be reused
            return reversed(self._stack)
"""


def test_an_eviction_policy_in_its_own_file(load_module) -> None:
    load_module("ext_eviction", EVICTION)
    small = {
        "workload": {**TRAFFIC, "num_requests": 40, "shared_prefix_tokens": 256},
        "replicas": [{"engine": {"num_gpu_blocks_override": 300}}],
    }
    try:
        lru = kvsim.run(small)
        mru = kvsim.run(small, overrides=["replicas.0.engine.eviction_policy=ext_mru"])
    finally:
        EVICTION_POLICIES.unregister("ext_mru")
    assert mru.scenario.replicas[0].engine.eviction_policy == "ext_mru"
    assert mru.summary["num_finished"] == lru.summary["num_finished"] == 39  # one prompt is too long
    # The freshest blocks go first: other blocks are evicted than under LRU, and other hits.
    assert mru.summary["num_evicted_blocks"] != lru.summary["num_evicted_blocks"]
    assert "ext_mru" not in EVICTION_POLICIES


COST_MODEL = """
    from typing import Literal

    import numpy as np
    from pydantic import Field

    from kvsim.frozen import FrozenModel
    from kvsim.registry import COST_MODELS


    class PerTokenCost(FrozenModel):
        '''Every iteration costs a fixed time plus a time per token it computes.'''

        kind: Literal["ext_per_token"] = Field(default="ext_per_token", description="This kind.")
        base_s: float = Field(default=0.004, gt=0, description="Time of an empty iteration, s.")
        per_token_s: float = Field(default=1e-5, ge=0, description="Time per token computed, s.")


    class PerTokenModel:
        def __init__(self, config, pcie_bytes_per_s):
            self.base_s, self.per_token_s = config.base_s, config.per_token_s
            self.pcie_bytes_per_s = pcie_bytes_per_s

        def step_time_s(self, batch):
            return self.base_s + self.per_token_s * batch.num_tokens

        def decode_steps_s(self, num_seqs, context_tokens):  # each element what step_time_s gives
            return np.full(len(context_tokens), self.base_s + self.per_token_s * num_seqs)

        def pcie_transfer_s(self, num_bytes):
            return num_bytes / self.pcie_bytes_per_s


    @COST_MODELS.register("ext_per_token", config=PerTokenCost)
    def build(config, replica):  # replica: kvsim.cost.factory.Replica (model, gpu, tp, ...)
        return PerTokenModel(config, replica.gpu.pcie_bandwidth_bytes_per_s)
"""


def test_a_cost_model_in_its_own_file(load_module) -> None:
    load_module("ext_cost", COST_MODEL)
    cost = {"kind": "ext_per_token", "base_s": 0.003, "per_token_s": 2e-5}
    try:
        res = kvsim.run({"workload": TRAFFIC, "replicas": [{"cost_model": cost}]})
        dumped = res.scenario.model_dump(mode="json")["replicas"][0]["cost_model"]
        again = kvsim.load_scenario(res.scenario.model_dump(mode="json"))
    finally:
        COST_MODELS.unregister("ext_per_token")
    it = res.iterations
    assert list(it.duration_s) == pytest.approx(list(0.003 + 2e-5 * (it.prefill_tokens + it.decode_tokens)))
    assert dumped == cost and again == res.scenario  # saved with the result, read back the same
    assert "ext_per_token" not in COST_MODELS


def test_a_cost_model_config_is_checked_by_its_own_class(load_module) -> None:
    load_module("ext_cost", COST_MODEL)
    try:
        with pytest.raises(ScenarioError) as err:
            kvsim.load_scenario({"replicas": [{"cost_model": {"kind": "ext_per_token", "base_s": -1}}]})
    finally:
        COST_MODELS.unregister("ext_per_token")
    assert err.value.problems == [
        ("replicas.0.cost_model.ext_per_token.base_s", "Input should be greater than 0")
    ]


WORKLOAD = """
    from typing import Literal

    from pydantic import Field

    from kvsim.frozen import FrozenModel
    from kvsim.registry import WORKLOAD_KINDS
    from kvsim.request import RequestSpec, Segment


    class PairsWorkload(FrozenModel):
        '''Pairs of identical prompts, the second ``gap_s`` after the first.'''

        kind: Literal["ext_pairs"] = Field(default="ext_pairs", description="This kind.")
        num_pairs: int = Field(default=4, ge=1, le=10_000, description="Number of pairs.")
        gap_s: float = Field(default=0.5, gt=0, description="Seconds between a pair's requests.")
        prompt_tokens: int = Field(default=512, ge=1, le=100_000, description="Prompt length.")
        output_tokens: int = Field(default=16, ge=1, le=100_000, description="Output length.")

        @property
        def num_requests(self):  # optional: lets kvsim refuse a run above sim.max_requests early
            return 2 * self.num_pairs


    @WORKLOAD_KINDS.register("ext_pairs", config=PairsWorkload)
    def generate_pairs(cfg, rng, *, base_dir=None):
        '''Requests in any order; kvsim sorts them by arrival. rng: the workload's generator.'''
        starts = rng.uniform(0.0, 10.0, size=cfg.num_pairs)
        return [
            RequestSpec(
                request_id=2 * i + k,
                arrival_s=float(start) + k * cfg.gap_s,
                prompt=(Segment(content_id=1 + i, num_tokens=cfg.prompt_tokens),),
                output_tokens=cfg.output_tokens,
            )
            for i, start in enumerate(starts)
            for k in (0, 1)
        ]
"""


def test_a_workload_kind_in_its_own_file(load_module) -> None:
    load_module("ext_workload", WORKLOAD)
    scenario = {"workload": {"kind": "ext_pairs", "num_pairs": 5, "prompt_tokens": 320}}
    try:
        res = kvsim.run(scenario)
        arrivals = [r.arrival_s for r in scenario_workload(res.scenario).requests]
        with pytest.raises(ScenarioError, match="would simulate 10 requests"):
            kvsim.run(scenario, overrides=["sim.max_requests=9"])  # its num_requests, read early
    finally:
        WORKLOAD_KINDS.unregister("ext_pairs")
    assert res.summary["workload_kind"] == "ext_pairs" and res.summary["num_finished"] == 10
    req = res.requests.sort_values("request_id")
    assert list(req.prompt_tokens) == [320] * 10
    assert arrivals == sorted(arrivals)  # kvsim sorted them
    gaps = req.arrival_s.to_numpy()[1::2] - req.arrival_s.to_numpy()[::2]
    assert gaps == pytest.approx([0.5] * 5)
    # The second of each pair finds the first's prompt cached (all of it but the last block).
    hits = list(req.prefix_cache_hits_tokens)
    assert hits[1::2] == [304] * 5 and set(hits[::2]) == {0}
    assert "ext_pairs" not in WORKLOAD_KINDS


GPU = """
    from kvsim.model.presets import register_gpu, resolve_gpu
    from kvsim.model.specs import GpuSpec

    H100 = resolve_gpu("h100-sxm")
    register_gpu(
        GpuSpec(**{**H100.model_dump(), "name": "ext-h100-slow-hbm", "hbm_bandwidth_bytes_per_s": 1.0e12}),
        aliases=["Ext H100 Slow HBM"],
    )
"""


def test_a_gpu_preset_in_its_own_file(load_module) -> None:
    load_module("ext_gpu", GPU)
    scenario = {"workload": {**TRAFFIC, "output_tokens": {"kind": "fixed", "tokens": 64}}}
    try:
        fast = kvsim.run(scenario, overrides=["replicas.0.gpu=h100-sxm"])
        slow = kvsim.run(scenario, overrides=["replicas.0.gpu=EXT_H100_slow_hbm"])
        alias = kvsim.load_scenario(scenario, overrides=["replicas.0.gpu=ext h100 slow hbm"])
    finally:
        unregister_gpu("ext-h100-slow-hbm")
    assert alias.replicas[0].gpu == "ext h100 slow hbm"
    # Decodes read the weights from HBM: at 1.0 of 3.35 TB/s they take about 3.35 times longer.
    ratio = slow.summary["tpot_p50_s"] / fast.summary["tpot_p50_s"]
    assert 2.5 < ratio < 3.5
    assert "ext-h100-slow-hbm" not in GPU_PRESETS


def test_unknown_names_list_the_registered_ones() -> None:
    with pytest.raises(ScenarioError) as err:
        kvsim.load_scenario(
            {
                "workload": {"kind": "pairs"},
                "replicas": [{"cost_model": {"kind": "per_token"}}],
            }
        )
    problems = dict(err.value.problems)
    assert problems["workload"] == (
        "Value error, unknown workload kind 'pairs'; registered: synthetic, trace, mixture, bench_serve"
    )
    assert problems["replicas.0.cost_model"] == (
        "Value error, unknown cost model 'per_token'; registered: constant, roofline, profile, kernels"
    )
    with pytest.raises(ScenarioError) as err:
        kvsim.load_scenario({"replicas": [{"gpu": "h100-slow"}]})
    assert err.value.problems[0][0] == "replicas.0.gpu"
    assert err.value.problems[0][1].startswith("unknown GPU preset 'h100-slow' (did you mean 'h100-sxm'?)")


def test_registered_names_are_listed_and_then_forgotten(load_module) -> None:
    load_module("ext_workload", WORKLOAD)
    try:
        with pytest.raises(ScenarioError) as err:
            kvsim.load_scenario({"workload": {"kind": "nope"}})
        variants = scenario_json_schema()["properties"]["workload"]["oneOf"]
    finally:
        WORKLOAD_KINDS.unregister("ext_pairs")
    assert "registered: synthetic, trace, mixture, bench_serve, ext_pairs" in str(err.value)
    assert {"enum": ["ext_pairs"], "description": "Selects the registered kind."} in [
        v.get("properties", {}).get("kind") for v in variants
    ]
    with pytest.raises(ScenarioError, match=r"registered: synthetic, trace, mixture, bench_serve$"):
        kvsim.load_scenario({"workload": {"kind": "ext_pairs"}})


def test_a_gpu_preset_name_must_be_new_and_in_normal_form() -> None:
    h100 = resolve_gpu("h100-sxm")
    with pytest.raises(ValueError, match="normal form"):
        register_gpu(h100.model_copy(update={"name": "My_GPU"}))
    with pytest.raises(ValueError, match="already registered"):
        register_gpu(h100.model_copy(update={"name": "h200"}))
    with pytest.raises(ValueError, match="already names a GPU preset"):
        register_gpu(h100.model_copy(update={"name": "ext-gpu"}), aliases=["H200 SXM"])
    assert "ext-gpu" not in GPU_PRESETS
    assert register_gpu(h100) is h100  # the same spec again: nothing changes


def _doc_examples() -> list[tuple[str, str, str]]:
    """(module name, file, scenario YAML) of each example of docs/engine.md, "Extending kvsim":
    a python block opening with ``# NAME.py``, then a yaml block with the scenario."""
    section = (ROOT / "docs/engine.md").read_text().split("\n## Extending kvsim\n", 1)[1].split("\n## ")[0]
    blocks = re.findall(r"```(python|yaml)\n(.*?)```", section, re.S)
    assert [lang for lang, _ in blocks] == ["python", "yaml"] * (len(blocks) // 2)
    return [
        (code.splitlines()[0].removeprefix("# ").removesuffix(".py"), code, scenario)
        for (_, code), (_, scenario) in zip(blocks[::2], blocks[1::2], strict=True)
    ]


DOC_EXAMPLES = _doc_examples()
REGISTRIES = (ROUTERS, EVICTION_POLICIES, SCHEDULING_POLICIES, COST_MODELS, WORKLOAD_KINDS)


def test_the_docs_show_one_example_per_kind() -> None:
    assert [name for name, _, _ in DOC_EXAMPLES] == ["shortest_queue", "mru", "per_token", "pairs", "my_gpu"]


@pytest.mark.parametrize(("name", "code", "scenario"), DOC_EXAMPLES, ids=[e[0] for e in DOC_EXAMPLES])
def test_the_docs_examples_run_as_written(
    load_module, tmp_path: Path, name: str, code: str, scenario: str
) -> None:
    before = [set(registry) for registry in REGISTRIES]
    gpus, aliases = set(GPU_PRESETS), dict(GPU_ALIASES)
    load_module(name, code)
    added = [set(registry) - names for registry, names in zip(REGISTRIES, before, strict=True)]
    added_gpus = set(GPU_PRESETS) - gpus
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario)
    try:
        res = kvsim.run(path)
        sc = res.scenario
        used = {sc.router.kind, sc.workload.kind}
        for group in sc.replicas:
            used |= {group.engine.eviction_policy, group.cost_model.kind, resolve_gpu(group.gpu).name}
    finally:
        for registry, names in zip(REGISTRIES, added, strict=True):
            for n in names:
                registry.unregister(n)
        for gpu in added_gpus:
            unregister_gpu(gpu)
    new = set().union(*added, added_gpus)
    assert len(new) == 1 and new <= used  # one extension, and the scenario ran with it
    assert res.summary["num_finished"] == res.summary["num_requests"] > 0
    assert (set(GPU_PRESETS), GPU_ALIASES) == (gpus, aliases)


def test_the_docs_command_lines_run_an_extension(tmp_path: Path) -> None:
    """The section's two command lines, with the router example and its scenario beside them."""
    section = (ROOT / "docs/engine.md").read_text().split("\n## Extending kvsim\n", 1)[1]
    commands = re.search(r"```text\n(.*?)```", section, re.S)
    assert commands is not None
    _, code, scenario = DOC_EXAMPLES[0]
    (tmp_path / "shortest_queue.py").write_text(code)
    (tmp_path / "scenario.yaml").write_text(scenario)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    outputs = []
    for line in commands.group(1).splitlines():
        argv = shlex.split(line)
        assert argv[0] == "python"
        done = subprocess.run(
            [sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == "20\n"  # every request of the scenario finished
    assert re.search(r"^  finished +20$", outputs[1], re.M)  # kvsim run's report
