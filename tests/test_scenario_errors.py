"""Bad input: every error names the source, the field path and the rule."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.errors import ScenarioError


def problems(source, overrides=()) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as exc:
        kvsim.load_scenario(source, overrides)
    return exc.value.problems


def test_unknown_key_is_named_with_its_path():
    assert problems({"replicas": [{"engine": {"max_num_seq": 4}}]}) == [
        ("replicas.0.engine.max_num_seq", "unknown field (not allowed here)")
    ]


def test_out_of_range_value_names_the_rule():
    ((path, rule),) = problems({"replicas": [{"engine": {"block_size": 0}}]})
    assert path == "replicas.0.engine.block_size" and "greater than or equal to 1" in rule


def test_unknown_preset_names_the_field():
    ((path, rule),) = problems({"replicas": [{"gpu": "h1000"}]})
    assert path == "replicas.0.gpu" and "h1000" in rule


def test_file_errors_name_the_file_and_line(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("seed: 1\nreplicas: [\n")
    with pytest.raises(ScenarioError) as exc:
        kvsim.load_scenario(f)
    assert str(f) in str(exc.value) and "line" in exc.value.problems[0][0]


def test_override_errors_name_the_override():
    assert problems(None, ["seed"])[0] == ("seed", "override must look like dotted.key=value")
    ((path, _),) = problems(None, ["replicas.5.tp=2"])
    assert path == "replicas.5"
    ((path, _),) = problems(None, ["sim.fast_forward=maybe"])
    assert path == "sim.fast_forward"


def test_override_reaches_into_defaults_the_file_left_out():
    s = kvsim.load_scenario({"seed": 3}, ["replicas.0.tp=2", "workload.num_requests=5"])
    assert s.replicas[0].tp == 2 and s.workload.num_requests == 5 and s.seed == 3


def test_duplicate_replica_group_names_are_rejected():
    ((path, rule),) = problems({"replicas": [{"name": "a"}, {"name": "a"}]})
    assert path == "" and "unique" in rule


def test_scenario_is_frozen():
    s = kvsim.load_scenario(None)
    with pytest.raises(Exception, match="frozen"):
        s.seed = 4  # type: ignore[misc]


def test_every_schema_field_has_a_description():
    from kvsim.scenario.loading import scenario_json_schema

    missing: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for name, prop in node.get("properties", {}).items():
                if "description" not in prop:
                    missing.append(f"{path}.{name}")
            for key, value in node.items():
                walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, path)

    walk(scenario_json_schema(), "")
    assert missing == []


def test_run_checks_a_scenario_built_in_code():
    from kvsim.scenario.schema import ReplicaGroup, Scenario

    bad = Scenario(replicas=[ReplicaGroup(gpu="no-such-gpu")])
    with pytest.raises(ScenarioError, match=r"replicas\.0\.gpu"):
        kvsim.run(bad)


def test_contiguous_reservation_needs_prefix_caching_off():
    ((path, rule),) = problems({"replicas": [{"engine": {"kv_allocation": "reserve_oracle"}}]})
    assert path == "replicas.0.engine" and "enable_prefix_caching: false" in rule


def test_replica_groups_must_agree_on_cache_isolation():
    ((path, rule),) = problems(
        {"replicas": [{"name": "a"}, {"name": "b", "engine": {"cache_isolation": "shared"}}]}
    )
    assert path == "" and "cache_isolation" in rule


def test_disaggregated_roles_need_both_sides():
    ((path, rule),) = problems({"replicas": [{"name": "p", "role": "prefill"}]})
    assert path == "" and "'prefill' and 'decode'" in rule
    ((path, rule),) = problems({"replicas": [{"name": "p", "role": "prefill"}, {"name": "b"}]})
    assert "either every group is 'both'" in rule


def test_disaggregation_limits_are_named():
    pd_ = [{"name": "p", "role": "prefill"}, {"name": "d", "role": "decode"}]
    kvsim.load_scenario({"model": "mistral-7b", "replicas": pd_})  # a sliding window crosses the link too
    reserve = {"engine": {"kv_allocation": "reserve_oracle", "enable_prefix_caching": False}}
    ((_, rule),) = problems({"replicas": [pd_[0] | reserve, pd_[1]]})
    assert "paged KV only" in rule


def test_inline_spec_errors_name_the_field_not_pydantic_union_members():
    model = {
        "name": "x", "num_layers": 0, "hidden_size": 8, "num_attention_heads": 1, "num_kv_heads": 1,
        "head_dim": 8, "intermediate_size": 8, "vocab_size": 8, "num_params": 10, "max_model_len": 10,
    }  # fmt: skip
    assert problems({"model": model}) == [("model.num_layers", "Input should be greater than 0")]


def test_override_values_go_through_the_bounded_loader():
    deep = "[" * 3000 + "]" * 3000
    ((path, rule),) = problems(None, [f"seed={deep}"])
    assert path == "seed" and "value is not valid YAML" in rule and "deep" in rule
    ((path, rule),) = problems(None, ["seed=&a [*a]"])
    assert path == "seed" and "value is not valid YAML" in rule
