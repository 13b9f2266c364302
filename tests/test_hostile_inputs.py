"""Hostile and careless input, as issue 12 found it: every case is a clean error, and fast.

Each concrete input of the issue is one parameter below: scenario files (through
`kvsim validate`, `kvsim.load_scenario` and the sweep loader), field values that used to
validate and then crash or hang the run, trace files (through `replay_trace`,
`kvsim trace-stats` and `kvsim run`), output folders and a closed stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import kvsim
from kvsim.cli import main
from kvsim.errors import KvsimError, ScenarioError, TraceError
from kvsim.limits import MAX_TRACE_LINE_CHARS, MAX_YAML_BYTES
from kvsim.outputs import write_marker
from kvsim.planning.sweep import SweepError, load_sweep
from kvsim.results.io import RESULT_FILES, clean_stale, load_result, save_result
from kvsim.scenario.loading import parse_yaml
from kvsim.workload.config import TraceWorkload
from kvsim.workload.traces import replay_trace

#: Bound on the CPU time of one refusal, seconds (the alias bomb must be refused in < 1 s).
#: CPU time, not wall time: this machine's cores are shared, and a loaded neighbour must
#: not fail the test (the refusals take milliseconds).
REFUSE_WITHIN_S = 1.0

ALIAS_BOMB = """\
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
workload: [*f,*f,*f,*f,*f,*f,*f,*f,*f]
"""

#: Scenario files that are not YAML kvsim will read: (id, bytes, what the error says).
BAD_FILES = [
    ("alias_bomb", ALIAS_BOMB.encode(), "once aliases are expanded"),
    ("recursive_alias", b"a: &a [1, *a]\n", "inside the node it names"),
    (
        "alias_chain_depth",  # 30 anchors, each 31 deep around an alias of the one before
        "".join(f"a{i}: &a{i} {'[' * 31}{f'*a{i - 1}' if i else 1}{']' * 31}\n" for i in range(30)).encode(),
        "nested deeper than 32 levels once alias *a0 is expanded",
    ),
    (
        "too_many_aliases",
        ("a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n").encode(),
        "more than 100 aliases",
    ),
    ("not_utf8", b"name: ok\ndescription: caf\xe9\n", "byte 25 (line 2): not UTF-8: byte 0xe9"),
    ("utf16", "name: x\n".encode("utf-16"), "byte 0 (line 1): not UTF-8: byte 0xff"),
    (
        "nested_500_flow",
        ("workload: " + "[" * 500 + "]" * 500 + "\n").encode(),
        "nested deeper than 32 levels",
    ),
    (
        "nested_500_block",
        "".join("  " * i + "k:\n" for i in range(500)).encode(),
        "nested deeper than 32 levels",
    ),
    ("int_5000_digits", ("seed: " + "9" * 5000 + "\n").encode(), "an integer of 5,000 digits; at most 64"),
    ("hex_int_5000_digits", ("seed: 0x" + "f" * 5000 + "\n").encode(), "an integer of 5,000 digits"),
    (
        "duplicate_key",
        b"seed: 1\nname: a\nseed: 2\n",
        "line 3, column 1: duplicate key 'seed' (first on line 1)",
    ),
    ("duplicate_key_flow", b"replicas: [{tp: 1, tp: 2}]\n", "duplicate key 'tp' (first on line 1)"),
    ("long_scalar", ("name: " + "x" * 70_000 + "\n").encode(), "a scalar of 70,000 characters"),
    ("nul_character", b"name: a\x00b\n", "character #x0000 is not allowed"),
    ("bad_timestamp", b"name: 2023-13-45\n", "cannot read timestamp value"),
    ("escape_beyond_unicode", b'name: "\\U0A0010000"\n', "chr() arg not in range"),
    ("escape_beyond_c_int", b'name: "\\UA00010000"\n', "too large to convert"),
    ("bad_bool_tag", b"sim: {fast_forward: !!bool maybe}\n", "cannot read bool value"),
    ("python_tag", b"name: !!python/object/apply:os.system [ls]\n", "not valid YAML"),
    ("two_documents", b"seed: 1\n---\nseed: 2\n", "expected a single document"),
    ("too_large", b"#" * (MAX_YAML_BYTES + 1), "larger than 1,048,576 bytes"),
    ("not_a_mapping", b"[1, 2]\n", "a scenario must be a YAML mapping"),
    # Issue 19: what ran as the default scenario, or was converted silently.
    ("empty_file", b"", "a scenario must be a YAML mapping, got an empty document"),
    ("comments_only", b"# nothing here\n\n", "a scenario must be a YAML mapping, got only comments"),
    ("null_document", b"null\n", "a scenario must be a YAML mapping, got null"),
    ("tilde_document", b"# c\n~\n", "a scenario must be a YAML mapping, got null"),
    ("seed_true", b"seed: true\n", "seed: Input should not be a boolean"),
    ("count_false", b"workload: {num_requests: false}\n", "num_requests: Input should not be a boolean"),
    ("flag_one", b"replicas: [{engine: {enable_prefix_caching: 1}}]\n", "Input should be a boolean"),
    ("binary_description", b"description: !!binary aGVsbG8=\n", "tag '!!binary' is not allowed"),
    ("set_tag", b"name: !!set {a: null}\n", "tag '!!set' is not allowed"),
    ("name_nul_escape", b'name: "a\\0b"\n', "name: must not contain control or bidirectional characters"),
    ("name_rtl_override", 'name: "a\u202eb"\n'.encode(), "(U+202E)"),
    ("name_ansi_escape", b'name: "\\e[31mred"\n', "(U+001B)"),
    ("group_name_newline", b'replicas: [{name: "a\\nb"}]\n', "replicas.0.name: must not contain"),
    ("tenant_bidi", 'workload: {tenants: [{name: "x\u2067"}]}\n'.encode(), "tenants.0.name: must not"),
    ("description_ansi", b'description: "\\e]0;title\\a"\n', "description: must not contain"),
]

#: Values that validated and then crashed or hung the run: (id, YAML, field path, rule).
BAD_VALUES = [
    (
        "lognormal_cv_1e308",
        "workload: {prompt_tokens: {kind: lognormal, mean_tokens: 100, cv: 1.0e+308}}",
        "workload.synthetic.prompt_tokens.lognormal.cv",
        "less than or equal to 100",
    ),
    (
        "gamma_cv_inf",
        "workload: {arrival: {kind: gamma, rate_per_s: 1, cv: .inf}}",
        "workload.synthetic.arrival.gamma.cv",
        "finite number",
    ),
    (
        "tenant_weight_inf",
        "workload: {tenants: [{name: a, weight: .inf}]}",
        "workload.synthetic.tenants.0.weight",
        "finite number",
    ),
    (
        "think_time_inf",
        "workload: {sessions: {turns: {kind: fixed, tokens: 2}, think_time_s: .inf}}",
        "workload.synthetic.sessions.think_time_s",
        "finite number",
    ),
    (
        "tokens_1e30",
        "workload: {prompt_tokens: {kind: fixed, tokens: 1.0e+30}}",
        "workload.synthetic.prompt_tokens.fixed.tokens",
        "less than or equal to 2147483647",
    ),
    (
        "tokens_1e30_string",
        "workload: {output_tokens: {kind: uniform, min_tokens: 1, max_tokens: 1e30}}",
        "workload.synthetic.output_tokens.uniform.max_tokens",
        "valid integer",
    ),
    (
        "tokens_2_63",
        f"workload: {{prompt_tokens: {{kind: fixed, tokens: {2**63}}}}}",
        "workload.synthetic.prompt_tokens.fixed.tokens",
        "less than or equal to 2147483647",
    ),
    (
        "shared_prefix_2_63",
        f"workload: {{shared_prefix_tokens: {2**63}}}",
        "workload.synthetic.shared_prefix_tokens",
        "less than or equal to 2147483647",
    ),
    (
        "diurnal_phase_nan",
        "workload: {arrival: {kind: diurnal, mean_rate_per_s: 1, phase_s: .nan}}",
        "workload.synthetic.arrival.diurnal.phase_s",
        "finite number",
    ),
    (
        "diurnal_period_tiny",
        "workload: {arrival: {kind: diurnal, mean_rate_per_s: 1, period_s: 1.0e-300}}",
        "workload.synthetic.arrival.diurnal.period_s",
        "greater than or equal to 0.001",
    ),
    (
        "poisson_rate_denormal",
        "workload: {arrival: {kind: poisson, rate_per_s: 5.0e-324}}",
        "workload.synthetic.arrival.poisson.rate_per_s",
        "greater than or equal to 0.00001",
    ),
    (
        "inline_model_num_params_inf",
        "model: {name: m, num_layers: 2, hidden_size: 64, num_attention_heads: 2, num_kv_heads: 2, "
        "head_dim: 32, intermediate_size: 128, vocab_size: 100, num_params: .inf, max_model_len: 4096}",
        "model.num_params",
        "finite number",
    ),
    (
        "per_iteration_overhead_inf",
        "replicas: [{cost_model: {kind: roofline, per_iteration_overhead_s: .inf}}]",
        "replicas.0.cost_model.roofline.per_iteration_overhead_s",
        "finite number",
    ),
    (
        "per_layer_overhead_inf",
        "replicas: [{cost_model: {kind: roofline, per_layer_overhead_s: .inf}}]",
        "replicas.0.cost_model.roofline.per_layer_overhead_s",
        "finite number",
    ),
    (
        "inline_gpu_bandwidth_nan",
        "replicas: [{gpu: {name: g, memory_bytes: 80000000000, hbm_bandwidth_bytes_per_s: .nan, "
        "bf16_flops: 1.0e+15, fp16_flops: 1.0e+15, interconnect_bandwidth_bytes_per_s: 1.0e+11, "
        "pcie_bandwidth_bytes_per_s: 3.2e+10}}]",
        "replicas.0.gpu.hbm_bandwidth_bytes_per_s",
        "finite number",
    ),
    (
        "trace_time_scale_inf",
        "workload: {kind: trace, path: t.jsonl, format: mooncake, time_scale: .inf}",
        "workload.trace.time_scale",
        "finite number",
    ),
]

#: Engine fields of the scenario schema (kvsim/scenario/schema.py).
ENGINE_VALUES = [
    ("swap_space_inf", "replicas: [{engine: {swap_space_gib: .inf}}]", "replicas.0.engine.swap_space_gib"),
    ("cpu_offload_inf", "replicas: [{engine: {cpu_offload_gib: .inf}}]", "replicas.0.engine.cpu_offload_gib"),
    (
        "activation_reserve_inf",
        "replicas: [{engine: {activation_reserve_gib: .inf}}]",
        "replicas.0.engine.activation_reserve_gib",
    ),
]


def _validate(path: str | Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    start = time.process_time()
    code = main(["validate", str(path)])
    elapsed = time.process_time() - start
    captured = capsys.readouterr()
    return code, captured.err, elapsed


# --------------------------------------------------------------------------- scenario files


@pytest.mark.parametrize(("content", "message"), [p[1:] for p in BAD_FILES], ids=[p[0] for p in BAD_FILES])
def test_bad_scenario_file_is_refused_fast_by_cli_and_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    code, err, elapsed = _validate(path, capsys)
    assert code == 2 and message in err and str(path) in err, err
    assert "Traceback" not in err and elapsed < REFUSE_WITHIN_S
    start = time.process_time()
    with pytest.raises(ScenarioError) as info:
        kvsim.load_scenario(path)
    assert time.process_time() - start < REFUSE_WITHIN_S
    assert message in str(info.value) and info.value.source == str(path)


def test_alias_bomb_is_refused_by_the_sweep_loader(tmp_path: Path) -> None:
    (tmp_path / "bomb.yaml").write_text(ALIAS_BOMB)
    (tmp_path / "base.yaml").write_text("seed: 1\n")
    cases = {
        "bomb_sweep.yaml": "base: base.yaml\n" + ALIAS_BOMB.replace("workload:", "grid:"),
        "bomb_base.yaml": "base: bomb.yaml\n",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        start = time.process_time()
        with pytest.raises((SweepError, ScenarioError), match="once aliases are expanded"):
            load_sweep(tmp_path / name)
        assert time.process_time() - start < REFUSE_WITHIN_S, name


def test_sweep_file_errors_say_sweep_file(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text("base: b.yaml\nbase: c.yaml\n")
    with pytest.raises(SweepError, match=r"s\.yaml: invalid sweep file\n  line 2, column 1: duplicate key"):
        load_sweep(tmp_path / "s.yaml")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_dev_zero_fails_fast(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, err, elapsed = _validate("/dev/zero", capsys)
    assert code == 2 and "/dev/zero" in err and "larger than 1,048,576 bytes" in err
    assert elapsed < REFUSE_WITHIN_S
    with pytest.raises(ScenarioError, match="larger than"):
        kvsim.load_scenario("/dev/zero")
    (tmp_path / "s.yaml").write_text("base: /dev/zero\n")
    with pytest.raises(ScenarioError, match="larger than"):
        load_sweep(tmp_path / "s.yaml")
    with pytest.raises(SweepError, match="larger than"):
        load_sweep("/dev/zero")


def test_validate_keeps_going_and_reports_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = []
    for name, content, _ in BAD_FILES[:8]:
        (tmp_path / f"{name}.yaml").write_bytes(content)
        paths.append(str(tmp_path / f"{name}.yaml"))
    good = tmp_path / "good.yaml"
    good.write_text("seed: 1\n")
    missing = tmp_path / "missing.yaml"
    code = main(["validate", *paths, str(missing), str(good)])
    captured = capsys.readouterr()
    assert code == 2
    for path in [*paths, str(missing)]:
        assert f"kvsim: error: {path}: invalid scenario" in captured.err, path
    assert captured.out.startswith(f"{good}: ok (1 replica, model llama-3-8b, workload synthetic; estimated ")
    assert captured.out.count("\n") == 1
    assert "Traceback" not in captured.err


def test_merge_keys_still_work_and_may_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "merge.yaml"
    path.write_text(
        "replicas:\n  - &r {name: a, count: 1, tp: 1}\n  - {<<: *r, name: b, tp: 2}\n"
        "workload: {num_requests: 5}\n"
    )
    scenario = kvsim.load_scenario(path)
    assert [(g.name, g.tp) for g in scenario.replicas] == [("a", 1), ("b", 2)]


# --------------------------------------------------------------------------- field values


@pytest.mark.parametrize(
    ("text", "field", "rule"), [p[1:] for p in BAD_VALUES], ids=[p[0] for p in BAD_VALUES]
)
def test_bad_value_names_the_field_and_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, field: str, rule: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text + "\n")
    code, err, elapsed = _validate(path, capsys)
    assert code == 2 and elapsed < REFUSE_WITHIN_S, err
    with pytest.raises(ScenarioError) as info:
        kvsim.load_scenario(path)
    assert any(field in p and rule in r for p, r in info.value.problems), info.value.problems


@pytest.mark.parametrize(("text", "field"), [p[1:] for p in ENGINE_VALUES], ids=[p[0] for p in ENGINE_VALUES])
def test_engine_fields_refuse_infinity(text: str, field: str) -> None:
    with pytest.raises(ScenarioError) as info:
        kvsim.load_scenario(parse_yaml(text, "<test>"))
    assert any(p == field for p, _ in info.value.problems)


def test_bounds_of_the_schema_models_appear_in_the_json_schema() -> None:
    """Every number field of the scenario, workload, cost-model and spec models has a finite maximum."""
    from pydantic import BaseModel

    from kvsim.cost import config as cost_config
    from kvsim.model.specs import GpuSpec, ModelSpec
    from kvsim.scenario import schema as scenario_schema
    from kvsim.workload import config as workload_config

    models: list[type[BaseModel]] = [ModelSpec, GpuSpec]
    for module in (workload_config, cost_config, scenario_schema):
        models += [
            v
            for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__
        ]
    unbounded = []
    for model in models:
        schema = model.model_json_schema()
        for name, prop in schema.get("properties", {}).items():
            variants = prop.get("anyOf", [prop])
            for variant in variants:
                if variant.get("type") in ("number", "integer") and not {"maximum", "exclusiveMaximum"} & set(
                    variant
                ):
                    unbounded.append(f"{model.__name__}.{name}")
    assert unbounded == []


def test_extreme_but_valid_values_still_run() -> None:
    """The bounds themselves run: a gamma cv of 100, a lognormal at the token limit, a down-ramp
    at 1000:1, a diurnal phase far out, a tenant weight of 1e9."""
    result = kvsim.run(
        {
            "workload": {
                "num_requests": 20,
                "arrival": {"kind": "gamma", "rate_per_s": 5, "cv": 100},
                "prompt_tokens": {"kind": "lognormal", "mean_tokens": 200, "cv": 100, "max_tokens": 4000},
                "output_tokens": {"kind": "fixed", "tokens": 4},
                "tenants": [{"name": "a", "weight": 1e9}, {"name": "b", "weight": 1e-9}],
            }
        }
    )
    assert result.summary["num_requests"] == 20
    for arrival in (
        {"kind": "ramp", "start_rate_per_s": 1000, "end_rate_per_s": 1, "duration_s": 1},
        {"kind": "diurnal", "mean_rate_per_s": 10, "phase_s": -1e9, "period_s": 1e-3},
        {"kind": "onoff", "rate_on_per_s": 0.01, "mean_on_s": 1, "mean_off_s": 1e9},
    ):
        kvsim.run(
            {
                "workload": {
                    "num_requests": 5,
                    "arrival": arrival,
                    "output_tokens": {"kind": "fixed", "tokens": 2},
                }
            }
        )


def test_lognormal_without_max_is_clipped_at_the_token_limit() -> None:
    import numpy as np

    from kvsim.limits import MAX_TOKENS
    from kvsim.workload.config import LognormalLength
    from kvsim.workload.synthetic import sample_lengths

    x = sample_lengths(LognormalLength(mean_tokens=MAX_TOKENS, cv=100), 10_000, np.random.default_rng(0))
    assert x.min() >= 1 and x.max() == MAX_TOKENS


# --------------------------------------------------------------------------- traces

MOONCAKE_OK = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_OK = "2023-11-16 18:15:46.68,374,44\n"


def _mooncake(**fields: Any) -> str:
    row = {"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]} | fields
    return json.dumps(row) + "\n"


#: Trace files: (id, format, bytes, what the error says).
BAD_TRACES = [
    (
        "csv_cell_200k",
        "azure",
        (AZURE_HEADER + AZURE_OK + "2023-11-16 18:15:47," + "1" * 200_000 + ",5\n").encode(),
        "line 3: a cell longer than 131,072 characters",
    ),
    (
        "csv_quoted_cell_over_lines",
        "azure",
        (AZURE_HEADER + AZURE_OK + '2023-11-16 18:15:47,"' + "1\n" * 70_000 + '",5\n').encode(),
        "a cell longer than 131,072 characters",
    ),
    (
        "line_over_1mib",
        "mooncake",
        (MOONCAKE_OK + '{"x": "' + "x" * MAX_TRACE_LINE_CHARS + '"}\n').encode(),
        "line 2: line longer than 1,048,576 characters",
    ),
    (
        "json_nested_5000",
        "mooncake",
        (MOONCAKE_OK + '{"hash_ids": ' + "[" * 5000 + "]" * 5000 + "}\n").encode(),
        "line 2: JSON nested deeper than 16 levels",
    ),
    (
        "json_nested_100",
        "mooncake",
        (MOONCAKE_OK + '{"hash_ids": ' + "[" * 100 + "]" * 100 + "}\n").encode(),
        "line 2: JSON nested deeper than 16 levels",
    ),
    (
        "hash_id_2_60",
        "mooncake",
        (MOONCAKE_OK + _mooncake(hash_ids=[0, 2**60])).encode(),
        "line 2: hash_ids must lie in 0..2**60 - 1, got 1152921504606846976",
    ),
    (
        "hash_id_negative",
        "mooncake",
        (MOONCAKE_OK + _mooncake(hash_ids=[-1, 1])).encode(),
        "line 2: hash_ids must lie in 0..2**60 - 1, got -1",
    ),
    (
        "hash_id_bool",
        "mooncake",
        (MOONCAKE_OK + _mooncake(hash_ids=[True, 1])).encode(),
        "line 2: hash_ids must be a list of integers",
    ),
    (
        "tokens_1e30_json",
        "mooncake",
        (MOONCAKE_OK + _mooncake(input_length=1e30)).encode(),
        "line 2: input_length must be <= 2,147,483,647",
    ),
    (
        "tokens_2_63_json",
        "mooncake",
        (MOONCAKE_OK + _mooncake(output_length=2**63)).encode(),
        "line 2: output_length must be <= 2,147,483,647",
    ),
    (
        "tokens_5000_digits_json",
        "mooncake",
        (MOONCAKE_OK + '{"input_length": ' + "9" * 5000 + "}\n").encode(),
        "line 2: not valid JSON",
    ),
    (
        "tokens_nan_json",
        "mooncake",
        (MOONCAKE_OK + _mooncake(input_length=float("nan"))).encode(),
        "line 2: input_length must be an integer, got nan",
    ),
    (
        "tokens_negative_json",
        "mooncake",
        (MOONCAKE_OK + _mooncake(output_length=-3)).encode(),
        "line 2: output_length must be >= 0",
    ),
    (
        "tokens_fraction_json",
        "mooncake",
        (MOONCAKE_OK + _mooncake(output_length=2.5)).encode(),
        "line 2: output_length must be an integer",
    ),
    (
        "timestamp_inf_json",
        "mooncake",
        (MOONCAKE_OK + _mooncake(timestamp=float("inf"))).encode(),
        "line 2: timestamp must be finite",
    ),
    (
        "timestamp_1e300_json",
        "mooncake",
        (MOONCAKE_OK + _mooncake(timestamp=1e300)).encode(),
        "line 2: timestamp must lie within",
    ),
    (
        "tokens_1e30_csv",
        "azure",
        (AZURE_HEADER + AZURE_OK + "2023-11-16 18:15:47,1e30,5\n").encode(),
        "line 3: ContextTokens must be <= 2,147,483,647",
    ),
    (
        "tokens_inf_csv",
        "azure",
        (AZURE_HEADER + AZURE_OK + "2023-11-16 18:15:47,inf,5\n").encode(),
        "line 3: ContextTokens must be an integer, got 'inf'",
    ),
    (
        "tokens_nan_csv",
        "azure",
        (AZURE_HEADER + AZURE_OK + "2023-11-16 18:15:47,3,nan\n").encode(),
        "line 3: GeneratedTokens must be an integer, got 'nan'",
    ),
    (
        "tokens_negative_csv",
        "azure",
        (AZURE_HEADER + AZURE_OK + "2023-11-16 18:15:47,-4,5\n").encode(),
        "line 3: ContextTokens must be >= 0",
    ),
    (
        "tokens_fraction_csv",
        "azure",
        (AZURE_HEADER + AZURE_OK + "2023-11-16 18:15:47,4.5,5\n").encode(),
        "line 3: ContextTokens must be an integer",
    ),
    (
        "not_utf8_trace",
        "azure",
        (AZURE_HEADER + AZURE_OK).encode() + b"2023-11-16 18:15:47,\xff,5\n",
        "line 3: not UTF-8 text: byte 0xff at byte offset 90",
    ),
    ("empty_jsonl", "mooncake", b"", "line 1: no rows (an empty trace)"),
    ("blank_lines_jsonl", "mooncake", b"\n\n  \n", "line 3: no rows (an empty trace)"),
    ("empty_csv", "azure", b"", "line 1: empty file: no header and no rows"),
    ("header_only_csv", "azure", AZURE_HEADER.encode(), "line 1: a header but no rows"),
    (
        "no_usable_rows",
        "mooncake",
        _mooncake(input_length=0, hash_ids=[]).encode() * 3,
        "lines 1-3: no usable rows: 3 read, 3 dropped (3 zero_prompt)",
    ),
    (
        "no_usable_rows_csv",
        "azure",
        (AZURE_HEADER + "2023-11-16 18:15:47,5,0\n").encode(),
        "lines 1-2: no usable rows: 1 read, 1 dropped (1 zero_output)",
    ),
]


@pytest.mark.parametrize(
    ("fmt", "content", "message"), [p[1:] for p in BAD_TRACES], ids=[p[0] for p in BAD_TRACES]
)
def test_bad_trace_is_a_trace_error_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, content: bytes, message: str
) -> None:
    path = tmp_path / ("t.jsonl" if fmt == "mooncake" else "t.csv")
    path.write_bytes(content)
    start = time.process_time()
    with pytest.raises(TraceError) as info:
        replay_trace(TraceWorkload(path=str(path), format=fmt))
    assert time.process_time() - start < REFUSE_WITHIN_S
    assert str(info.value).startswith(f"{path}, line") and message in str(info.value), str(info.value)
    assert len(str(info.value)) < 400  # never the whole cell or line
    code = main(["trace-stats", str(path), "--format", fmt])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_empty_trace_does_not_run_zero_requests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.jsonl").write_text("")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {kind: trace, path: t.jsonl, format: mooncake}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "out")]) == 2
    assert "t.jsonl, line 1: no rows (an empty trace)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(TraceError):
        kvsim.run(scenario)


def test_generic_priority_out_of_range(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("t,in,out,prio\n0,5,1,1e300\n")
    cols = {"timestamp": "t", "prompt_tokens": "in", "output_tokens": "out", "priority": "prio"}
    with pytest.raises(TraceError, match=r"t\.csv, line 2: prio must be an integer within"):
        replay_trace(TraceWorkload(path=str(path), format="csv", columns=cols))


def test_trace_with_a_bom_and_crlf_lines_reads(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (AZURE_HEADER + AZURE_OK + AZURE_OK).replace("\n", "\r\n").encode())
    requests, report = replay_trace(TraceWorkload(path=str(path), format="azure"))
    assert len(requests) == 2 and report.num_rows == 2


def test_trace_stats_bad_columns_and_unreadable_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_bytes(b"\xff\xfe")
    assert main(["trace-stats", str(tmp_path / "t.csv")]) == 2
    assert main(["trace-stats", str(tmp_path / "t.csv"), "--format", "csv", "--columns", "[" * 5000]) == 2
    assert main(["trace-stats", str(tmp_path / "t.csv"), "--format", "csv", "--columns", "9" * 5000]) == 2
    assert "Traceback" not in capsys.readouterr().err


# --------------------------------------------------------------------------- output folders


def _small_result() -> kvsim.Result:
    return kvsim.run(None, overrides=["workload.num_requests=3"])


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temporaries_of_killed_runs_are_cleaned_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # What killed runs leave (issue 19: kvsim's names carry its prefix and the PID, and the
    # folders its marker; look-alikes without them are the user's, see the next test).
    pid = _dead_pid()
    stale = [
        tmp_path / f".out.kvsim-tmp-{pid}-0badf00d",
        tmp_path / f".out.kvsim-old-{pid}-abc12345",
        tmp_path / f".out.kvsim-old-{pid}-00000001",
    ]
    for folder in stale:
        folder.mkdir()
        write_marker(folder, "result" if ".kvsim-tmp-" in folder.name else "parked-result")
        (folder / "junk").write_text("x")
    alive = tmp_path / f".out.kvsim-tmp-{os.getpid()}-00000002"  # a run of a live process: left alone
    alive.mkdir()
    write_marker(alive, "result")
    scenario = tmp_path / "a.yaml"
    scenario.write_text("workload: {num_requests: 3}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--json"]) == 0
    err = capsys.readouterr().err
    for folder in stale:
        assert f"kvsim: note: {tmp_path / 'out'}: removed {folder.name}, left by an interrupted run" in err
        assert not folder.exists()
    assert alive.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["a.yaml", "out", alive.name])


def test_a_result_parked_by_a_kill_between_the_renames_is_recovered(tmp_path: Path) -> None:
    out = save_result(_small_result(), tmp_path / "out")
    parked = tmp_path / f".out.kvsim-old-{_dead_pid()}-abcd0123"
    parked.mkdir()
    write_marker(parked, "parked-result")
    os.rename(out, parked / "result")  # the state after the first rename of a replacement
    assert load_result(out).summary["num_requests"] == 3
    assert sorted(p.name for p in out.iterdir()) == sorted(RESULT_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # The same through clean_stale (what 'kvsim run --out' does first).
    parked.mkdir()
    write_marker(parked, "parked-result")
    os.rename(out, parked / "result")
    notes = clean_stale(out)
    assert notes[0] == f"{out}: restored the previous result from {parked.name} (an interrupted run)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_result_folders_get_the_users_umask(tmp_path: Path) -> None:
    result = _small_result()
    old = os.umask(0o022)
    try:
        out = save_result(result, tmp_path / "a")
        assert out.stat().st_mode & 0o777 == 0o755
        assert {(out / n).stat().st_mode & 0o777 for n in RESULT_FILES} == {0o644}
        os.umask(0o077)
        out = save_result(result, tmp_path / "b")
        assert out.stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old)


def test_out_into_a_folder_that_is_not_a_result_is_refused_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("simulated although --out was refused")

    monkeypatch.setattr(kvsim, "run", no_run)
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "file").write_text("")
    scenario = tmp_path / "a.yaml"
    scenario.write_text("seed: 1\n")
    start = time.process_time()
    assert main(["run", str(scenario), "--out", str(tmp_path)]) == 2
    assert "holds files other than a kvsim result" in capsys.readouterr().err
    assert main(["run", str(scenario), "--out", str(tmp_path / "file" / "sub")]) == 2
    assert "file is not a folder" in capsys.readouterr().err
    assert time.process_time() - start < REFUSE_WITHIN_S
    assert (tmp_path / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--json", "--set", "workload.num_requests=20"],
        ["run", "--set", "workload.num_requests=20"],
        ["schema"],
    ],
    ids=["run_json", "run_table", "schema"],
)
def test_a_closed_stdout_ends_quietly(args: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvsim", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before anything is printed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0 and err == ""


def test_docs_list_every_limit() -> None:
    import kvsim.limits

    doc = (Path(__file__).resolve().parents[1] / "docs" / "limits.md").read_text()
    names = [n for n in vars(kvsim.limits) if n.isupper() and not n.startswith("_")]
    assert names and [n for n in names if f"`{n}`" not in doc] == []


def test_kvsim_errors_are_kvsim_errors() -> None:
    assert issubclass(TraceError, KvsimError) and issubclass(SweepError, KvsimError)


# --------------------------------------------------------------------------- issue 19, second round


# ids by type, not repr: an object's repr holds its address, which differs between the
# pytest-xdist workers and fails collection.
@pytest.mark.parametrize(
    "source", [123, [1, 2, 3], b"seed: 1", 1.5, object()], ids=["int", "list", "bytes", "float", "object"]
)
def test_run_and_load_scenario_refuse_what_is_not_a_scenario(source: Any) -> None:
    for call in (kvsim.run, kvsim.load_scenario):
        with pytest.raises(ScenarioError) as info:
            call(source)
        assert "a scenario is a path, a mapping, a Scenario or None" in str(info.value)


def _no_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """No home folder can be found: HOME unset and the user not in the password database."""
    import pwd

    def no_entry(*args: Any) -> Any:
        raise KeyError("no such user")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(pwd, "getpwnam", no_entry)


@pytest.mark.parametrize("profile", ["~/p.json", "~kvsim_no_such_user/p.json"])
def test_a_tilde_that_cannot_expand_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, profile: str
) -> None:
    _no_home(monkeypatch)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f'replicas: [{{cost_model: {{kind: profile, profile: "{profile}"}}}}]\n')
    points = tmp_path / "m.csv"
    points.write_text("tp,phase,batch_size,prompt_tokens,context_tokens\n1,prefill,1,128,0\n")
    for argv in (
        ["run", str(scenario)],
        ["validate", str(scenario)],
        [
            "predict",
            "--cost-model",
            profile,
            "--model",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--points",
            str(points),
        ],
        ["calibrate", "--compare", profile],
    ):
        try:
            code = main(argv)
        except SystemExit as exc:  # refused by argparse: path options expand ~ themselves
            code = int(exc.code or 0)
        assert code == 2, argv
        err = capsys.readouterr().err
        assert "cannot expand" in err and profile.split("/")[0] in err and "Traceback" not in err, err
    with pytest.raises(ScenarioError, match="cannot expand"):
        kvsim.run(scenario)
    with pytest.raises(ScenarioError, match="cannot expand"):
        kvsim.load_scenario({"replicas": [{"cost_model": {"kind": "profile", "profile": profile}}]})
    trace = {"workload": {"kind": "trace", "format": "azure", "path": profile.replace(".json", ".csv")}}
    with pytest.raises(TraceError, match="cannot expand"):
        kvsim.run(trace)


LATIN1_CSV = "tp,phase,batch_size,prompt_tokens,context_tokens,time_s\n1,prefill,1,128,0,0.01 # caf\xe9\n"


def test_latin1_files_are_refused_with_the_line_and_byte_wherever_they_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    points = tmp_path / "m.csv"
    points.write_bytes(LATIN1_CSV.encode("latin-1"))
    (tmp_path / "t.csv").write_bytes(
        (AZURE_HEADER + AZURE_OK).encode() + "2023-11-16 18:15:47,5,\xe9\n".encode("latin-1")
    )
    (tmp_path / "s.yaml").write_text(
        "workload: {num_requests: 3, prompt_tokens: {kind: empirical, path: t.csv, field: prompt}}\n"
    )
    (tmp_path / "sweep.yaml").write_bytes("base: s.yaml\ndescription: caf\xe9\n".encode("latin-1"))
    cases = [
        (["predict", "--cost-model", "roofline", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--points", str(points)],
         "m.csv:2: not UTF-8 text: byte 0xe9"),
        (["calibrate", "--fit-measurements", str(points), "--model", "llama-3-8b", "--gpu", "h100-sxm", "--out",
          str(tmp_path / "fit.json")], "m.csv:2: not UTF-8 text: byte 0xe9"),
        (["validate", str(tmp_path / "s.yaml")], "t.csv, line 3: not UTF-8 text: byte 0xe9"),
        (["run", str(tmp_path / "s.yaml")], "t.csv, line 3: not UTF-8 text: byte 0xe9"),
        (["sweep", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "out")], "not UTF-8: byte 0xe9"),
        (["trace-stats", str(tmp_path / "t.csv")], "line 3: not UTF-8 text: byte 0xe9"),
    ]  # fmt: skip
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "fit.json").exists() and not (tmp_path / "out").exists()


def test_a_point_record_that_is_not_utf8_is_run_again(tmp_path: Path) -> None:
    from kvsim.planning.sweep import run_sweep

    (tmp_path / "base.yaml").write_text("workload: {num_requests: 3}\n")
    (tmp_path / "s.yaml").write_text("base: base.yaml\ngrid: {seed: [1]}\n")
    out = tmp_path / "out"
    assert run_sweep(tmp_path / "s.yaml", out).num_ok == 1
    (record,) = out.glob("points/*/point.json")
    record.write_bytes(b'{"status": "ok", "x": "\xe9"}')
    assert run_sweep(tmp_path / "s.yaml", out).num_ok == 1  # not skipped, not a traceback


@pytest.mark.parametrize("window", ["nan", "0", "-1", "inf", "-0", "x"])
def test_spikes_window_must_be_a_positive_number(capsys: pytest.CaptureFixture[str], window: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["spikes", "--window", window])
    assert info.value.code == 2
    assert "argument --window: must be" in capsys.readouterr().err


def test_capacity_refuses_an_slo_on_a_key_no_summary_has_before_running(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kvsim.planning.capacity

    def no_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("ran although the SLO names no summary key")

    monkeypatch.setattr(kvsim.planning.capacity, "run_points", no_run)
    for slo, hint in [
        ("evil_key=1", ""),
        ("ttft_p95_s=1", "did you mean"),
        ("scenario=1", ""),
        ("ttft_p99_s=1,x>=2", ""),
    ]:
        argv = ["capacity", "--knob", "replicas.0.count", "--range", "1:2", "--slo", slo, "--jobs", "1"]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "is not a numeric summary key" in err and hint in err, err
    kvsim.planning.capacity.check_slo_keys(
        kvsim.planning.capacity.parse_slo("tenant_a_ttft_p50_s=1,slo_attainment>=0.9")
    )


def test_validate_reads_the_files_the_run_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.csv").write_text(AZURE_HEADER + "2023-11-16 18:15:46.68,0,44\n")
    (tmp_path / "e.yaml").write_text(
        "workload: {num_requests: 3, output_tokens: {kind: empirical, path: empty.csv, field: output}}\n"
    )
    (tmp_path / "t.yaml").write_text("workload: {kind: trace, path: empty.csv, format: azure}\n")
    (tmp_path / "m.yaml").write_text(
        "workload: {kind: mixture, components: [{num_requests: 2}, "
        "{num_requests: 2, prompt_tokens: {kind: empirical, path: missing.csv, field: prompt}}]}\n"
    )
    for name, field in [
        ("e", "workload.output_tokens.path"),
        ("t", "workload.path"),
        ("m", "workload.components.1.prompt_tokens.path"),
    ]:
        assert main(["validate", str(tmp_path / f"{name}.yaml")]) == 2
        validate_err = capsys.readouterr().err
        assert f"  {field}: " in validate_err, validate_err
        assert main(["run", str(tmp_path / f"{name}.yaml")]) == 2  # what the run refuses too
        assert "Traceback" not in capsys.readouterr().err


def test_set_and_values_read_json_numbers_as_numbers(tmp_path: Path) -> None:
    from kvsim.planning.capacity import parse_values
    from kvsim.scenario.loading import parse_override

    assert parse_override("replicas.0.gpu.memory_bytes=192e9") == (
        ["replicas", "0", "gpu", "memory_bytes"],
        192e9,
    )
    assert parse_override("a=-1.5E-3")[1] == -1.5e-3 and parse_override("a=07")[1] == 7  # YAML as before
    assert parse_override("a=1e3x")[1] == "1e3x" and parse_override("a=[1e3]")[1] == ["1e3"]
    assert parse_values("80e9,192e9") == [80e9, 192e9]
    gpu = (
        "{name: g, memory_bytes: 80000000000, hbm_bandwidth_bytes_per_s: 3.0e+12, bf16_flops: 1.0e+15, "
        "fp16_flops: 1.0e+15, interconnect_bandwidth_bytes_per_s: 1.0e+11, pcie_bandwidth_bytes_per_s: 3.2e+10}"
    )
    scenario = kvsim.load_scenario(None, [f"replicas.0.gpu={gpu}", "replicas.0.gpu.memory_bytes=192e9"])
    assert scenario.replicas[0].gpu.memory_bytes == 192 * 10**9  # type: ignore[union-attr]


def test_trace_stats_columns_on_a_csv_needs_no_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.csv").write_text("t,in,out\n0,5,1\n1,6,2\n")
    (tmp_path / "t.jsonl").write_text('{"t": 0, "in": 5, "out": 1}\n')
    columns = '{"timestamp": "t", "prompt_tokens": "in", "output_tokens": "out"}'
    assert main(["trace-stats", str(tmp_path / "t.csv"), "--columns", columns, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "csv"
    assert main(["trace-stats", str(tmp_path / "t.jsonl"), "--columns", columns, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "jsonl"


def test_what_is_printed_never_carries_terminal_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    evil = "\x1b[2J\x1b]0;owned\x07\u202e"
    (tmp_path / "k.yaml").write_text(
        f'"{evil.encode("unicode_escape").decode()}x": 1\n'.replace("\\x1b", "\\e")
    )
    named = tmp_path / f"a{evil}.yaml"
    named.write_text("seed: -1\n")
    for argv in (
        ["validate", str(tmp_path / "k.yaml")],
        ["validate", str(named)],
        ["run", str(named)],
        ["run", "--set", f"{evil}=1"],
        ["kv-size", "--model", evil],
        ["trace-stats", str(named)],
    ):
        main(argv)
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text, (argv, text)
        assert "\\x1b" in text, (argv, text)
