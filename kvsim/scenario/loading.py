"""Reading, overriding, validating and writing scenario files.

    load_scenario("scenarios/default.yaml", ["replicas.0.tp=2", "seed=3"])

Every failure raises `ScenarioError` naming the source, the dotted field path and the
rule broken. YAML is read with the safe loader only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvsim.backends.defaults import DEFAULTED_KNOBS
from kvsim.errors import ScenarioError, YamlError
from kvsim.limits import MAX_YAML_INT_DIGITS
from kvsim.model.hf_config import resolve_model_paths
from kvsim.paths import path_problem, printable
from kvsim.scenario.checks import check_scenario
from kvsim.scenario.schema import Scenario
from kvsim.workload import resolve_workload_paths
from kvsim.yaml_safe import decode_utf8, load_yaml_text, read_capped

DEFAULT_SCENARIO = "default.yaml"


#: Location parts pydantic adds for the members of an untagged union (``str | ModelSpec``):
#: "constrained-str", "function-after[_check(), ModelSpec]", "GpuSpec". Field names are
#: lowercase; tagged unions' tags ("synthetic") are kept, they tell which variant was read.
_UNION_MEMBER = re.compile(r"^(function-[a-z]+\[.*\]|constrained-str|str|[A-Z][A-Za-z0-9]*)$")


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc if not (isinstance(p, str) and _UNION_MEMBER.match(p)))


def _validation_problems(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors(include_url=False):
        loc = e["loc"]
        if (
            e["type"] == "string_type"
            and isinstance(e.get("input"), Mapping)
            and loc
            and _UNION_MEMBER.match(str(loc[-1]))
        ):
            continue  # an inline spec was given: "should be a string (a preset name)" is noise
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field (not allowed here)"
        problems.append((_loc_to_path(loc), msg))
    return problems


#: A number as JSON writes it. YAML 1.1 reads ``192e9`` (no dot, no exponent sign) as a
#: string; JSON, and so ``--gpu '{"memory_bytes": 192e9}'``, reads it as a number.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def parse_value(raw: str, source: str, *, what: str = "override") -> Any:
    """A command-line value: a JSON number as JSON reads it (``192e9``, ``-1.5E-3``), anything
    else as YAML (``true``, ``[1, 2]``, ``{kind: fixed, tokens: 8}``) with the bounded loader."""
    text = raw.strip()
    if len(text) <= MAX_YAML_INT_DIGITS and _JSON_NUMBER.fullmatch(text):
        return json.loads(text)
    return load_yaml_text(raw, source, what=what)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``a.b.0.c=value`` into a key path and a YAML-parsed value."""
    if "=" not in text:
        raise ScenarioError("--set", [(text, "override must look like dotted.key=value")])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not p for p in key.split(".")):
        raise ScenarioError("--set", [(key, "empty key in dotted path")])
    try:
        value = parse_value(raw, f"--set {key}", what="override") if raw.strip() else ""
    except YamlError as exc:
        rule = "; ".join(r for _, r in exc.problems)
        raise ScenarioError("--set", [(key, f"value is not valid YAML: {rule}")]) from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str] | Mapping[str, Any]) -> dict[str, Any]:
    """Return a deep copy of ``data`` with dotted-path overrides applied.

    Integer path parts index lists (``replicas.0.tp``). Missing mapping keys are created;
    the schema then decides whether they are allowed.
    """
    data = json.loads(json.dumps(data))  # deep copy of plain data
    items = overrides.items() if isinstance(overrides, Mapping) else [parse_override(o) for o in overrides]
    for key, value in items:
        parts = key.split(".") if isinstance(key, str) else list(key)
        node: Any = data
        for i, part in enumerate(parts[:-1]):
            where = ".".join(parts[: i + 1])
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ScenarioError("--set", [(where, f"no list item {part!r} (list has {len(node)})")])
                node = node[int(part)]
            elif isinstance(node, dict):
                node = node.setdefault(part, {})
            else:
                raise ScenarioError("--set", [(where, "cannot descend into a scalar")])
        last = parts[-1]
        if isinstance(node, list):
            if not last.isdigit() or int(last) >= len(node):
                raise ScenarioError("--set", [(".".join(parts), f"no list item {last!r}")])
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ScenarioError("--set", [(".".join(parts), "cannot set a field inside a scalar")])
    return data


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with the bounded safe loader; errors name the file and line.

    Bounded reading: a size cap, UTF-8 checked with the offset of a bad byte, and
    `kvsim.yaml_safe`'s limits on depth, aliases, scalars, integers and duplicate keys.
    """
    return parse_yaml(decode_utf8(read_capped(path, str(path)), str(path)), str(path))


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    """A YAML mapping from text (``source`` names it in errors), with the bounded loader."""
    data = load_yaml_text(text, source)
    if data is None:  # an empty file, only comments, or `null`: not the default scenario in disguise
        content = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        what = "null" if content else "only comments" if text.strip() else "an empty document"
        raise ScenarioError(
            source,
            [("", f"a scenario must be a YAML mapping, got {what} (write {{}} for all the defaults)")],
        )
    if not isinstance(data, dict):
        raise ScenarioError(source, [("", f"a scenario must be a YAML mapping, got {type(data).__name__}")])
    return data


def validate(data: Mapping[str, Any], source: str = "<scenario>", base_dir: Path | None = None) -> Scenario:
    """Validate plain data into a `Scenario`, or raise `ScenarioError`.

    ``base_dir`` resolves relative cost-profile paths (the scenario file's folder).
    """
    try:
        scenario = Scenario.model_validate(dict(data))
    except ValidationError as err:
        raise ScenarioError(source, _validation_problems(err)) from None
    problems = check_scenario(scenario, base_dir)
    if problems:
        raise ScenarioError(source, problems)
    return scenario


def load_scenario(
    source: str | Path | Mapping[str, Any] | Scenario | None = None,
    overrides: Iterable[str] | Mapping[str, Any] = (),
    *,
    base_dir: Path | None = None,
) -> Scenario:
    """Load a scenario from a YAML path, a mapping or a `Scenario`, then apply overrides.

    ``None`` loads the embedded default scenario. ``base_dir`` resolves relative cost-profile
    paths of a mapping or `Scenario` source (a file's own folder is used for a file).
    """
    if not isinstance(source, Scenario | Mapping | str | os.PathLike | type(None)):
        raise ScenarioError(
            f"<{type(source).__name__}>",
            [("", f"a scenario is a path, a mapping, a Scenario or None, not {type(source).__name__}")],
        )
    if isinstance(source, Scenario):
        data, name = scenario_data(source), f"<scenario {source.name}>"
    elif source is None:
        text = resources.files("kvsim.data").joinpath(DEFAULT_SCENARIO).read_text(encoding="utf-8")
        data, name = parse_yaml(text, f"<embedded {DEFAULT_SCENARIO}>"), f"<embedded {DEFAULT_SCENARIO}>"
    elif isinstance(source, Mapping):
        data, name = dict(source), "<dict>"
    else:
        # Trace paths in a file are relative to the file: make them absolute, so that the
        # resolved scenario saved beside a result reloads from anywhere.
        path = _scenario_path(source)
        base_dir = path.resolve().parent
        data, name = resolve_file_paths(read_yaml(path), base_dir), printable(str(source))
    if overrides:
        # Apply overrides to the fully resolved scenario, so that paths into defaults the
        # file left out (``replicas.0.tp`` in a file without ``replicas``) exist.
        data = apply_overrides(scenario_data(validate(data, name, base_dir)), overrides)
    return validate(data, name, base_dir)


def resolve_file_paths(data: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """Scenario data read from a file in ``base_dir`` with its relative paths made absolute:
    trace and length files (`resolve_workload_paths`) and hf_config files (`resolve_model_paths`)."""
    return resolve_model_paths(resolve_workload_paths(data, base_dir), base_dir)


def scenario_data(scenario: Scenario) -> dict[str, Any]:
    """A validated scenario as plain data to apply overrides to and validate again.

    Every field is written out, except the engine knobs that took their backend's default
    (`kvsim.backends.defaults`): validating again derives them anew, so an override of the backend,
    its version, the GPU or the TP degree changes them, while a knob the scenario set stays.
    """
    data: dict[str, Any] = scenario.model_dump(mode="json")
    for group, raw in zip(scenario.replicas, data["replicas"], strict=True):
        for knob in DEFAULTED_KNOBS:
            if knob not in group.engine.model_fields_set:
                raw["engine"].pop(knob, None)
    return data


def _scenario_path(source: str | os.PathLike[str]) -> Path:
    """A scenario file's path, or a `ScenarioError` naming it when no file can have it."""
    text = os.fspath(source)
    if not isinstance(text, str):  # a bytes path
        raise ScenarioError(f"<{type(source).__name__}>", [("", "a scenario path must be text")])
    problem = path_problem(text)
    if problem is not None:
        shown = printable(text if len(text) <= 200 else text[:197] + "...")
        raise ScenarioError(shown, [("", f"cannot read file: {problem}")])
    return Path(text)


def dump_scenario(scenario: Scenario) -> str:
    """The fully resolved scenario as YAML (every default written out, the backend's included)."""
    text: str = yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    return text


def scenario_json_schema() -> dict[str, Any]:
    """JSON Schema of scenario files (descriptions included)."""
    return Scenario.model_json_schema()
