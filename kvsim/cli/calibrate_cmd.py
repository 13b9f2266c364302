"""CLI commands about cost models: ``kvsim calibrate``, ``kvsim profiles``, ``kvsim predict``.

    kvsim calibrate --model M [--tp N] [--device cuda|cpu] [--quick] [--gpu G] --out PROFILE
        time the model's kernels with torch (calibration/ harness) and write a profile
    kvsim calibrate --tables DIR [--system NAME] [--device cuda|cpu] [--full-grid]
                    [--model M [--tp N]] [--only TABLE ...]
        time GEMMs, context and paged decode attention, all-reduces and MoE experts with torch
        and write them as aiconfigurator-core's kernel tables: DIR/<system>/<op>/torch/<version>/
        (read back with cost_model: {kind: kernels, backend: torch, tables: DIR})
    kvsim calibrate --fit-roofline PROFILE [--gpu G] [--out FIT]
        fit roofline efficiencies to a kernels profile (carry a GPU's character to other models)
    kvsim calibrate --fit-measurements CSV --model M --gpu G [--combine max|sum] --out FIT
        fit roofline parameters to end-to-end measurements of a serving engine (uniform
        prefill/decode batches, or whole steps of any composition: phase=step rows)
    kvsim calibrate --from-observed DIR [--cost-model roofline|kernels] [--combine max|sum] --out FIT
        fit the cost model's free terms to a live server observed by kvsim observe (its steps
        read from the tokens' arrival times), then simulate the observation with the fit and
        report the errors before and after (kvsim.observe.fit)
    kvsim calibrate --compare PROFILE [--gpu G] [--json]
        roofline vs calibrated vs measured over the profile's grid, with relative errors
    kvsim profiles [--json]
        list shipped profiles
    kvsim predict --cost-model PROFILE|roofline --model M --gpu G --points CSV [--json]
        predict the time of each point of a measurements CSV

torch is imported only by the harness, and only when ``kvsim calibrate`` measures.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from kvsim.cli.types import count, number, path_arg, text_arg
from kvsim.cost import compare, fit
from kvsim.cost.config import ProfileCostConfig, RooflineCostConfig
from kvsim.cost.factory import build_cost_model
from kvsim.cost.kernels import GPU_SYSTEMS
from kvsim.cost.profile import (
    PROFILE_FORMAT,
    Profile,
    load_profile,
    model_shape,
    shipped_profiles,
    write_profile,
)
from kvsim.cost.table_layout import TABLE_SCHEMAS, check_name, check_tables_out, write_tables
from kvsim.cost.tables import KERNEL_DATA_PACKAGE, package_tables_root, table_index
from kvsim.errors import KvsimError, ProfileError
from kvsim.limits import MAX_STEP_TIME_S
from kvsim.model.hf_config import load_hf_config, looks_like_hf_config
from kvsim.model.presets import (
    GPU_PRESETS,
    MODEL_PRESETS,
    UnknownPresetError,
    resolve_gpu,
    resolve_model,
    unknown_name_message,
)
from kvsim.model.specs import KV_DTYPE_BYTES, GpuSpec, ModelSpec
from kvsim.outputs import check_file_target
from kvsim.paths import is_file, path_problem
from kvsim.results.io import json_safe
from kvsim.yaml_safe import load_yaml_file

#: The tables ``--tables`` can measure (``--only``).
TABLE_NAMES = tuple(TABLE_SCHEMAS)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``calibrate``, ``profiles`` and ``predict`` to the parser."""
    p = sub.add_parser(
        "calibrate",
        help="Measure cost curves with torch, fit the roofline, or compare models",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--fit-roofline",
        metavar="PROFILE",
        type=path_arg,
        help="fit roofline efficiencies to a kernels profile",
    )
    mode.add_argument(
        "--fit-measurements",
        metavar="CSV",
        type=path_arg,
        help="fit roofline parameters to engine measurements",
    )
    mode.add_argument(
        "--compare", metavar="PROFILE", type=path_arg, help="compare roofline, calibrated and measured times"
    )
    mode.add_argument(
        "--from-observed",
        metavar="DIR",
        type=path_arg,
        help="fit the cost model's free terms to a server observed by kvsim observe (its result folder)",
    )
    p.add_argument(
        "--cost-model",
        choices=("roofline", "kernels"),
        default=None,
        help="--from-observed: the cost model whose free terms are fitted (default: the observation "
        "scenario's, roofline unless it is kernels)",
    )
    p.add_argument(
        "--plain",
        action="store_true",
        help="--from-observed: least squares without total matching (default: --robust 0.05 --match-total)",
    )
    p.add_argument(
        "--model", type=text_arg(), help="model preset name or a YAML/JSON file holding a ModelSpec"
    )
    p.add_argument("--gpu", type=text_arg(), help="GPU preset name or a YAML/JSON file holding a GpuSpec")
    p.add_argument(
        "--tp", type=count(1, 1024), default=1, help="tensor-parallel degree to measure (default 1)"
    )
    mode.add_argument(
        "--tables",
        metavar="DIR",
        type=path_arg,
        help="measure kernel tables in aiconfigurator-core's layout under DIR (see docs/cost-model.md)",
    )
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="device to measure on")
    p.add_argument("--quick", action="store_true", help="smaller grids (under 1 minute on an H100/H200)")
    p.add_argument(
        "--system",
        help="--tables: the system folder, aiconfigurator's name for this GPU (h100_sxm, h200_sxm, "
        "b200_sxm, ...); default: the device's name in lower case ('nvidia_h200'; 'cpu')",
    )
    p.add_argument(
        "--full-grid",
        action="store_true",
        help="--tables: aiconfigurator's full sweep (hours on one GPU) instead of the small default "
        "(minutes), a subset of it; with --model, only that model's shapes either way",
    )
    p.add_argument(
        "--only",
        action="append",
        choices=TABLE_NAMES,
        metavar="TABLE",
        help=f"--tables: measure only this table (repeatable): {', '.join(TABLE_NAMES)}",
    )
    p.add_argument(
        "--no-cuda-graphs",
        dest="cuda_graphs",
        action="store_false",
        help="time CUDA kernels eagerly instead of replaying CUDA graphs (includes host launch gaps)",
    )
    p.add_argument(
        "--per-iteration-overhead-s",
        type=number(0, MAX_STEP_TIME_S),
        default=RooflineCostConfig.model_fields["per_iteration_overhead_s"].default,
        help="CPU overhead per iteration recorded in a measured profile (kernels cannot measure it)",
    )
    p.add_argument(
        "--per-layer-overhead-s",
        type=number(0, MAX_STEP_TIME_S),
        default=None,
        help="--fit-*: hold the per-layer overhead at this value (it cannot be told apart from the "
        "per-iteration overhead for one model); default: the roofline default",
    )
    p.add_argument(
        "--combine",
        choices=("max", "sum"),
        default=None,
        help="--fit-*: how compute and memory times combine in the fitted roofline: max (they "
        "overlap, GPUs; the default) or sum (they do not, e.g. one CPU core)",
    )
    p.add_argument(
        "--robust",
        type=number(0, 1e3, low_open=True),
        default=None,
        metavar="SCALE",
        help="--fit-measurements: soft-L1 loss on log residuals with this scale (e.g. 0.05) instead "
        "of squares, so that a minority of disturbed steps (other work on a shared machine) does "
        "not bend the fit",
    )
    p.add_argument(
        "--match-total",
        action="store_true",
        help="--fit-measurements: then scale the fitted times by one factor so that their total "
        "equals the measured total (latencies are sums of steps: they need the mean step time)",
    )
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", *KV_DTYPE_BYTES],
        help="KV dtype for --compare / --fit-roofline (default auto)",
    )
    p.add_argument("--json", action="store_true", help="--compare: print JSON rows instead of a table")
    p.add_argument(
        "--out",
        type=path_arg,
        help="profile file to write; an existing file is replaced only if it is a profile kvsim wrote",
    )
    p.set_defaults(func=_calibrate)

    p = sub.add_parser(
        "profiles",
        help="List the cost profiles shipped with kvsim and the measured kernel tables (cost_model kind kernels)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.add_argument(
        "--kernels",
        action="store_true",
        help="list only the kernel tables: system, engine backend, the versions of each op and the "
        "kvsim GPU presets they serve",
    )
    p.set_defaults(func=_profiles)

    p = sub.add_parser("predict", help="Predict iteration times of measurement points with a cost model")
    p.add_argument("--cost-model", required=True, type=path_arg, help="'roofline' or a profile name/path")
    p.add_argument("--model", required=True, type=text_arg(), help="model preset name or ModelSpec file")
    p.add_argument("--gpu", required=True, type=text_arg(), help="GPU preset name or GpuSpec file")
    p.add_argument(
        "--points",
        required=True,
        type=path_arg,
        help=f"CSV with columns {','.join(fit.CSV_COLUMNS)} (time_s optional)",
    )
    p.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", *KV_DTYPE_BYTES],
        help="KV-cache dtype (default auto)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list (default: a table)")
    p.set_defaults(func=_predict)


def _load_spec(text: str, presets: dict[str, Any], cls: type, what: str) -> Any:
    path = Path(text) if path_problem(text) is None else Path("-")
    if path.suffix in (".yaml", ".yml", ".json") and is_file(path):
        data = load_yaml_file(path, what=cls.__name__)  # bounded; a YamlError names the line
        if not isinstance(data, dict):
            raise KvsimError(f"{path}: not a valid {cls.__name__}: expected a mapping")
        if cls is ModelSpec and looks_like_hf_config(data):
            return load_hf_config(path)  # a Hugging Face config.json
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise KvsimError(f"{path}: not a valid {cls.__name__}: {exc}") from None
    if text.strip().lower() in presets:
        return presets[text.strip().lower()]
    try:  # aliases: Hugging Face ids, aiconfigurator system names
        return resolve_model(text) if cls is ModelSpec else resolve_gpu(text)
    except UnknownPresetError:
        pass
    message = unknown_name_message(what, text, presets)
    raise KvsimError(f"{message}; or a YAML/JSON {cls.__name__} file")


def _model(text: str | None) -> ModelSpec:
    if not text:
        raise KvsimError("--model is required")
    return _load_spec(text, MODEL_PRESETS, ModelSpec, "model")  # type: ignore[no-any-return]


def _gpu(text: str | None, profile: Profile | None = None) -> GpuSpec:
    text = text or (profile.gpu if profile is not None else None)
    if not text:
        raise KvsimError("--gpu is required (the profile names no GPU)")
    return _load_spec(text, GPU_PRESETS, GpuSpec, "GPU")  # type: ignore[no-any-return]


def _measure_command(args: argparse.Namespace) -> str:
    """The ``kvsim calibrate`` command line that reproduces a measurement (recorded in the profile)."""
    parts = ["kvsim", "calibrate", "--model", args.model, "--tp", str(args.tp), "--device", args.device]
    parts += ["--quick"] if args.quick else []
    parts += ["--gpu", args.gpu] if args.gpu else []
    parts += [] if args.cuda_graphs else ["--no-cuda-graphs"]
    parts += ["--out", args.out]
    return shlex.join(parts)


def _fit_command(args: argparse.Namespace) -> str:
    """The ``kvsim calibrate --fit-*`` command line (recorded in the profile)."""
    source = (
        ["--fit-measurements", args.fit_measurements]
        if args.fit_measurements
        else ["--fit-roofline", args.fit_roofline]
    )
    parts = ["kvsim", "calibrate", *source]
    for flag, value in (("--model", args.model), ("--gpu", args.gpu), ("--out", args.out)):
        parts += [flag, value] if value else []
    if args.per_layer_overhead_s is not None:
        parts += ["--per-layer-overhead-s", repr(args.per_layer_overhead_s)]
    if args.combine is not None:
        parts += ["--combine", args.combine]
    if getattr(args, "robust", None) is not None:
        parts += ["--robust", repr(args.robust)]
    if getattr(args, "match_total", False):
        parts += ["--match-total"]
    return shlex.join(parts)


def _calibrate(args: argparse.Namespace) -> int:
    if args.from_observed:
        return _from_observed(args)
    if args.cost_model or args.plain:
        raise KvsimError("--cost-model and --plain apply to --from-observed")
    if args.fit_roofline:
        return _fit_roofline(args)
    if args.fit_measurements:
        return _fit_measurements(args)
    if args.compare:
        return _compare(args)
    if args.tables:
        return _measure_tables(args)
    return _measure(args)


def _measure(args: argparse.Namespace) -> int:
    if not args.out:
        raise KvsimError("--out is required: the profile file to write")
    check_file_target(args.out, "--out", PROFILE_FORMAT)  # before minutes of measuring
    model = _model(args.model)
    try:
        from calibration.harness import run_calibration  # imports torch: only when measuring
        from calibration.shapes import ModelShape
    except ImportError as exc:
        raise KvsimError(
            f"kvsim calibrate needs torch ({exc}); install it with `make calibrate-deps` (or "
            "pip install -e '.[calibration]' in the kvsim checkout)"
        ) from exc
    if model.is_mla or model.num_experts:
        raise KvsimError(f"calibration measures dense attention models; {model.name!r} is MLA or MoE")
    if model.weight_dtype not in ("fp16", "bf16"):
        raise KvsimError(f"calibration measures fp16/bf16 models; {model.name!r} is {model.weight_dtype}")
    shape = ModelShape(**model_shape(model))
    try:
        profile = run_calibration(
            shape,
            tp=args.tp,
            device=args.device,
            quick=args.quick,
            gpu=args.gpu,
            per_iteration_overhead_s=args.per_iteration_overhead_s,
            cuda_graphs=args.cuda_graphs,
            command=_measure_command(args),
        )
    except (RuntimeError, ValueError) as exc:
        raise KvsimError(f"calibration failed: {exc}") from exc
    path = write_profile(profile, args.out)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _kernel_table_rows() -> list[dict[str, Any]]:
    """One row per (system, backend) of the installed kernel tables."""
    root = package_tables_root()
    if root is None:
        return []
    index = table_index(root)
    presets: dict[str, list[str]] = {}
    for preset, system in GPU_SYSTEMS.items():
        presets.setdefault(system, []).append(preset)
    rows = []
    for system in index.systems():
        for backend in sorted({b for s_, _, b in index.entries if s_ == system} - {"nccl", "oneccl"}):
            versions = {op: index.versions(system, op, backend) for op in ("gemm", "attention", "comm")}
            if not versions["gemm"] or not versions["attention"]:
                continue
            rows.append(
                {
                    "system": system,
                    "backend": backend,
                    "gpu_presets": ",".join(presets.get(system, [])) or "-",
                    **{op: ",".join(v) or "-" for op, v in versions.items()},
                }
            )
    return rows


def _tables_command(args: argparse.Namespace, system: str) -> str:
    """The ``kvsim calibrate --tables`` command line (recorded in collection_meta.yaml)."""
    parts = ["kvsim", "calibrate", "--tables", args.tables, "--system", system, "--device", args.device]
    parts += ["--full-grid"] if args.full_grid else []
    parts += ["--model", args.model, "--tp", str(args.tp)] if args.model else []
    for table in args.only or []:
        parts += ["--only", table]
    parts += [] if args.cuda_graphs else ["--no-cuda-graphs"]
    return shlex.join(parts)


def _device_system(name: str) -> str:
    """A system folder name from a device name: 'NVIDIA H200' -> 'nvidia_h200'."""
    slug = "".join(c if c.isalnum() else "_" for c in name.strip().lower()).strip("_")
    return "_".join(part for part in slug.split("_") if part)[:100] or "device"


def _measure_tables(args: argparse.Namespace) -> int:
    """``kvsim calibrate --tables DIR``: measure with torch, write aiconfigurator-shaped tables."""
    if args.out:
        raise KvsimError("--out names a profile to write; --tables writes kernel tables: give one of them")
    if args.quick:
        raise KvsimError("--quick is for profiles; --tables measures a small grid unless --full-grid")
    if args.system is not None:
        check_name(args.system, "--system")
    model = _model(args.model) if args.model else None
    if model is not None and model.is_mla:
        raise KvsimError(
            f"--tables measures multi-head and grouped-query attention; {model.name!r} uses MLA "
            "(its attention is priced from the packaged mla tables)"
        )
    try:
        from calibration.harness import device_info  # imports torch: only when measuring
        from calibration.shapes import ModelShape
        from calibration.table_grids import for_model, grids_for
        from calibration.tables import measure_tables, torch_version
    except ImportError as exc:
        raise KvsimError(
            f"kvsim calibrate needs torch ({exc}); install it with `pip install kvsim[calibration]`"
        ) from exc
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise KvsimError("--device cuda: torch sees no CUDA device (use --device cpu for a small CPU run)")
    device = torch.device(args.device)
    system = args.system or ("cpu" if device.type == "cpu" else _device_system(device_info(device)["name"]))
    version = torch_version()
    tables = tuple(args.only or TABLE_NAMES)
    check_tables_out(args.tables, system, version, tables)  # refuse before measuring
    grids = grids_for(device.type, args.full_grid)
    if model is not None:
        shape_fields = model_shape(model)
        shape_fields["dtype"] = "bf16"  # the tables are bf16 (and fp8); shapes are what matter
        shape_fields["num_experts"] = model.num_experts or 0
        shape_fields["experts_per_token"] = (model.num_experts_per_token or 0) if model.num_experts else 0
        try:
            grids = for_model(grids, ModelShape(**shape_fields), args.tp)
        except ValueError as exc:
            raise KvsimError(f"--model {args.model} --tp {args.tp}: {exc}") from None
    try:
        measured, run_meta = measure_tables(
            grids, device=args.device, tables=tables, cuda_graphs=args.cuda_graphs
        )
    except (RuntimeError, ValueError) as exc:
        raise KvsimError(f"calibration failed: {exc}") from exc
    from kvsim import __version__

    run_meta = {
        "kvsim": __version__,
        **run_meta,
        "system": system,
        "command": _tables_command(args, system),
    }
    written = write_tables(
        args.tables,
        system=system,
        version=version,
        tables={name: table.rows for name, table in measured.items()},
        table_meta={name: table.meta() for name, table in measured.items()},
        run_meta=run_meta,
    )
    rows = []
    for name, table in measured.items():
        meta = table.meta()
        rows.append(
            {
                "table": name,
                "status": meta["status"],
                "rows": meta["rows"],
                "skipped": sum(entry["cases"] for entry in meta.get("skipped", [])),
                "kernel_source": ",".join(meta["kernel_source"]),
            }
        )
    _print_table(rows)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _profiles(args: argparse.Namespace) -> int:
    if args.kernels:
        kernel_rows = _kernel_table_rows()
        if args.json:
            print(json.dumps(kernel_rows, indent=1))
        elif kernel_rows:
            _print_table(kernel_rows)
        else:
            print("no kernel tables: install the kernels extra (pip install -e '.[kernels]')")
        return 0
    rows = []
    for path in shipped_profiles():
        try:
            p = load_profile(path)
        except ProfileError as exc:
            print(f"kvsim: warning: {exc}", file=sys.stderr)
            continue
        rows.append(
            {
                "name": p.name,
                "kind": p.kind,
                "model": p.model["name"],
                "gpu": p.gpu or p.data.get("device", {}).get("name", ""),
                "dtype": p.dtype,
                "kv_dtypes": ",".join(p.kv_dtypes) or "any",
                "tp": ",".join(str(t) for t in p.tps),
                "date": p.created[:10],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    _print_table(rows)
    kernel_rows = _kernel_table_rows()
    print()
    if kernel_rows:
        print(
            f"measured kernel tables (cost_model: {{kind: kernels}}; {KERNEL_DATA_PACKAGE} "
            f"{_installed_version()}; kvsim profiles --kernels lists them alone):"
        )
        _print_table(kernel_rows)
    else:
        print(
            "measured kernel tables: none (pip install -e '.[kernels]' installs NVIDIA's, aiconfigurator-core)"
        )
    return 0


def _installed_version() -> str:
    try:
        return importlib.metadata.version(KERNEL_DATA_PACKAGE.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def _print_table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("(none)")
        return
    cols = list(rows[0])
    cells = [[_fmt(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def _cost_config(text: str) -> RooflineCostConfig | ProfileCostConfig:
    if text == "roofline":
        return RooflineCostConfig()
    try:
        return ProfileCostConfig(profile=text)
    except ValidationError as err:
        rule = "; ".join(e["msg"] for e in err.errors())
        raise KvsimError(f"--cost-model: {rule}") from None


def _predict(args: argparse.Namespace) -> int:
    model, gpu = _model(args.model), _gpu(args.gpu)
    points = fit.read_points(args.points)
    cfg = _cost_config(args.cost_model)
    models: dict[int, Any] = {}
    rows = []
    for p in points:
        if p.tp not in models:
            models[p.tp] = build_cost_model(
                cfg, model=model, gpu=gpu, tp=p.tp, kv_cache_dtype=args.kv_cache_dtype
            )
        predicted = fit.point_time_s(models[p.tp], p)
        row: dict[str, Any] = p.as_dict()
        row["predicted_time_s"] = predicted
        if p.time_s is not None:
            row["relative_error"] = (predicted - p.time_s) / p.time_s
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        _print_table(rows)
    return 0


def _fit_measurements(args: argparse.Namespace) -> int:
    if not args.out:
        raise KvsimError("--out is required: the roofline-fit profile to write")
    check_file_target(args.out, "--out", PROFILE_FORMAT)  # before reading and fitting
    model, gpu = _model(args.model), _gpu(args.gpu)
    points = fit.read_points(args.fit_measurements)
    result = fit.fit_roofline(
        points,
        model=model,
        gpu=gpu,
        per_layer_overhead_s=args.per_layer_overhead_s,
        combine=args.combine,
        robust_scale=args.robust,
        match_total=args.match_total,
    )
    data = fit.roofline_fit_profile(result, model=model, gpu=gpu, points=points, command=_fit_command(args))
    write_profile(data, args.out)
    _print_fit(result)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _fit_roofline(args: argparse.Namespace) -> int:
    if args.out:
        check_file_target(args.out, "--out", PROFILE_FORMAT)  # before reading and fitting
    profile = load_profile(args.fit_roofline)
    if profile.kind != "kernels":
        raise ProfileError(f"{profile.source}: --fit-roofline needs a kernels profile, not {profile.kind!r}")
    model, gpu = _model(args.model or profile.model["name"]), _gpu(args.gpu, profile)
    calibrated = build_cost_model(
        ProfileCostConfig(profile=profile.source),
        model=model,
        gpu=gpu,
        tp=profile.tps[0],
        kv_cache_dtype=args.kv_cache_dtype,
    )
    points = fit.profile_grid_points(profile, calibrated)
    result = fit.fit_roofline(
        points,
        model=model,
        gpu=gpu,
        per_layer_overhead_s=args.per_layer_overhead_s,
        kv_cache_dtype=args.kv_cache_dtype,
        combine=args.combine,
    )
    _print_fit(result)
    if args.out:
        data = fit.roofline_fit_profile(
            result, model=model, gpu=gpu, points=points, command=_fit_command(args)
        )
        write_profile(data, args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _from_observed_command(args: argparse.Namespace) -> str:
    parts = ["kvsim", "calibrate", "--from-observed", args.from_observed]
    for flag, value in (("--cost-model", args.cost_model), ("--combine", args.combine), ("--out", args.out)):
        parts += [flag, value] if value else []
    if args.per_layer_overhead_s is not None:
        parts += ["--per-layer-overhead-s", repr(args.per_layer_overhead_s)]
    if args.robust is not None:
        parts += ["--robust", repr(args.robust)]
    parts += ["--match-total"] if args.match_total else []
    parts += ["--plain"] if args.plain else []
    return shlex.join(parts)


def _from_observed(args: argparse.Namespace) -> int:
    """``kvsim calibrate --from-observed DIR``: fit to an observation, report the residuals."""
    from kvsim.observe.fit import fit_observed, fit_profile, warnings_of
    from kvsim.observe.record import is_observation
    from kvsim.results.io import load_result

    if not args.out:
        raise KvsimError("--out is required: the profile to write (roofline-fit or kernels-fit)")
    check_file_target(args.out, "--out", PROFILE_FORMAT)  # before reading and fitting
    if args.plain and (args.robust is not None or args.match_total):
        raise KvsimError("--plain excludes --robust and --match-total")
    observed = load_result(args.from_observed)
    if not is_observation(observed.summary):
        print(
            f"kvsim: warning: {args.from_observed}: not an observation (no 'observed' in its summary)",
            file=sys.stderr,
        )
    robust = None if args.plain else (args.robust if args.robust is not None else 0.05)
    result = fit_observed(
        observed,
        kind=args.cost_model,
        combine=args.combine,
        per_layer_overhead_s=args.per_layer_overhead_s,
        robust_scale=robust,
        match_total=not args.plain,
        base_dir=Path(args.from_observed).resolve(),
    )
    data = fit_profile(result, command=_from_observed_command(args), source=str(args.from_observed))
    write_profile(data, args.out)
    if args.json:
        print(
            json.dumps(
                json_safe({"kind": data["kind"], result.kind: data[result.kind], "fit": data["fit"]}),
                indent=1,
            )
        )
    else:
        _print_observed_fit(result)
    for warning in warnings_of(result):
        print(f"kvsim: warning: {warning}", file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _print_observed_fit(result: Any) -> None:
    from kvsim.observe.compare import METRICS

    print(f"fitted {result.kind} terms (4 significant digits; the profile keeps full precision):")
    params = {
        k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in result.config.model_dump().items()
    }
    print(yaml.safe_dump(params, sort_keys=False).rstrip())
    print(
        f"server steps read from the tokens: {result.num_points}; median |relative error| of the fitted "
        f"step times: {_fmt(result.step_error)}"
    )
    print()
    print("the observation simulated again (errors: simulated / observed - 1; shares in points):")
    before = result.before.metrics.set_index("metric")
    after = result.after.metrics.set_index("metric")
    rows = []
    for key, label, kind, target in METRICS:
        judged = "" if target is None else (f"±{target:g} pt" if kind == "points" else f"±{100 * target:g}%")
        rows.append(
            {
                "metric": label,
                "before": _error_text(float(before.at[key, "error"]), kind),
                "fitted": _error_text(float(after.at[key, "error"]), kind),
                "target": judged,
            }
        )
    _print_table(rows)
    for name, cmp in (("before", result.before), ("fitted", result.after)):
        series = cmp.series_errors.get("kv_usage_mean_abs_diff", float("nan"))
        print(f"{name}: KV-usage series mean |difference| {_fmt(series)} points")


def _error_text(error: float, kind: str) -> str:
    if error != error:
        return "-"
    return f"{error:+.1f} pt" if kind == "points" else f"{100 * error:+.1f}%"


def _print_fit(result: fit.FitResult) -> None:
    print("fitted roofline parameters (4 significant digits; the profile keeps full precision):")
    params = {
        k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in result.config.model_dump().items()
    }
    print(yaml.safe_dump(params, sort_keys=False).rstrip())
    print(
        f"points: {result.num_points}; median |relative error|: prefill "
        f"{_fmt(result.median_abs_rel_error_prefill)}, decode {_fmt(result.median_abs_rel_error_decode)}"
    )


def _compare(args: argparse.Namespace) -> int:
    profile = load_profile(args.compare)
    model = _model(args.model or profile.model["name"])
    gpu = _gpu(args.gpu, profile)
    rows = compare.compare_rows(profile, model=model, gpu=gpu, kv_cache_dtype=args.kv_cache_dtype)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        _print_table(rows)
        print(compare.compare_summary(rows))
    return 0
