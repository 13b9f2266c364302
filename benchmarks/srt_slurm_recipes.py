"""The SGLang engine flags of the srt-slurm recipes InferenceX's multi-node rows ran.

    python benchmarks/srt_slurm_recipes.py --repo PATH/TO/srt-slurm \\
        [--spec benchmarks/results/silicon_spec_decoding.csv.gz] \\
        [--out benchmarks/results/srt_slurm_sglang.csv.gz]

(needs a git clone of NVIDIA/srt-slurm with its history, PyYAML and git; the file it writes is
committed, so `benchmarks/silicon.py` needs neither.)

InferenceX's multi-node SGLang rows (Dynamo + SGLang, prefill and decode workers on separate
nodes) were launched by srt-slurm: each search space of InferenceX's configuration names its
recipe (``CONFIG_FILE=recipes/h200/8k1k/bs128-1p1d-dep.yaml``; inferencex_spec.py records them
per row, column ``recipes``), and the recipe's ``backend.sglang_config`` holds each side's
SGLang command line. Those flags decide what the workers can hold and batch: the prefill
worker's chunk (``chunked-prefill-size`` 8,192 to 262,144 where SGLang's default on these GPUs
is 8,192 or 16,384) and prompt budget (``max-prefill-tokens``), each side's running-request cap,
``mem-fraction-static``, the KV cache's dtype (fp8 on every Blackwell recipe, SGLang's default,
the checkpoint's 16 bits, on every Hopper one), and on some a cap on the KV pool
(``max-total-tokens``: 8,192 tokens on the GB200 / GB300 low-latency prefill workers).

Which version: InferenceX's runners cloned ``ishandhanani/srt-slurm`` and checked out its
``sa-submission-q1-2026`` branch (runners/launch_{b200-dgxc-slurm,gb200-nv,gb300-nv,
h100-dgxc-slurm,h200-dgxc-slurm}.sh at InferenceX 2767db504b, 2026-02-07) for every row of
silicon_sample.csv; NVIDIA/srt-slurm merged that branch twice, `SA_SUBMISSION` (#202,
2026-03-03, and #228, 2026-03-25). A recipe is read at the first of the two that has it (the
later one added the ``recipes/b200-fp8/8k1k_*`` files and dropped some older paths); where
both have it, the flags read here are the same at both (checked for every recipe a row names:
`main` reports any that differ).

One line per (recipe, side): the flags as written, empty where the recipe does not set one
(`FLAGS`; SGLang's aliases ``tensor-parallel-size`` / ``data-parallel-size`` /
``expert-parallel-size`` read as ``tp-size`` / ``dp-size`` / ``ep-size``). Recipes that are not
SGLang's (TensorRT-LLM's, vLLM's) and overrides inside a file (``1k1k.yaml:override_x``, which
no SGLang row names) get no line.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "benchmarks" / "results" / "silicon_spec_decoding.csv.gz"
OUT = ROOT / "benchmarks" / "results" / "srt_slurm_sglang.csv.gz"
#: NVIDIA/srt-slurm's merges of the sa-submission-q1-2026 branch InferenceX ran (#202, #228).
SA_SUBMISSION = ("5063eb432640574bd93410ae2697591a7d15f57c", "4a22a1816f8e1ca6bc41dfca0fbf709782a45fee")
SIDES = ("prefill", "decode")
#: The flags kept, by SGLang's name (the column is the name with ``-`` -> ``_``).
FLAGS = ("tp-size", "dp-size", "ep-size", "enable-dp-attention", "chunked-prefill-size", "max-prefill-tokens",
         "max-running-requests", "max-total-tokens", "mem-fraction-static", "kv-cache-dtype",
         "cuda-graph-max-bs", "scheduler-recv-interval")  # fmt: skip
ALIASES = {
    "tensor-parallel-size": "tp-size",
    "data-parallel-size": "dp-size",
    "expert-parallel-size": "ep-size",
}
FIELDS = ("recipe", "commit", "side", *(flag.replace("-", "_") for flag in FLAGS))


def side_flags(config: dict[str, Any]) -> dict[str, str]:
    """One side's `FLAGS` from its ``sglang_config`` section, as text (``true`` / ``false`` for
    booleans), aliases folded."""
    out = {}
    for key, value in (config or {}).items():
        name = ALIASES.get(str(key), str(key))
        if name in FLAGS and value is not None:
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def recipe_lines(recipe: str, doc: dict[str, Any], commit: str) -> list[dict[str, str]]:
    """The recipe's lines (`FIELDS`), or none where it has no SGLang configuration."""
    sglang = ((doc or {}).get("backend") or {}).get("sglang_config")
    if not isinstance(sglang, dict):
        return []
    lines = []
    for side in SIDES:
        flags = side_flags(sglang.get(side) or {})
        line = {"recipe": recipe, "commit": commit[:12], "side": side}
        line.update({flag.replace("-", "_"): flags.get(flag, "") for flag in FLAGS})
        lines.append(line)
    return lines


def named_recipes(spec_rows: Iterable[dict[str, str]]) -> list[str]:
    """Every whole-file recipe the rows name (inferencex_spec.py's ``recipes``), sorted."""
    names = {name for row in spec_rows for name in (row.get("recipes") or "").split()}
    return sorted(name for name in names if ":" not in name and name.endswith((".yaml", ".yml")))


def _show(repo: Path, commit: str, path: str) -> dict[str, Any] | None:
    """A recipe file parsed at one commit, or None where the commit does not have it."""
    import yaml

    done = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True, text=True
    )
    return yaml.safe_load(done.stdout) if done.returncode == 0 else None


def read_docs(
    repo: Path, recipes: Sequence[str], commits: Sequence[str] = SA_SUBMISSION
) -> dict[str, tuple[str, Any]]:
    """Each recipe that one of ``commits`` has: (the first such commit, the file parsed there)."""
    out = {}
    for recipe in recipes:
        for commit in commits:
            if (doc := _show(repo, commit, recipe)) is not None:
                out[recipe] = (commit, doc)
                break
    return out


def read_recipes(
    repo: Path, recipes: Sequence[str], commits: Sequence[str] = SA_SUBMISSION
) -> tuple[list[dict[str, str]], list[str]]:
    """The lines of every recipe at the first of ``commits`` that has it, and the recipes
    whose flags differ between the commits that have them."""
    lines, differ = [], []
    for recipe in recipes:
        found = [(commit, doc) for commit in commits if (doc := _show(repo, commit, recipe)) is not None]
        if not found:
            continue
        versions = [recipe_lines(recipe, doc, commit) for commit, doc in found]
        lines.extend(versions[0])
        flags = [[{k: v for k, v in line.items() if k != "commit"} for line in v] for v in versions]
        if any(f != flags[0] for f in flags[1:]):
            differ.append(recipe)
    return lines, differ


def read_csv_gz(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a git clone of NVIDIA/srt-slurm")
    parser.add_argument("--spec", type=Path, default=SPEC, help="inferencex_spec.py's output")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    recipes = named_recipes(read_csv_gz(args.spec))
    lines, differ = read_recipes(args.repo, recipes)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    args.out.write_bytes(gzip.compress(buf.getvalue().encode(), mtime=0))
    sglang = len({line["recipe"] for line in lines})
    print(f"{sglang} SGLang recipes of the {len(recipes)} the rows name ({len(lines)} lines)")
    for recipe in differ:
        print(f"flags differ between {' and '.join(c[:8] for c in SA_SUBMISSION)}: {recipe}", file=sys.stderr)


if __name__ == "__main__":
    main()
