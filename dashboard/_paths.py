"""Which files the dashboard may read: the allowed folders, and scenario paths confined to them.

The dashboard serves whoever can reach it, so every path that comes from the page (a trace
or length file in a scenario, a cost profile given as a path, a result or sweep folder) is
confined to:

- the project's ``scenarios/`` folder and the shared traces, ``../shared/traces``;
- the upload area (`upload_root`: ``$KVSIM_DASHBOARD_UPLOADS``, default a folder in the
  system's temporary directory), where uploaded result archives are unpacked;
- folders listed at start-up: ``streamlit run dashboard/app.py -- --allow DIR [--allow DIR]``
  or ``KVSIM_DASHBOARD_ALLOW=DIR1:DIR2`` (relative folders are relative to the repository).

A relative path is relative to the repository; ``~`` is never expanded (``~/x`` is a folder
named ``~``); symbolic links and ``..`` are resolved before the check, so a link inside an
allowed folder that points outside it is refused. A refused path gets the same message
whether or not it exists, and no message ever quotes a file's content.

Scenarios are checked twice, with one rule: `confine_scenario_paths` on the plain data as
typed (so that a refused path is named even in a scenario that is invalid otherwise), then
`confine_path_fields` on the schema-validated scenario, which finds every field kvsim opens
a file by (`path_fields`), whatever shape the value came in (a ``!!binary`` string, a
mapping without its ``kind``), before anything reads a file. Result and sweep folders are
confined with the files kvsim reads in them (`confine_files`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kvsim.cost.config import ProfileCostConfig
from kvsim.workload.config import EmpiricalLength, TraceWorkload

REPO_ROOT = Path(__file__).resolve().parents[1]
SCENARIO_DIR = REPO_ROOT / "scenarios"
TRACES_DIR = REPO_ROOT.parent / "shared" / "traces"
ALLOW_ENV = "KVSIM_DASHBOARD_ALLOW"
UPLOADS_ENV = "KVSIM_DASHBOARD_UPLOADS"

REFUSED = (
    "not in an allowed folder (scenarios/, ../shared/traces, the upload area, or a folder given "
    "at start-up with --allow or KVSIM_DASHBOARD_ALLOW)"
)


class PathNotAllowed(ValueError):
    """A path outside the allowed folders (the message never says whether it exists)."""


def upload_root() -> Path:
    """The upload area (created on first use, readable by the owner only)."""
    root = Path(os.environ.get(UPLOADS_ENV) or Path(tempfile.gettempdir()) / "kvsim-dashboard-uploads")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def _anchored(text: str | os.PathLike[str]) -> Path:
    """A path as typed: relative to the repository, ``~`` left as it is."""
    p = Path(os.fspath(text))
    return p if p.is_absolute() else REPO_ROOT / p


def startup_folders(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> list[Path]:
    """Folders listed at start-up: ``--allow DIR`` script arguments and ``$KVSIM_DASHBOARD_ALLOW``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--allow", action="append", default=[])
    args, _ = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    env = os.environ if environ is None else environ
    listed = [*args.allow, *(p for p in env.get(ALLOW_ENV, "").split(os.pathsep) if p.strip())]
    return [_anchored(p) for p in listed]


def allowed_roots(extra: Iterable[Path] = ()) -> list[Path]:
    """Every allowed folder, symbolic links resolved."""
    roots = [SCENARIO_DIR, TRACES_DIR, upload_root(), *startup_folders(), *extra]
    return list(dict.fromkeys(Path(os.path.realpath(r)) for r in roots))


def confine(text: str | os.PathLike[str], *, extra: Iterable[Path] = ()) -> Path:
    """The real path of ``text`` if it lies in an allowed folder; `PathNotAllowed` otherwise."""
    raw = os.fspath(text)
    if not raw.strip() or "\x00" in raw:
        raise PathNotAllowed(f"{raw!r}: {REFUSED}")
    real = Path(os.path.realpath(_anchored(raw)))
    for root in allowed_roots(extra):
        if real == root or real.is_relative_to(root):
            return real
    raise PathNotAllowed(f"{raw}: {REFUSED}")


def confine_files(folder: str | os.PathLike[str], names: Iterable[str]) -> Path:
    """The real path of ``folder`` (see `confine`), when it and each file ``names`` in it that exists
    lie in an allowed folder: a link in an allowed folder that leads out of it is refused too."""
    real = confine(folder)
    for name in names:
        if os.path.lexists(real / name):
            try:
                confine(real / name)
            except PathNotAllowed:
                raise PathNotAllowed(f"{os.fspath(folder)}: {REFUSED}") from None
    return real


def profile_is_path(value: str) -> bool:
    """Whether kvsim reads a cost-profile reference as a file path rather than a shipped profile's
    name: the rule of `kvsim.cost.profile.resolve_profile_path` (a ``/`` or ``\\``, or ``.json``)."""
    return "/" in value or "\\" in value or value.endswith(".json")


def path_fields(scenario: BaseModel) -> list[tuple[str, str]]:
    """``(dotted field path, value)`` of every file a schema-valid scenario names.

    The fields kvsim opens a file by: ``path`` of a trace workload and of an empirical
    length distribution, wherever they sit (a mixture's parts included), and
    ``cost_model.profile`` of a replica group when it is a path (`profile_is_path`).
    """
    found: list[tuple[str, str]] = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, TraceWorkload | EmpiricalLength):
            found.append((f"{where}.path", node.path))
        elif isinstance(node, ProfileCostConfig) and profile_is_path(node.profile):
            found.append((f"{where}.profile", node.profile))
        if isinstance(node, BaseModel):
            for name in type(node).model_fields:
                walk(getattr(node, name), f"{where}.{name}" if where else name)
        elif isinstance(node, list | tuple):
            for i, item in enumerate(node):
                walk(item, f"{where}.{i}")
        elif isinstance(node, dict):
            for key, item in node.items():
                walk(item, f"{where}.{key}")

    walk(scenario, "")
    return found


def confine_path_fields(
    scenario: BaseModel, *, base_dir: Path = REPO_ROOT
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Every file a schema-valid scenario names (`path_fields`) checked against the allowed folders.

    Returns ``(fixes, problems)``: ``fixes`` maps a field path to the file's real path where
    it was written otherwise (relative to ``base_dir``, through a link or ``..``), as
    overrides for `kvsim.scenario.loading.apply_overrides`; ``problems`` lists
    ``(field path, rule)`` for each refused path, the same whether the file exists or not.
    """
    fixes: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for where, raw in path_fields(scenario):
        anchored = raw if Path(raw).is_absolute() else str(base_dir / raw)
        try:
            real = str(confine(anchored))
        except PathNotAllowed:
            problems.append((where, f"{raw}: {REFUSED}"))
            continue
        if real != raw:
            fixes[where] = real
    return fixes, problems


def confine_scenario_paths(
    data: dict[str, Any], *, base_dir: Path = REPO_ROOT
) -> tuple[dict[str, Any], list]:
    """Scenario data with every file path made absolute and checked; returns (data, problems).

    Paths: ``path`` of a trace workload or of an empirical length distribution anywhere in
    the workload (relative ones against ``base_dir``, the scenario file's folder, or the
    repository for pasted or uploaded YAML), ``cost_model.profile`` of a replica group
    when it is a path rather than a shipped profile's name, and the ``hf_config`` of the
    model or of a speculative draft model. ``problems`` lists
    ``(field path, rule)`` for each refused path, as `kvsim.ScenarioError` wants them.
    """
    problems: list[tuple[str, str]] = []

    def fix(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            out = {k: fix(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
            if out.get("kind") in ("trace", "empirical") and isinstance(out.get("path"), str):
                raw = out["path"]
                anchored = raw if Path(raw).is_absolute() else str(base_dir / raw)
                try:
                    out["path"] = str(confine(anchored))
                except PathNotAllowed:
                    problems.append((f"{where}.path", f"{raw}: {REFUSED}"))
            return out
        if isinstance(node, list):
            return [fix(v, f"{where}.{i}") for i, v in enumerate(node)]
        return node

    data = dict(data)
    if "workload" in data:
        data["workload"] = fix(data["workload"], "workload")

    def fix_model(ref: Any, where: str) -> Any:
        if isinstance(ref, dict) and isinstance(ref.get("hf_config"), str):
            raw = ref["hf_config"]
            anchored = raw if Path(raw).is_absolute() else str(base_dir / raw)
            try:
                return {**ref, "hf_config": str(confine(anchored))}
            except PathNotAllowed:
                problems.append((f"{where}.hf_config", f"{raw}: {REFUSED}"))
        return ref

    if "model" in data:
        data["model"] = fix_model(data["model"], "model")
    groups = data.get("replicas")
    if isinstance(groups, list):
        fixed = []
        for i, group in enumerate(groups):
            engine = group.get("engine") if isinstance(group, dict) else None
            spec = engine.get("speculative_config") if isinstance(engine, dict) else None
            if isinstance(spec, dict) and "model" in spec:
                draft = fix_model(spec["model"], f"replicas.{i}.engine.speculative_config.model")
                group = {**group, "engine": {**engine, "speculative_config": {**spec, "model": draft}}}
            cost = group.get("cost_model") if isinstance(group, dict) else None
            profile = cost.get("profile") if isinstance(cost, dict) else None
            if isinstance(profile, str) and profile_is_path(profile):
                raw = profile
                anchored = raw if Path(raw).is_absolute() else str(base_dir / raw)
                try:
                    group = {**group, "cost_model": {**cost, "profile": str(confine(anchored))}}
                except PathNotAllowed:
                    problems.append((f"replicas.{i}.cost_model.profile", f"{raw}: {REFUSED}"))
            fixed.append(group)
        data["replicas"] = fixed
    return data, problems
