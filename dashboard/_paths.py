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
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

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


def _profile_is_path(value: str) -> bool:
    return "/" in value or os.sep in value or value.endswith(".json")


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
            if isinstance(profile, str) and _profile_is_path(profile):
                raw = profile
                anchored = raw if Path(raw).is_absolute() else str(base_dir / raw)
                try:
                    group = {**group, "cost_model": {**cost, "profile": str(confine(anchored))}}
                except PathNotAllowed:
                    problems.append((f"replicas.{i}.cost_model.profile", f"{raw}: {REFUSED}"))
            fixed.append(group)
        data["replicas"] = fixed
    return data, problems
