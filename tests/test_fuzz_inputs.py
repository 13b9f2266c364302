"""Fuzzing kvsim's input parsing: every generated input ends in a result or a `KvsimError`.

Hypothesis generates whole scenario documents (valid ones, then broken: hostile values,
unknown and missing keys, deep nesting) as dicts and as YAML text (then broken at the text
level: aliases, duplicate lines, truncation, stray bytes, huge integers, deep brackets),
and trace lines (Mooncake JSONL and Azure CSV). They go through `kvsim.load_scenario`,
`kvsim validate` (in-process, several files at once), `kvsim.run` (short workloads) and
the trace loaders. Any other exception, or an input taking longer than `INPUT_TIME_BOUND_S`,
fails the test. The number of inputs and the wall time of each test are printed in the
terminal summary (tests/conftest.py), so that CI logs show them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_openai import FakeServer, Reply
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvsim
from kvsim.cli import main
from kvsim.cli.verify_cmd import VLLM_PYTHON_ENV
from kvsim.errors import KvsimError
from kvsim.model.presets import GPU_PRESETS, MODEL_PRESETS
from kvsim.workload.config import TraceWorkload
from kvsim.workload.traces import replay_trace

# Thousands of documents per run: the full suite's, not the quick tier's (make test-fast).
pytestmark = pytest.mark.slow

#: Most CPU time any one input may take, seconds: a hang detector (the slowest input takes
#: about 0.5 s). CPU time, so that a loaded shared CI machine does not trip it.
INPUT_TIME_BOUND_S = 10.0

#: Examples per test; together >= 2,000 scenario documents per run (see the summary).
NUM_DICT_DOCS = 800
NUM_YAML_DOCS = 800
NUM_VALIDATE_CALLS = 250  # 1-3 files each
NUM_RUNS = 100
NUM_TRACE_FILES = 300  # per format, 1-6 lines each

FUZZ_SETTINGS: dict[str, Any] = {
    "deadline": None,  # timed by the watchdog below instead, so that a slow CI machine is no flake
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    "database": None,
}


class InputTookTooLong(Exception):
    """Raised by the watchdog when one input runs past INPUT_TIME_BOUND_S."""


@contextlib.contextmanager
def watchdog(seconds: float = INPUT_TIME_BOUND_S) -> Iterator[None]:
    """Interrupt the body after ``seconds`` of CPU time of this process (SIGPROF; main thread)."""

    def alarm(signum: int, frame: Any) -> None:
        raise InputTookTooLong(f"one input took more than {seconds} s of CPU time")

    previous = signal.signal(signal.SIGPROF, alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


@dataclass
class FuzzStats:
    """Inputs of one fuzz test, reported through ``record_property('fuzz', ...)``."""

    kind: str
    num_inputs: int = 0
    num_ok: int = 0
    num_errors: int = 0
    slowest_s: float = 0.0
    error_kinds: dict[str, int] = field(default_factory=dict)

    def timed(self, fn: Callable[[], Any], count: int = 1) -> Any:
        """Run ``fn`` under the watchdog; a KvsimError is an expected outcome."""
        start = time.perf_counter()
        try:
            with watchdog():
                out = fn()
        except KvsimError as exc:
            self.num_errors += count
            name = type(exc).__name__
            self.error_kinds[name] = self.error_kinds.get(name, 0) + 1
            out = exc
        else:
            self.num_ok += count
        finally:
            self.num_inputs += count
            self.slowest_s = max(self.slowest_s, time.perf_counter() - start)
        return out

    def record(self, record_property: Callable[[str, Any], None], wall_s: float) -> None:
        record_property(
            "fuzz",
            {
                "kind": self.kind,
                "inputs": self.num_inputs,
                "ok": self.num_ok,
                "errors": self.num_errors,
                "wall_s": round(wall_s, 2),
                "slowest_s": round(self.slowest_s, 3),
            },
        )


def run_fuzz(test: Callable[[], None], stats: FuzzStats, record_property: Callable[[str, Any], None]) -> None:
    start = time.perf_counter()
    test()
    stats.record(record_property, time.perf_counter() - start)
    assert stats.num_inputs > 0


# --------------------------------------------------------------------------- scenario strategies

HOSTILE_VALUES: list[Any] = [
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    -1e308,
    1e30,
    5e-324,
    2**31,
    2**63,
    2**64,
    -(2**63),
    10**60,
    -1,
    0,
    0.5,
    "",
    "x" * 300,
    "nan",
    ".inf",
    "1e30",
    "\x00",
    "💥",
    None,
    True,
    [],
    {},
    [[[[]]]],
    {"kind": "bogus"},
    {"kind": ["list"]},
    "/dev/zero",
]

rates = st.floats(0.1, 100)
small_floats = st.floats(0.0, 10.0)


def lengths(hi: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.fixed_dictionaries({"kind": st.just("fixed"), "tokens": st.integers(1, hi)}),
        st.integers(1, hi).flatmap(
            lambda lo: st.fixed_dictionaries(
                {"kind": st.just("uniform"), "min_tokens": st.just(lo), "max_tokens": st.integers(lo, hi)}
            )
        ),
        st.fixed_dictionaries(
            {"kind": st.just("lognormal"), "mean_tokens": st.floats(1, hi), "cv": st.floats(0.1, 3)},
            optional={"max_tokens": st.integers(hi, 4 * hi)},
        ),
        st.fixed_dictionaries(
            {"kind": st.just("zipf"), "max_tokens": st.integers(1, hi)},
            optional={"exponent": st.floats(0.5, 3)},
        ),
    )


arrivals = st.one_of(
    st.fixed_dictionaries({"kind": st.just("poisson"), "rate_per_s": rates}),
    st.fixed_dictionaries({"kind": st.just("gamma"), "rate_per_s": rates, "cv": st.floats(0.1, 10)}),
    st.fixed_dictionaries({"kind": st.just("constant"), "rate_per_s": rates}),
    st.fixed_dictionaries(
        {
            "kind": st.just("onoff"),
            "rate_on_per_s": rates,
            "rate_off_per_s": small_floats,
            "mean_on_s": st.floats(0.5, 10),
            "mean_off_s": st.floats(0.5, 10),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("ramp"),
            "start_rate_per_s": st.floats(0, 50),
            "end_rate_per_s": rates,
            "duration_s": st.floats(0.1, 100),
        }
    ),
    st.fixed_dictionaries(
        {
            "kind": st.just("diurnal"),
            "mean_rate_per_s": rates,
            "amplitude": st.floats(0, 0.99),
            "period_s": st.floats(1, 1000),
            "phase_s": st.floats(-1000, 1000),
        }
    ),
)

synthetic_workloads = st.fixed_dictionaries(
    {"kind": st.just("synthetic"), "num_requests": st.integers(1, 8)},
    optional={
        "arrival": arrivals,
        "prompt_tokens": lengths(2048),
        "output_tokens": lengths(48),
        "shared_prefix_tokens": st.integers(0, 512),
        "system_prompts": st.fixed_dictionaries({"num_prompts": st.integers(1, 4), "tokens": lengths(256)}),
        "few_shot": st.fixed_dictionaries(
            {"num_prompts": st.integers(1, 4), "tokens": lengths(256)},
            optional={"zipf_exponent": st.floats(0, 3)},
        ),
        "sessions": st.fixed_dictionaries(
            {"turns": lengths(3)},
            optional={
                "think_time_s": small_floats,
                "think_time_dist": st.sampled_from(["exponential", "fixed"]),
            },
        ),
        "tenants": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from("abcd")},
                optional={"weight": st.floats(0.1, 10), "priority": st.integers(-3, 3)},
            ),
            max_size=3,
        ),
        "parallel_samples": st.integers(1, 3),
        "beam_width": st.integers(1, 2),
    },
)


def trace_workloads(paths: dict[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from(sorted(paths)).flatmap(
        lambda fmt: st.fixed_dictionaries(
            {"kind": st.just("trace"), "path": st.just(paths[fmt]), "format": st.just(fmt)},
            optional={
                "time_scale": st.floats(0.1, 10),
                "max_requests": st.integers(1, 8),
                "start_s": st.floats(0, 5),
                "zero_output": st.sampled_from(["drop", "one"]),
                "rate_per_s": rates,
            },
        )
    )


engines = st.fixed_dictionaries(
    {},
    optional={
        "block_size": st.sampled_from([8, 16, 32]),
        "max_num_seqs": st.integers(1, 64),
        "max_num_batched_tokens": st.integers(16, 8192),
        "enable_chunked_prefill": st.booleans(),
        "enable_prefix_caching": st.booleans(),
        "preemption_mode": st.sampled_from(["recompute", "swap"]),
        "num_gpu_blocks_override": st.integers(16, 4096),
        "kv_cache_dtype": st.sampled_from(["auto", "fp8"]),
        "long_prefill_token_threshold": st.integers(0, 512),
        "cpu_offload_gib": st.floats(0, 4),
    },
)

replica_groups = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["a", "b"]),
        "count": st.integers(1, 2),
        "gpu": st.sampled_from(sorted(GPU_PRESETS)),
        "tp": st.sampled_from([1, 2]),
        "engine": engines,
        "cost_model": st.one_of(
            st.just("roofline"),
            st.fixed_dictionaries({"kind": st.just("constant"), "step_time_s": st.floats(1e-4, 0.05)}),
        ),
    },
)


def scenario_docs(trace_paths: dict[str, str] | None = None) -> st.SearchStrategy[dict[str, Any]]:
    """A scenario as plain data, valid in form (some combinations are refused by validation)."""
    workload = (
        synthetic_workloads
        if trace_paths is None
        else st.one_of(synthetic_workloads, trace_workloads(trace_paths))
    )
    return st.fixed_dictionaries(
        {"workload": workload},
        optional={
            "name": st.text(max_size=12),
            "seed": st.integers(0, 2**32),
            "model": st.sampled_from(sorted(MODEL_PRESETS)),
            "replicas": st.lists(replica_groups, min_size=1, max_size=2),
            "router": st.fixed_dictionaries(
                {"kind": st.sampled_from(["round_robin", "least_loaded", "prefix_aware"])}
            ),
            "slo": st.fixed_dictionaries(
                {}, optional={"ttft_s": st.floats(0.1, 5), "tpot_s": st.floats(0.01, 1)}
            ),
            "sim": st.fixed_dictionaries({}, optional={"fast_forward": st.booleans()}),
        },
    )


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside nested dicts and lists."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _deep(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@st.composite
def broken(draw: st.DrawFn, docs: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A generated document with 0-3 mutations: hostile values, unknown or missing keys, nesting."""
    doc = json.loads(json.dumps(draw(docs)))
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for part in path[:-1]:
            parent = parent[part]
        key = path[-1]
        op = draw(st.sampled_from(["value", "value", "value", "number", "delete", "unknown", "deep", "wrap"]))
        if op == "value":
            parent[key] = copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES)))  # never share one
        elif op == "number":
            parent[key] = draw(st.one_of(st.floats(), st.integers(-(2**70), 2**70), st.text(max_size=8)))
        elif op == "delete" and isinstance(parent, dict):
            del parent[key]
        elif op == "unknown" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = copy.deepcopy(
                draw(st.sampled_from(HOSTILE_VALUES))
            )
        elif op == "deep":
            parent[key] = _deep(draw(st.integers(1, 60)))
        elif op == "wrap":
            parent[key] = [parent[key]]
    return doc


def _bomb(levels: int, width: int) -> str:
    lines = [f"b0: &b0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


@st.composite
def yaml_texts(draw: st.DrawFn, docs: st.SearchStrategy[dict[str, Any]]) -> bytes:
    """A document as YAML bytes with 0-2 text-level mutations."""
    text = yaml.safe_dump(draw(broken(docs)), sort_keys=draw(st.booleans()), allow_unicode=True)
    data = text.encode("utf-8")
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
        op = draw(
            st.sampled_from(
                [
                    "bomb",
                    "chain",
                    "dup_line",
                    "truncate",
                    "bytes",
                    "char",
                    "brackets",
                    "bigint",
                    "bom",
                    "anchor",
                ]
            )
        )
        pos = draw(st.integers(0, len(data)))
        if op == "bomb":
            data += _bomb(draw(st.integers(1, 8)), draw(st.integers(1, 12))).encode()
        elif op == "chain":  # anchors nesting aliases of the one before: depth beyond the text's
            k, d = draw(st.integers(1, 40)), draw(st.integers(1, 31))
            data += "".join(
                f"c{i}: &c{i} {'[' * d}{f'*c{i - 1}' if i else 1}{']' * d}\n" for i in range(k)
            ).encode()
        elif op == "dup_line":
            lines = data.splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines.insert(i, lines[i])
            data = b"".join(lines)
        elif op == "truncate":
            data = data[:pos]
        elif op == "bytes":
            data = data[:pos] + draw(st.binary(min_size=1, max_size=6)) + data[pos:]
        elif op == "char":
            data = (
                data[:pos]
                + draw(st.sampled_from(list(b"[]{}:&*!%@`|>'\"\t-#,?"))).to_bytes(1, "big")
                + data[pos:]
            )
        elif op == "brackets":
            k = draw(st.integers(1, 600))
            data += f"deep: {'[' * k}{']' * k}\n".encode()
        elif op == "bigint":
            data += f"big: {'9' * draw(st.integers(1, 6000))}\n".encode()
        elif op == "bom":
            data = b"\xef\xbb\xbf" + data
        elif op == "anchor":
            data += b"x1: &a {tp: 1}\nx2: *a\nx3: {<<: *a, tp: 2}\n"
    return data


@pytest.fixture(scope="module")
def trace_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("fuzz_traces")
    moon = folder / "t.jsonl"
    moon.write_text(
        "".join(
            json.dumps(
                {"timestamp": i * 100, "input_length": 600 + i, "output_length": 4, "hash_ids": [0, i + 1]}
            )
            + "\n"
            for i in range(8)
        )
    )
    azure = folder / "t.csv"
    azure.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:{i:02d}.5,{100 + i},{3 + i}\n" for i in range(8))
    )
    return {"mooncake": str(moon), "azure": str(azure)}


# --------------------------------------------------------------------------- scenario tests


def test_fuzz_load_scenario_from_dicts(
    record_property: Callable[[str, Any], None], trace_paths: dict[str, str]
) -> None:
    stats = FuzzStats("scenario documents as dicts -> kvsim.load_scenario")

    @settings(max_examples=NUM_DICT_DOCS, **FUZZ_SETTINGS)
    @given(doc=broken(scenario_docs(trace_paths)))
    def check(doc: dict[str, Any]) -> None:
        out = stats.timed(lambda: kvsim.load_scenario(doc))
        assert isinstance(out, kvsim.Scenario | KvsimError)

    run_fuzz(check, stats, record_property)


def test_fuzz_load_scenario_from_yaml_text(
    record_property: Callable[[str, Any], None], trace_paths: dict[str, str], tmp_path: Path
) -> None:
    stats = FuzzStats("scenario documents as YAML files -> kvsim.load_scenario")
    path = tmp_path / "doc.yaml"

    @settings(max_examples=NUM_YAML_DOCS, **FUZZ_SETTINGS)
    @given(data=yaml_texts(scenario_docs(trace_paths)))
    def check(data: bytes) -> None:
        path.write_bytes(data)
        out = stats.timed(lambda: kvsim.load_scenario(path))
        assert isinstance(out, kvsim.Scenario | KvsimError)

    run_fuzz(check, stats, record_property)


def test_fuzz_validate_cli_several_files(
    record_property: Callable[[str, Any], None], trace_paths: dict[str, str], tmp_path: Path
) -> None:
    stats = FuzzStats("scenario documents as YAML files -> kvsim validate (in-process)")

    @settings(max_examples=NUM_VALIDATE_CALLS, **FUZZ_SETTINGS)
    @given(files=st.lists(yaml_texts(scenario_docs(trace_paths)), min_size=1, max_size=3))
    def check(files: list[bytes]) -> None:
        paths = []
        for i, data in enumerate(files):
            paths.append(tmp_path / f"f{i}.yaml")
            paths[-1].write_bytes(data)
        out, err = io.StringIO(), io.StringIO()

        def validate() -> int:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                return main(["validate", *map(str, paths)])

        code = stats.timed(validate, count=0)
        assert code in (0, 2), err.getvalue()
        assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), err.getvalue()
        for p in paths:  # every file is reported, whatever the files before it did
            ok, failed = f"{p}: ok (" in out.getvalue(), f"kvsim: error: {p}: " in err.getvalue()
            assert ok != failed, p
            stats.num_inputs += 1
            stats.num_ok += ok
            stats.num_errors += failed
        assert (code == 0) == (err.getvalue() == "")

    run_fuzz(check, stats, record_property)


#: KV blocks per replica in `test_fuzz_run_short_workloads`: sized from memory, a
#: falcon-7b (one KV head) pool on an H200 has millions of blocks and takes seconds to build.
RUN_MAX_BLOCKS = 4096


def _small_pools(doc: dict[str, Any]) -> dict[str, Any]:
    for group in doc.setdefault("replicas", [{}]):
        engine = group.setdefault("engine", {})
        engine["num_gpu_blocks_override"] = min(
            engine.get("num_gpu_blocks_override", RUN_MAX_BLOCKS), RUN_MAX_BLOCKS
        )
    return doc


def test_fuzz_run_short_workloads(
    record_property: Callable[[str, Any], None], trace_paths: dict[str, str]
) -> None:
    """Generated documents, unbroken, with small pools: absurd work (2**31 requests, 10**60
    replicas, a billion blocks) is for the per-run work estimate to refuse, not the parser."""
    stats = FuzzStats("short scenarios (<= 8 requests) -> kvsim.run")

    @settings(max_examples=NUM_RUNS, **FUZZ_SETTINGS)
    @given(doc=scenario_docs(trace_paths).map(_small_pools))
    def check(doc: dict[str, Any]) -> None:
        out = stats.timed(lambda: kvsim.run(doc))
        assert isinstance(out, kvsim.Result | KvsimError)

    run_fuzz(check, stats, record_property)


# --------------------------------------------------------------------------- trace tests

JUNK_LINES = [
    "",
    "{",
    "[]",
    "null",
    '"x"',
    "{}",
    "{" * 40 + "}" * 40,
    '{"a": ' + "[" * 3000 + "]" * 3000 + "}",
]

numbers = st.one_of(
    st.integers(-10, 10_000),
    st.sampled_from([2**31, 2**60, 2**63, 10**30, -1, 1e30, 2.5, math.nan, math.inf, -math.inf, 1e300]),
    st.floats(),
    st.text(max_size=6),
    st.none(),
    st.booleans(),
)


@st.composite
def mooncake_lines(draw: st.DrawFn) -> tuple[bytes, int]:
    """A JSONL file of 1-6 lines (rows, broken rows, junk, stray bytes, a long line) and its line count."""
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["row", "row", "row", "broken_row", "junk", "bytes", "long"]))
        if kind in ("row", "broken_row"):
            n = draw(st.integers(0, 3000))
            row: dict[str, Any] = {
                "timestamp": draw(st.integers(0, 10**6)),
                "input_length": n,
                "output_length": draw(st.integers(0, 50)),
                "hash_ids": draw(st.lists(st.integers(0, 50), min_size=-(-n // 512), max_size=-(-n // 512))),
            }
            if kind == "broken_row":
                key = draw(st.sampled_from(sorted(row)))
                op = draw(st.sampled_from(["value", "delete", "ids"]))
                if op == "value":
                    row[key] = draw(numbers)
                elif op == "delete":
                    del row[key]
                else:
                    row["hash_ids"] = draw(st.lists(numbers, max_size=6))
            lines.append(json.dumps(row).encode())
        elif kind == "junk":
            lines.append(
                draw(st.one_of(st.sampled_from(JUNK_LINES), st.text(max_size=30))).encode("utf-8", "replace")
            )
        elif kind == "bytes":
            lines.append(draw(st.binary(max_size=20)).replace(b"\n", b""))
        else:
            lines.append(b'{"x": "' + b"x" * draw(st.sampled_from([1000] * 8 + [200_000, 1_100_000])) + b'"}')
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n", b"\r\n"])), len(lines)


timestamps = st.one_of(
    st.builds(lambda s, f: f"2023-11-16 18:15:{s:02d}.{f}", st.integers(0, 59), st.integers(0, 10**7)),
    st.sampled_from(["", "yesterday", "2023-13-45 00:00:00", "2023-11-16 18:15:46." + "9" * 500, "nan"]),
    st.text(max_size=12),
)
cells = st.one_of(
    st.integers(-5, 100_000).map(str),
    st.sampled_from(["1e30", "inf", "nan", "-3", "2.5", "", '"', '"a,b"', "9" * 5000, str(2**63)]),
    st.text(max_size=8),
)


@st.composite
def azure_files(draw: st.DrawFn) -> tuple[bytes, int]:
    """An Azure CSV file (header, rows, broken rows, long and multi-line cells) and its row count."""
    header = draw(
        st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens"] * 4 + ["", "a,b,c", "TIMESTAMP"])
    )
    lines = [header]
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["row", "row", "row", "broken", "long_cell", "quoted_lines", "bytes"]))
        if kind == "row":
            lines.append(
                f"2023-11-16 18:15:{draw(st.integers(0, 59)):02d}.5,{draw(st.integers(0, 5000))},{draw(st.integers(0, 50))}"
            )
        elif kind == "broken":
            lines.append(",".join(draw(st.lists(st.one_of(timestamps, cells), min_size=0, max_size=5))))
        elif kind == "long_cell":
            lines.append("2023-11-16 18:15:00," + "1" * draw(st.sampled_from([100] * 4 + [140_000])) + ",3")
        elif kind == "quoted_lines":
            lines.append('2023-11-16 18:15:00,"' + "1\n" * draw(st.sampled_from([3] * 4 + [70_000])) + '",3')
        else:
            lines.append(draw(st.binary(max_size=20)).decode("latin-1").replace("\n", ""))
    text = "\n".join(lines) + draw(st.sampled_from(["", "\n"]))
    data = text.encode("utf-8")
    if draw(st.integers(0, 9)) == 0:
        data = data.replace(b"5", b"\xff", 1)
    return data, len(lines)


def _check_trace(path: Path, fmt: str, stats: FuzzStats, count: int) -> None:
    out = stats.timed(lambda: replay_trace(TraceWorkload(path=str(path), format=fmt)), count=count)
    assert isinstance(out, tuple | KvsimError)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["trace-stats", str(path), "--format", fmt])
    assert code in (0, 2) and "Traceback" not in err.getvalue(), err.getvalue()
    assert (code == 0) == isinstance(out, tuple)


def test_fuzz_mooncake_trace_lines(record_property: Callable[[str, Any], None], tmp_path: Path) -> None:
    stats = FuzzStats("Mooncake JSONL lines -> replay_trace, kvsim trace-stats")
    path = tmp_path / "t.jsonl"

    @settings(max_examples=NUM_TRACE_FILES, **FUZZ_SETTINGS)
    @given(generated=mooncake_lines())
    def check(generated: tuple[bytes, int]) -> None:
        path.write_bytes(generated[0])
        _check_trace(path, "mooncake", stats, count=generated[1])

    run_fuzz(check, stats, record_property)


def test_fuzz_azure_trace_lines(record_property: Callable[[str, Any], None], tmp_path: Path) -> None:
    stats = FuzzStats("Azure CSV lines -> replay_trace, kvsim trace-stats")
    path = tmp_path / "t.csv"

    @settings(max_examples=NUM_TRACE_FILES, **FUZZ_SETTINGS)
    @given(generated=azure_files())
    def check(generated: tuple[bytes, int]) -> None:
        path.write_bytes(generated[0])
        _check_trace(path, "azure", stats, count=generated[1])

    run_fuzz(check, stats, record_property)


# --------------------------------------------------------------------------- the command line

NUM_OPTION_VALUES = 600
NUM_SWEEP_GRIDS = 40


def _numeric_options() -> list[tuple[str, str, Callable[[str], Any]]]:
    """(command, option, argparse type) of every option of the parser that takes a number."""
    import argparse

    from kvsim.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [
        (name, action.option_strings[-1], action.type)
        for name, parser in sub.choices.items()
        for action in parser._actions
        if action.option_strings
        and action.nargs is None
        and getattr(action.type, "__name__", "") in ("integer", "number", "int", "float")
    ]


option_texts = st.one_of(
    st.floats().map(repr),
    st.floats().map(str),
    st.integers().map(str),
    st.integers(-(10**400), 10**400).map(str),
    st.sampled_from(
        ["nan", "-nan", "inf", "Infinity", "-inf", "1e-300", "5e-324", "1e309", "0x10", "1_0", " 7 "]
    ),
    st.text(max_size=12),
)


def test_fuzz_numeric_options(record_property: Callable[[str, Any], None]) -> None:
    """Every numeric option either refuses a text (argparse: exit 2) or yields a finite number
    of sane size: no option lets NaN, an infinity or an absurd count through to the library."""
    import argparse

    stats = FuzzStats("numeric command-line options -> their argparse types")
    options = _numeric_options()
    assert len(options) >= 30

    @settings(max_examples=NUM_OPTION_VALUES, **FUZZ_SETTINGS)
    @given(option=st.sampled_from(options), text=option_texts)
    def check(option: tuple[str, str, Callable[[str], Any]], text: str) -> None:
        def parse() -> Any:
            try:
                return option[2](text)
            except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
                raise KvsimError(str(exc)) from None  # what argparse reports as "argument OPTION: ..."

        value = stats.timed(parse)
        if not isinstance(value, KvsimError):
            assert isinstance(value, int | float) and math.isfinite(value), (option[:2], text, value)
            assert abs(value) <= 2**53, (option[:2], text, value)

    run_fuzz(check, stats, record_property)


def test_fuzz_sweep_grid_sizes(record_property: Callable[[str, Any], None], tmp_path: Path) -> None:
    """Grids of any shape: loaded when within MAX_SWEEP_POINTS, refused by count (before they
    are expanded) otherwise, always within the time bound."""
    from kvsim.limits import MAX_SWEEP_POINTS
    from kvsim.planning.sweep import load_sweep

    stats = FuzzStats("sweep grids (1-4 keys, 1-3,000 values) -> load_sweep")
    (tmp_path / "b.yaml").write_text("seed: 1\n")
    keys = ["seed", "workload.num_requests", "replicas.0.count", "workload.arrival.rate_per_s"]

    @settings(max_examples=NUM_SWEEP_GRIDS, **FUZZ_SETTINGS)
    @given(
        sizes=st.lists(st.one_of(st.integers(1, 12), st.integers(1, 3000)), min_size=1, max_size=4),
        listed=st.integers(0, 40),
    )
    def check(sizes: list[int], listed: int) -> None:
        grid = "".join(
            f"  {k}: [{', '.join(str(v + 1) for v in range(n))}]\n"
            for k, n in zip(keys[: len(sizes)], sizes, strict=True)
        )
        points = f"points: [{', '.join(['{seed: 7}'] * listed)}]\n" if listed else ""
        (tmp_path / "s.yaml").write_text(f"base: b.yaml\n{points}grid:\n{grid}")
        total = max(listed, 1) * math.prod(sizes)
        out = stats.timed(lambda: load_sweep(tmp_path / "s.yaml"))
        if total <= MAX_SWEEP_POINTS and listed <= 1:
            assert not isinstance(out, KvsimError) and len(out[1]) == total, out
        elif total > MAX_SWEEP_POINTS:
            assert isinstance(out, KvsimError) and f"{total:,} points" in str(out), out

    run_fuzz(check, stats, record_property)


#: Values tried in every option and positional argument of every command (issue 19): numbers
#: no option takes, text no file can be named, terminal escapes, a ~ that cannot expand,
#: special files and a filesystem root.
CLI_VALUES = [
    "nan",
    "inf",
    "-inf",
    "-1",
    "0",
    "1e309",
    "9" * 5000,
    "",
    "x" * 100_000,
    "\x1b[2J\x1b]0;pwned\x07\u202eevil",
    "~kvsim_no_such_user/x.json",
    "a\x00b",
    "r" * 300,
    "/",
    "/dev/zero",
    "true",
]
#: Of those, the values no number option accepts.
NOT_NUMBERS = {
    "nan",
    "inf",
    "-inf",
    "1e309",
    "9" * 5000,
    "",
    "x" * 100_000,
    "true",
    "/",
    "/dev/zero",
    "a\x00b",
}
#: Of those, the values no path option accepts (argparse refuses them before any work).
NOT_PATHS = {"", "x" * 100_000, "a\x00b", "r" * 300}


def _cli_bases(tmp_path: Path, trace: str, url: str) -> dict[str, list[str]]:
    """A cheap, valid command line of every command, into which one value at a time is put
    (``url``: a fake OpenAI server for ``observe``, observed once for ``compare``)."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {num_requests: 3}\nreplicas: [{engine: {num_gpu_blocks_override: 256}}]\n")
    (tmp_path / "sweep.yaml").write_text("base: s.yaml\ngrid: {seed: [1]}\n")
    points = tmp_path / "m.csv"
    points.write_text("tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n1,prefill,1,128,0,0.01\n"
                      "1,decode,8,0,1024,0.008\n1,prefill,1,1024,0,0.05\n1,decode,1,0,512,0.006\n")  # fmt: skip
    (tmp_path / "nofixtures").mkdir(exist_ok=True)
    s = str(scenario)
    # observe sends on the scenario's clock: 3 requests at once, 4 tokens each (0.3 s a call, not
    # the 1.6 s of s.yaml's arrivals), to the fake server: never a real one, never a real vLLM.
    quick = tmp_path / "o.yaml"
    quick.write_text("workload: {num_requests: 3, arrival: {kind: constant, rate_per_s: 1000},\n"
                     "  prompt_tokens: {kind: fixed, tokens: 16}, output_tokens: {kind: fixed, tokens: 4}}\n"
                     "replicas: [{engine: {num_gpu_blocks_override: 256}}]\n")  # fmt: skip
    observe = [
        "observe",
        str(quick),
        "--url",
        url,
        "--out",
        str(tmp_path / "obs"),
        "--quiet",
        "--scrape-interval-s",
        "0.05",
    ]
    assert main(observe) == 0
    return {
        "observe": observe,
        "compare": ["compare", str(tmp_path / "obs")],
        "run": ["run", s, "--no-progress", "--quiet"],
        "validate": ["validate", s],
        "schema": ["schema"],
        "kv-size": ["kv-size", "--model", "llama-3-8b"],
        "fit": ["fit", "--model", "llama-3-8b", "--gpu", "h100-sxm"],
        "cache-curve": ["cache-curve", trace, "--capacities", "10,inf"],
        "trace-stats": ["trace-stats", trace],
        "sweep": ["sweep", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "sw"), "--jobs", "1"],
        "capacity": ["capacity", s, "--knob", "replicas.0.count", "--range", "1:1", "--jobs", "1", "--quiet"],
        "plan": ["plan", s, "--gpus", "h100-sxm", "--tp", "1", "--max-gpus", "1", "--jobs", "1", "--quiet"],
        "spikes": ["spikes", s],
        "exposure": ["exposure", s],
        "sharing": ["sharing", s, "--widths", "2"],
        "calibrate": [
            "calibrate",
            "--fit-measurements",
            str(points),
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--out",
            str(tmp_path / "fit.json"),
        ],
        "profiles": ["profiles"],
        "bench-serve": [
            "bench-serve",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--num-prompts",
            "4",
            "--max-concurrency",
            "2",
            "--random-input-len",
            "64",
            "--random-output-len",
            "4",
            "--no-progress",
        ],
        "predict": [
            "predict",
            "--cost-model",
            "roofline",
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--points",
            str(points),
        ],
        "verify-vllm": ["verify-vllm", "--fixtures", str(tmp_path / "nofixtures")],
    }


#: Options that exclude another one of the base command line: (command, option) -> the other.
_EXCLUDES = {
    ("capacity", "--values"): "--range",
    ("calibrate", "--fit-roofline"): "--fit-measurements",
    ("calibrate", "--compare"): "--fit-measurements",
    ("calibrate", "--from-observed"): "--fit-measurements",
    ("verify-vllm", "--record-fixtures"): "--fixtures",
}


def _with(base: list[str], command: str, option: str | int, value: str) -> list[str]:
    """``base`` with ``option`` (a flag, or the index of a positional) set to ``value``."""
    argv = list(base)
    if isinstance(option, int):
        if option < len(argv):
            argv[option] = value
        else:
            argv.append(value)
        return argv
    other = _EXCLUDES.get((command, option))
    if other in argv:
        i = argv.index(other)
        del argv[i : i + 2]
    if option in argv:
        argv[argv.index(option) + 1] = value
    else:
        argv += [option, value]
    return argv


def _cli_surface() -> list[tuple[str, str | int, str]]:
    """(command, option or positional index, type name) of every value-taking argument."""
    from kvsim.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out: list[tuple[str, str | int, str]] = []
    for name, command in sub.choices.items():
        position = 1
        for action in command._actions:
            kind = getattr(action.type, "__name__", "text") if action.type else "text"
            if not action.option_strings:
                out.append((name, position, kind))
                position += 1
            elif action.nargs != 0 and not isinstance(action, argparse._HelpAction):
                out.append((name, action.option_strings[-1], kind))
    return out


def test_fuzz_every_option_of_every_command(
    record_property: Callable[[str, Any], None],
    trace_paths: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """Every option and positional argument of every command, each given every `CLI_VALUES`
    value in an otherwise valid command line: an answer or a clean refusal (exit 0, 2 or 3,
    never a traceback), number options refusing what is not a number in range, path options
    refusing what no file can be named, and terminal escapes never printed raw."""
    monkeypatch.chdir(tmp_path)
    # verify-vllm --record-fixtures DIR (any value that names a folder: "nan", "0", "true" ...)
    # records every catalogue workload with the real vLLM, minutes each: an interpreter that
    # exits at once stands in for .venv-vllm, so the fuzz checks kvsim's side of the command.
    fake_vllm = tmp_path / "fake-vllm-python"
    fake_vllm.write_text("#!/bin/sh\nexit 0\n")
    fake_vllm.chmod(0o755)
    monkeypatch.setenv(VLLM_PYTHON_ENV, str(fake_vllm))
    stats = FuzzStats("command lines: every option x hostile value -> kvsim main()")
    server = FakeServer(lambda body, i: Reply(ttft_s=0.0, itl_s=0.0)).__enter__()
    request.addfinalizer(lambda: server.__exit__(None, None, None))
    bases = _cli_bases(tmp_path, trace_paths["azure"], server.url)
    surface = _cli_surface()
    assert {c for c, _, _ in surface} | {"schema", "profiles"} == set(bases)  # a new command needs a base

    def check() -> None:
        for command, option, kind in surface:
            for value in CLI_VALUES:
                argv = _with(bases[command], command, option, value)
                out, err = io.StringIO(), io.StringIO()

                def call(argv: list[str] = argv, out: io.StringIO = out, err: io.StringIO = err) -> int:
                    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                        try:
                            return main(argv)
                        except SystemExit as exc:  # argparse's refusals
                            return int(exc.code or 0)

                code = stats.timed(call)
                text = err.getvalue()
                where = f"{command} {option} {value[:40]!r}: exit {code}: {text[-600:]}"
                assert code in (0, 2, 3), where
                assert "Traceback" not in text, where
                assert "\x1b" not in text + out.getvalue() and "\u202e" not in text + out.getvalue(), where
                if kind in ("integer", "number") and value in NOT_NUMBERS:
                    assert code == 2, where
                if kind == "path_arg" and value in NOT_PATHS:
                    assert code == 2, where

    run_fuzz(check, stats, record_property)
    assert sorted(p.name for p in Path("/").iterdir() if p.name.startswith(".kvsim")) == []
