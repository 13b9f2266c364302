"""Which InferenceX rows of silicon_sample.csv may have run MTP speculative decoding.

    python benchmarks/inferencex_spec.py --repo PATH/TO/InferenceX --srt-slurm PATH/TO/srt-slurm \\
        [--rows CSV] [--harness benchmarks/results/silicon_harness.csv.gz] \\
        [--out benchmarks/results/silicon_spec_decoding.csv.gz]

(needs git clones of SemiAnalysisAI/InferenceX and NVIDIA/srt-slurm with their history, PyYAML
and git; the file it
writes is committed, so `benchmarks/silicon.py` needs neither.)

InferenceX decides what to measure in ``.github/configs/nvidia-master.yaml``: one entry per
(model, GPU, engine, precision, image), each with search spaces per ISL/OSL of tensor
parallelism (``tp``, the GPUs of one instance), ``ep``, ``dp-attn`` and the clients
(``conc-start`` .. ``conc-end``, doubling, or ``conc-list``), multi-node ones with a
``prefill`` and a ``decode`` side (``num-worker``, ``tp``, ...). A search space with
``spec-decoding: mtp`` runs DeepSeek's (or Qwen3.5's) multi-token-prediction heads as
speculative decoding. Its rows look like the plain ones in silicon_sample.csv: the same
image, columns and timestamp (e.g. two DeepSeek-R1 SGLang B200 TP 8 rows at 4 clients, ISL
1,024 / OSL 8,192, both ``measured=2026-03-25T16:34:14Z``, TPOT 5.76 and 8.64 ms), and no
acceptance rate is recorded.

So each row is matched against the configuration file in force when it was measured (the
last first-parent commit on main that touched it at or before the row's measurement time,
`launch_flags._measured`): same model (`launch_flags.MODEL_KEY`), GPU (the runner's first
word), engine (``dynamo-`` stripped), precision, ISL and OSL, image when the row names one,
a search space holding the row's clients and GPU count (single node: ``tp`` = the row's
GPUs, from the ``tpX_epY`` its id names or its columns, and ``dp-attn``; multi node: each
side's ``tp`` and ``num-worker`` when the row gives them, and the clients of the space's
``conc-list`` or of its srt-slurm recipe's benchmark, which is what ran: `holds`). ``ep`` is not compared: rows
report SGLang's expert parallelism as 1 where the configuration asks for it.

The classes (column ``spec_decoding``):

- ``mtp``: only search spaces with speculative decoding hold the row (kvsim refuses it:
  the acceptance rate it would need is not recorded);
- ``both``: a plain and an MTP search space both hold it (InferenceX ran the point twice;
  the row does not say which run it is);
- ``none``: only plain search spaces hold it, or no MTP configuration existed for the
  model, GPU, engine and ISL/OSL at that time;
- ``unmatched``: MTP configurations existed for the model, GPU and engine, but no search
  space holds the row (its columns disagree with the file's).

Columns ``prefill_workers`` / ``decode_workers``: for a multi-node row, each side's
``num-worker`` when every search space holding the row agrees on both (most srt-slurm rows
of silicon_sample.csv leave ``prefill_num_workers`` / ``decode_num_workers`` empty; they are
then matched on each side's ``tp`` and the clients alone); empty otherwise.

Columns ``prefill_dp_attn`` / ``prefill_ep`` and ``decode_dp_attn`` / ``decode_ep``: a
multi-node row's side as launched, attention data parallelism (``true`` / ``false``) and the
expert-parallel degree, when every search space holding the row agrees and gives the side as
many GPUs per worker as the row counts (`side_layout`; a TensorRT-LLM recipe's own
``trtllm_config`` wins over the space's fields, `Recipe`); empty otherwise. Columns
``prefill_gpus`` / ``decode_gpus``: a side's GPUs per worker, for a row whose columns count the
whole deployment on both sides (`whole_deployment`), from the spaces holding it. Column
``decode_batch``: the decode workers' ``max_batch_size`` (per attention-DP rank) a TensorRT-LLM
recipe's file name gives (`recipe_batch`), when every search space holding the row names the
same one. Column ``recipes``: the srt-slurm recipe files (``CONFIG_FILE=``) of every search
space holding a multi-node row, space-separated (`recipe_files`); `benchmarks/srt_slurm_recipes.py`
reads their engine flags.

Column ``twin_run``: for a ``both`` row, which of the point's two runs it is taken for,
``mtp`` or ``plain`` (`twin_runs`: of two runs the one with the lower TPOT drafted; a row
whose point has no other run in the file is taken for the MTP run, `LONE_RUN`); empty
otherwise (three runs or more). The recipe columns of such a row come from the search spaces
of its own kind only.

Column ``draft_tokens``: for an ``mtp`` row (or the ``mtp`` run of a ``both`` point) of a
multi-node search space, the draft length of its recipe (`recipe_drafts`: TensorRT-LLM's
srt-slurm recipes name it, ``CONFIG_FILE=.../ctx1_gen5_dep8_batch16_eplb0_mtp3.yaml``:
``num_nextn_predict_layers`` 3; SGLang's run EAGLE with two steps but one) when every MTP
search space holding the row gives the same one; empty otherwise (single-node rows take
theirs from the launch scripts: `silicon.mtp_draft_tokens`).

Rows of other harnesses (NVIDIA's gap analysis, and its copies of InferenceX rows, which
take their twin's line: `silicon_harness.copies`), of models InferenceX does not run, ``wip``
rows from unmerged branches, and rows measured before the file existed (2025-11-03; no MTP
search space until 2025-12-05) get no line.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import gzip
import io
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import launch_flags  # noqa: E402

CONFIG = ".github/configs/nvidia-master.yaml"
#: The file's history that can hold silicon_sample.csv's rows (aiconfigurator-core 0.12.0's
#: newest measurement is 2026-04-22).
SINCE, UNTIL = "2025-11-01", "2026-04-29"
OUT = ROOT / "benchmarks" / "results" / "silicon_spec_decoding.csv.gz"
FIELDS = ("id", "spec_decoding", "twin_run", "configs", "commit", "draft_tokens", "prefill_workers",
          "decode_workers", "prefill_dp_attn", "prefill_ep", "decode_dp_attn", "decode_ep", "decode_batch",
          "recipes", "prefill_gpus", "decode_gpus")  # fmt: skip
#: What a ``both`` row whose point has no other run in the file is taken for (`twin_runs`).
#: Fitted on the H200 rows only: of the 47 such rows of the MoE file with at most 64 clients
#: (32 run, 31 of them TensorRT-LLM aggregated), run without drafts TTFT 35% / p90 62% / bias
#: -34%, TPOT 27% / 54% / +26%; as MTP runs 27% / 51% / -11%, 16% / 29% / -16%
#: (docs/validation.md, the thirteenth pass). The file keeps the MTP run of such a point.
LONE_RUN = "mtp"
#: The columns that are the same on the two runs of one point (`twin_runs`): all but the row's id,
#: its source and its measurements.
_POINT_SKIP = ("id", "silicon_data_source", "silicon_ttft_ms", "silicon_tpot_ms")
#: A recipe file whose name gives its MTP draft length (``..._mtp3.yaml``, ``..._mtp1_1229.yaml``).
_RECIPE_MTP = re.compile(r"CONFIG_FILE=\S*_mtp(\d+)(?:_\d+)?\.yaml$")
#: The one SGLang MTP recipe whose decode workers draft one token a step, not two (`recipe_drafts`).
_SGLANG_ONE_STEP = re.compile(
    r"recipes/b200-fp8/1k1k(?:/mtp/max-tpt-dep8-1p2d\.yaml|\.yaml:override_mtp_maxtpt_1p2d)$"
)
#: A recipe file whose name gives its decode workers' layout and batch (``ctx1_gen4_dep8_batch16_...``).
_RECIPE_GEN = re.compile(r"CONFIG_FILE=\S*_gen\d+_(dep|tep|dp|tp)(\d+)_(?:batch(\d+)_)?")
ENGINE = {"sglang": "sglang", "trtllm": "trt", "vllm": "vllm"}
_LAUNCH = re.compile(r"_tp(\d+)(?:_\d)?_ep(\d+)")


@dataclass(frozen=True)
class Space:
    """One search space of one configuration, flattened."""

    name: str
    prefix: str
    gpu: str
    engine: str
    precision: str
    image: str
    isl: int
    osl: int
    entry: dict[str, Any]

    @property
    def mtp(self) -> bool:
        value = self.entry.get("spec-decoding")
        return value is not None and str(value).lower() not in ("", "none", "false")


@dataclass(frozen=True)
class Snapshot:
    """The configuration file at one commit."""

    commit: str
    time: float
    spaces: tuple[Space, ...]


@dataclass(frozen=True)
class Recipe:
    """What an srt-slurm recipe file says about its run (`read_recipes`): the clients its
    benchmark section runs (``benchmark.concurrencies``: ``"36"``, ``"10x15x25"``, ``[1600]``)
    and, for a TensorRT-LLM recipe, each side's worker as (attention DP, expert-parallel
    degree, GPUs) from ``backend.trtllm_config.<side>`` (``enable_attention_dp``,
    ``moe_expert_parallel_size``, ``tensor_parallel_size``)."""

    clients: frozenset[int] = frozenset()
    sides: tuple[tuple[str, tuple[bool, int, int]], ...] = ()

    def side(self, stage: str) -> tuple[bool, int, int] | None:
        return dict(self.sides).get(stage)


#: Recipes by path, as `recipe_files` writes them.
Recipes = dict[str, Recipe]


def recipe_facts(doc: Any) -> Recipe:
    """A parsed recipe's `Recipe` (empty where it says nothing this module reads)."""
    doc = doc if isinstance(doc, dict) else {}
    bench = doc.get("benchmark") if isinstance(doc.get("benchmark"), dict) else {}
    raw = bench.get("concurrencies")
    items = raw if isinstance(raw, list) else str(raw if raw is not None else "").split("x")
    found = {int(str(c).strip()) for c in items if str(c).strip().isdigit()}
    backend = doc.get("backend") if isinstance(doc.get("backend"), dict) else {}
    trtllm = backend.get("trtllm_config") if isinstance(backend.get("trtllm_config"), dict) else {}
    sides = []
    for stage in ("prefill", "decode"):
        cfg = trtllm.get(stage)
        gpus = _int(str(cfg.get("tensor_parallel_size", "")), None) if isinstance(cfg, dict) else None
        if isinstance(cfg, dict) and gpus:
            ep = _int(str(cfg.get("moe_expert_parallel_size", "")), 1) or 1
            sides.append((stage, (cfg.get("enable_attention_dp") is True, ep, gpus)))
    return Recipe(frozenset(c for c in found if c > 0), tuple(sides))


def spaces_of(doc: dict[str, Any]) -> tuple[Space, ...]:
    """Every search space of a parsed nvidia-master.yaml."""
    out = []
    for name, cfg in (doc or {}).items():
        if not isinstance(cfg, dict):
            continue
        for seq in cfg.get("seq-len-configs") or []:
            for entry in seq.get("search-space") or []:
                out.append(
                    Space(
                        name=str(name),
                        prefix=str(cfg.get("model-prefix", "")),
                        gpu=str(cfg.get("runner", "")).split("-")[0],
                        engine=str(cfg.get("framework", "")).removeprefix("dynamo-"),
                        precision=str(cfg.get("precision", "")),
                        image=_norm_image(str(cfg.get("image", ""))),
                        isl=int(seq.get("isl") or 0),
                        osl=int(seq.get("osl") or 0),
                        entry=dict(entry),
                    )
                )
    return tuple(out)


def _norm_image(image: str) -> str:
    return image.strip().replace("nvcr.io#", "nvcr.io/")


def row_clients(row: dict[str, str], harness: dict[str, str]) -> int:
    """A row's benchmark clients: its harness's concurrency, else its batch size (decode batch
    size on disaggregated rows); 0 when it has none."""
    return _int(harness.get("concurrency") or row.get("batch_size") or row.get("decode_batch_size"), 0) or 0


def sweep_clients(space: Space) -> set[int]:
    """The clients of a multi-node TensorRT-LLM search space that names no srt-slurm recipe:
    InferenceX's first GB200 scripts (``benchmarks/dsr1_fp4_gb200_dynamo-trt_slurm.sh``, 2025)
    ran Dynamo's ``components/backends/trtllm/performance_sweeps``, whose ``scripts/bench.sh``
    benchmarks each listed count times the decode workers (``concurrency=$((concurrency *
    num_gen_servers))``, read at Dynamo's main branch): ``conc-list`` 36 with four decode workers
    ran 144 clients. The listed counts stay clients too (`holds`): gpt-oss-120b's GB200 rows,
    run from Dynamo's 2026-01 release of the same sweeps, record counts their lists name as
    they are (3,072 with three decode workers). Empty for every other space."""
    decode = space.entry.get("decode")
    if space.engine != "trt" or not isinstance(decode, dict) or recipe_files(space):
        return set()
    workers = _int(str(decode.get("num-worker", 1)), 1) or 1
    return {c * workers for c in clients(space.entry)}


def clients(entry: dict[str, Any]) -> set[int]:
    """The client counts a search space runs: ``conc-list``, else conc-start doubling to conc-end."""
    if "conc-list" in entry:
        return {int(c) for c in entry["conc-list"]}
    start, end = entry.get("conc-start"), entry.get("conc-end")
    if start is None or end is None or int(start) < 1:
        return set()
    out, c = set(), int(start)
    while c <= int(end):
        out.add(c)
        c *= 2
    return out


def _int(text: str | None, default: int | None = 1) -> int | None:
    try:
        return int(float(text)) if text not in (None, "") else default
    except ValueError:
        return default


def row_gpus(row: dict[str, str]) -> set[int]:
    """The GPU counts one aggregated instance of the row may have: the ``tpX`` its id names
    (X GPUs), its columns' tp x attention DP, and the GPUs `silicon.parallel_layout` runs it
    on (the database dump's rows of the same defect, which do not name the launch)."""
    import silicon

    layout = silicon.parallel_layout(row, True)
    out = {(_int(row.get("tp_size")) or 1) * (_int(row.get("attention_dp_size")) or 1)}
    out.add(layout["tp"] * layout["attention_dp"])
    launch = _LAUNCH.search(row.get("id", ""))
    if launch:
        out.add(int(launch[1]))
    return out


def _side_holds(side: dict[str, Any], row: dict[str, str], stage: str) -> bool:
    tp = _int(row.get(f"{stage}_tp_size")) or 1
    dp = _int(row.get(f"{stage}_attention_dp_size")) or 1
    workers = _int(row.get(f"{stage}_num_workers"), None)
    if workers is not None and int(side.get("num-worker", 1)) != workers:
        return False
    return side.get("tp") in {tp * dp, tp, dp}


def whole_deployment(space: Space, row: dict[str, str]) -> bool:
    """Whether a disaggregated row's columns count the space's whole deployment on both sides:
    the 2026-04-06 source file's early GB200 TensorRT-LLM rows give each side the GPUs of all
    workers together and no worker counts (``..._c32_tp36_ep1_1078``: prefill and decode tp 36,
    where its space runs one 4-GPU prefill worker and four 8-GPU decode workers, 4 + 32)."""
    if any(_int(row.get(f"{side}_num_workers"), None) for side in ("prefill", "decode")):
        return False
    total = 0
    for side in ("prefill", "decode"):
        cfg = space.entry.get(side)
        if not isinstance(cfg, dict):
            return False
        total += (_int(str(cfg.get("num-worker", 1)), 1) or 1) * (_int(str(cfg.get("tp", "")), 0) or 0)
    columns = {silicon_worker_gpus(row, side) for side in ("prefill", "decode")}
    return total > 0 and columns == {total}


def silicon_worker_gpus(row: dict[str, str], stage: str) -> int:
    """`silicon.worker_gpus`: a stage's tp x attention DP columns."""
    import silicon

    return int(silicon.worker_gpus(row, stage))


def holds(space: Space, row: dict[str, str], conc: int, recipes: Recipes | None = None) -> bool:
    """Whether a search space holds the row's deployment and client count. A multi-node
    space's clients are its ``conc-list`` and its recipes' benchmark concurrencies: srt-slurm
    runs the recipe's (the H200 TensorRT-LLM spaces list 4 for
    ``c4_ctx1_gen9_tep8_batch256_eplb0_mtp0.yaml``, whose benchmark and rows run 36 = 4 per
    decode worker)."""
    entry = space.entry
    ran = {c for r in recipe_files(space) for c in (recipes or {}).get(r, Recipe()).clients}
    if conc not in clients(entry) | ran | sweep_clients(space):
        return False
    if row.get("mode") == "disagg":
        prefill, decode = entry.get("prefill"), entry.get("decode")
        if not isinstance(prefill, dict) or not isinstance(decode, dict):
            return False
        sides = _side_holds(prefill, row, "prefill") and _side_holds(decode, row, "decode")
        return sides or whole_deployment(space, row)
    if "prefill" in entry:
        return False
    dp_attention = (_int(row.get("attention_dp_size")) or 1) > 1
    return entry.get("tp") in row_gpus(row) and bool(entry.get("dp-attn", False)) == dp_attention


def classify(
    row: dict[str, str],
    harness: dict[str, str],
    calendar: Sequence[Snapshot],
    run: str = "",
    recipes: Recipes | None = None,
) -> dict[str, str] | None:
    """The row's line (`FIELDS`), or None where the question does not arise (see the module).
    ``run`` (``mtp`` or ``plain``, a ``both`` row's `twin_runs`) keeps only the search spaces of
    that kind for the recipe's columns (draft length, workers, layouts, batch); ``recipes``, the
    srt-slurm recipe files' contents (`read_recipes`), the clients and layouts they ran."""
    if not harness.get("harness", "").startswith(("inferencex", "inferencemax")):
        return None
    if harness.get("copy_of"):  # a gap-analysis copy takes its twin's line (silicon.harness_by_id)
        return None
    if "wip=True" in row.get("silicon_data_source", ""):
        return None
    prefix = launch_flags.MODEL_KEY.get(row.get("model_path", ""))
    when = launch_flags._measured(row, harness)
    if prefix is None or when is None or row.get("backend") not in ENGINE:
        return None
    at = bisect.bisect_right([s.time for s in calendar], when) - 1
    if at < 0:
        return None
    snap = calendar[at]
    gpu, engine = row.get("system", "").removesuffix("_sxm"), ENGINE[row["backend"]]
    isl, osl = _int(row.get("isl"), 0), _int(row.get("osl"), 0)
    family = [
        s
        for s in snap.spaces
        if s.prefix == prefix and s.gpu == gpu and s.engine == engine and s.isl == isl and s.osl == osl
    ]
    image = _norm_image(launch_flags._image(row))
    conc = row_clients(row, harness)
    held = [
        s
        for s in family
        if s.precision == row.get("precision")
        and (not image or s.image == image)
        and holds(s, row, conc, recipes)
    ]
    kinds = {s.mtp for s in held}
    if not kinds:
        kind = "unmatched" if any(s.mtp for s in family) else "none"
    else:
        kind = "both" if kinds == {True, False} else ("mtp" if kinds == {True} else "none")
    if kind == "both" and run:
        held = [s for s in held if s.mtp == (run == "mtp")]
    names = ",".join(sorted({s.name for s in held}))
    drafts = {recipe_drafts(s) for s in held if s.mtp}
    drafting = kind == "mtp" or run == "mtp"
    draft = str(drafts.pop()) if drafting and len(drafts) == 1 and None not in drafts else ""
    sides = {tuple(int((s.entry.get(side) or {}).get("num-worker", 1)) for side in ("prefill", "decode"))
             for s in held if "prefill" in s.entry}  # fmt: skip
    workers = [str(n) for n in sides.pop()] if len(sides) == 1 else ["", ""]
    line = {"id": row["id"], "spec_decoding": kind, "twin_run": run if kind == "both" else "",
            "configs": names, "commit": snap.commit[:12],
            "draft_tokens": draft, "prefill_workers": workers[0], "decode_workers": workers[1]}  # fmt: skip
    whole = bool(held) and all(whole_deployment(s, row) for s in held)
    for stage in ("prefill", "decode"):
        layout = side_layout(held, row, stage, recipes)
        line[f"{stage}_dp_attn"] = "" if layout is None else str(layout[0]).lower()
        line[f"{stage}_ep"] = "" if layout is None else str(layout[1])
        tps = {int((s.entry.get(stage) or {}).get("tp") or 0) for s in held}
        line[f"{stage}_gpus"] = str(tps.pop()) if whole and layout is not None and len(tps) == 1 else ""
    batches = {recipe_batch(s) for s in held}
    line["decode_batch"] = str(batches.pop()) if len(batches) == 1 and None not in batches else ""
    line["recipes"] = " ".join(sorted({r for s in held for r in recipe_files(s)}))
    return line


def recipe_files(space: Space) -> list[str]:
    """The srt-slurm recipes a multi-node search space launches: the ``CONFIG_FILE=`` settings of
    its sides (``recipes/h200/8k1k/bs128-1p1d-dep.yaml``; later ones name an override inside a
    file, ``recipes/b200-fp8/1k1k.yaml:override_mtp_maxtpt_1p2d``), as written."""
    out = []
    for side in ("prefill", "decode"):
        settings = (space.entry.get(side) or {}).get("additional-settings") or []
        for setting in settings if isinstance(settings, list) else []:
            text = str(setting).strip()
            if text.startswith("CONFIG_FILE=") and len(text) > len("CONFIG_FILE="):
                out.append(text.removeprefix("CONFIG_FILE="))
    return out


def side_layout(
    held: Sequence[Space], row: dict[str, str], stage: str, recipes: Recipes | None = None
) -> tuple[bool, int] | None:
    """A multi-node row's stage as launched, (``dp-attn``, ``ep``), when every search space
    holding the row gives that side the same ones and as many GPUs per worker (``tp``) as the
    row's columns count; None otherwise (aggregated rows, spaces that disagree).

    The columns of the srt-slurm rows do not say how a worker's GPUs split: the TensorRT-LLM
    DeepSeek-R1 B200 1k/1k row ``..._c1600_tp8_0_ep8_0_355`` gives its decode workers tp 8,
    attention DP 1, moe 1 x 8, where the one space holding it launches ``dep8`` (recipe
    ``ctx1_gen2_dep8_batch768_eplb0_mtp2_1600.yaml``: eight attention-DP ranks, the experts
    over EP 8), and the GB200 8k/1k row ``..._c12_tp4_0_ep4_0_380`` moe 2 x 4 where its spaces
    launch ``tep8`` (EP 8). A TensorRT-LLM recipe's file name also names its
    decode workers' layout (`recipe_decode`), and where it does it wins: it is what ran. The two
    agree in all but 102 of the 36,496 (version, search space) pairs of the file's history
    that name one: the DeepSeek-R1 FP4 GB200 8k/1k ``ctx1_gen4_tep8_batch{1,16}`` spaces say
    ``dp-attn: true``. A TensorRT-LLM recipe's contents (`recipe_side`), where ``recipes`` has
    them, win over both: the H200 1k/1k spaces say ``dp-attn: false`` for a prefill worker
    their recipes launch with ``enable_attention_dp: true``."""
    gpus = silicon_worker_gpus(row, stage)
    found = set()
    for s in held:
        side = s.entry.get(stage)
        if not isinstance(side, dict):
            return None
        fields = (bool(side.get("dp-attn", False)), int(side.get("ep") or 1), int(side.get("tp") or 0))
        named = recipe_decode(s) if stage == "decode" else None
        found.add(recipe_side(s, stage, recipes) or named or fields)
    if len(found) != 1:
        return None
    dp_attn, ep, tp = found.pop()
    if held and all(whole_deployment(s, row) for s in held):
        gpus = tp  # the columns count every worker: the space's worker is the one
    return (dp_attn, ep) if tp == gpus and ep >= 1 and gpus % ep == 0 else None


def recipe_side(space: Space, stage: str, recipes: Recipes | None) -> tuple[bool, int, int] | None:
    """A side's worker (attention DP, ep, GPUs) as the space's TensorRT-LLM recipe files say
    (`Recipe`), or None where none of them is read or two disagree."""
    found = {f for r in recipe_files(space) if (f := (recipes or {}).get(r, Recipe()).side(stage))}
    return found.pop() if len(found) == 1 else None


def recipe_decode(space: Space) -> tuple[bool, int, int] | None:
    """The decode workers' (``dp-attn``, ``ep``, GPUs) a TensorRT-LLM recipe's file name gives
    (`_RECIPE_GEN`: ``gen5_dep8`` eight attention-DP ranks with EP 8, ``tep8`` tensor-parallel
    attention with EP 8, ``dp8`` attention DP with the experts tensor-parallel, ``tp8``), or
    None where no setting names one or two disagree."""
    found = {
        (m[1] in ("dep", "dp"), int(m[2]) if m[1] in ("dep", "tep") else 1, int(m[2]))
        for m in _gen_names(space)
    }
    return found.pop() if len(found) == 1 else None


def recipe_batch(space: Space) -> int | None:
    """The decode workers' batch a TensorRT-LLM recipe's file name gives (``gen5_tep8_batch1``:
    ``max_batch_size`` 1, per attention-DP rank where the workers run attention DP), or a
    performance-sweep space's ``DECODE_MAX_BATCH_SIZE`` setting (`sweep_clients`: Dynamo's
    ``gen_batch_size``, the same ``max_batch_size``); None where none names one or two disagree."""
    found = {int(m[3]) for m in _gen_names(space) if m[3]}
    found |= {int(v) for v in _settings(space, "decode", "DECODE_MAX_BATCH_SIZE") if v.isdigit()}
    return found.pop() if len(found) == 1 else None


def _settings(space: Space, side: str, key: str) -> list[str]:
    """The values of a side's ``KEY=VALUE`` additional settings (Dynamo's performance sweeps
    take ``DECODE_MAX_BATCH_SIZE``, ``DECODE_MTP_SIZE`` ... this way, not from a recipe)."""
    settings = (space.entry.get(side) or {}).get("additional-settings") or []
    out = []
    for setting in settings if isinstance(settings, list) else []:
        name, sep, value = str(setting).strip().partition("=")
        if sep and name == key:
            out.append(value.strip())
    return out


def _gen_names(space: Space) -> list[re.Match[str]]:
    """The `_RECIPE_GEN` matches of a search space's settings, both sides."""
    out = []
    for side in ("prefill", "decode"):
        settings = (space.entry.get(side) or {}).get("additional-settings") or []
        for setting in settings if isinstance(settings, list) else []:
            match = _RECIPE_GEN.search(str(setting))
            if match:
                out.append(match)
    return out


def recipe_drafts(space: Space) -> int | None:
    """The MTP draft length of a multi-node search space's recipe, or None.

    TensorRT-LLM's recipes name it (`_RECIPE_MTP`). SGLang's do not: they are srt-slurm files
    (``CONFIG_FILE=recipes/b200-fp8/1k1k/mtp/low-latency-tep8-1p1d.yaml``, later
    ``recipes/b200-fp8/1k1k.yaml:zip_override_mtp_lowlat[0]``), and every DeepSeek-R1 one
    InferenceX launched (B200 FP8 and FP4, H200, H100) runs EAGLE over the MTP layer with
    ``speculative-num-steps: 2`` (``speculative-eagle-topk: 1``, ``speculative-num-draft-tokens:
    3``) on its decode workers, but for the B200 FP8 1k/1k ``1p2d`` max-throughput recipe with 1
    (`_SGLANG_ONE_STEP`; NVIDIA/srt-slurm at 37f8ca23^ and c88ef731, whose recipes/b200-fp8/1k1k.yaml
    says so: "1p2d uses speculative-num-steps=1 and draft-tokens=2 (vs 2/3 for all others)").
    Dynamo's performance sweeps (`sweep_clients`) take it as the decode side's
    ``DECODE_MTP_SIZE`` setting (TensorRT-LLM's ``num_nextn_predict_layers``)."""
    found = set()
    for side in ("prefill", "decode"):
        settings = (space.entry.get(side) or {}).get("additional-settings") or []
        for setting in settings if isinstance(settings, list) else []:
            text = str(setting).strip()
            match = _RECIPE_MTP.search(text)
            if match:
                found.add(int(match[1]))
            elif space.engine == "sglang" and text.startswith("CONFIG_FILE="):
                found.add(1 if _SGLANG_ONE_STEP.search(text) else 2)
    found |= {int(v) for v in _settings(space, "decode", "DECODE_MTP_SIZE") if v.isdigit() and int(v) > 0}
    return found.pop() if len(found) == 1 else None


def read_calendar(repo: Path) -> list[Snapshot]:
    """nvidia-master.yaml at every first-parent commit on HEAD that changed it, oldest first."""
    import yaml

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
        ).stdout

    log = git(
        "log",
        "--first-parent",
        "--format=%H %cI",
        f"--since={SINCE}",
        f"--until={UNTIL}",
        "HEAD",
        "--",
        CONFIG,
    )
    out = []
    for line in reversed(log.splitlines()):
        commit, stamp = line.split()
        doc = yaml.safe_load(git("show", f"{commit}:{CONFIG}"))
        out.append(Snapshot(commit, datetime.fromisoformat(stamp).timestamp(), spaces_of(doc)))
    return out


def classify_all(rows: Iterable[dict[str, str]], harness: dict[str, dict[str, str]],
                 calendar: Sequence[Snapshot], recipes: Recipes | None = None) -> list[dict[str, str]]:  # fmt: skip
    rows = list(rows)
    lines = {}
    for row in rows:
        line = classify(row, harness.get(row["id"], {}), calendar, recipes=recipes)
        if line is not None:
            lines[row["id"]] = line
    runs = twin_runs(
        [row for row in rows if lines.get(row["id"], {}).get("spec_decoding") == "both"], harness
    )
    for row in rows:
        if row["id"] in runs:
            lines[row["id"]] = (
                classify(row, harness.get(row["id"], {}), calendar, runs[row["id"]], recipes)
                or lines[row["id"]]
            )
    return [lines[row["id"]] for row in rows if row["id"] in lines]


def twin_runs(rows: Sequence[dict[str, str]], harness: dict[str, dict[str, str]]) -> dict[str, str]:
    """Which run of its point each ``both`` row is: ``mtp`` or ``plain`` by id, where it can be told.

    InferenceX ran a ``both`` point twice, with and without MTP, and silicon_sample.csv keeps
    each run as a row with the same columns, clients and measurement day (some twice, in two
    source files with the same measurements: ``..._c512_tp8_0_ep8_0_683`` and
    ``..._c512_tp8_ep8_1438``, 56,626 ms / 19.41 ms). Where a point's rows hold exactly two
    different measurements, they are the two runs, and the one with the lower mean TPOT is the
    MTP run: drafting is the only thing InferenceX changed between them, and it is there to
    produce more than one token per decode step. The two are far apart: the faster run's TPOT
    is 0.50-0.88x the other's in nine pairs of ten (a median 0.63x over the 96 pairs in one
    file). Only the order of the two measurements is read, never their values.

    A point with one measurement (the other run is not in the file) is taken for its MTP run
    (`LONE_RUN`), unless the same run is a decided point's: the database dump's rows fill
    columns the source files leave empty (``..._c28_cfg297`` has its worker counts, its copy
    ``..._c28_tp8_0_ep8_0_388`` none), so a run recorded in both is two points, and the dump's
    alone; a lone row whose model (`launch_flags.MODEL_KEY`: the dump names DeepSeek-R1's runs
    ``deepseek-ai/DeepSeek-V3``), GPU, engine, precision, lengths, clients, day and
    measurements are a decided row's is that row's run. A point with more than two
    measurements stays undecided."""
    points: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        points.setdefault(_point(row, harness), []).append(row)
    out, lone, decided = {}, [], {}
    for point in points.values():
        runs: dict[tuple[float, float], list[str]] = {}
        for row in point:
            runs.setdefault(_measured(row), []).append(row["id"])
        if len(runs) == 1:
            lone.extend(point)
        if len(runs) != 2:
            continue
        faster, slower = sorted(runs)
        out.update({i: "mtp" for i in runs[faster]} | {i: "plain" for i in runs[slower]})
        for row in point:
            decided[_same_run(row, harness)] = out[row["id"]]
    for row in lone:
        out[row["id"]] = decided.get(_same_run(row, harness), LONE_RUN)
    return out


def _point(row: dict[str, str], harness: dict[str, dict[str, str]]) -> tuple[str, ...]:
    """A row's point (`twin_runs`): every column but its id, source and measurements, its clients
    and its measurement day."""
    conc = str(row_clients(row, harness.get(row["id"], {})))
    day = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.get("silicon_data_source", ""))
    return (*(v for k, v in sorted(row.items()) if k not in _POINT_SKIP), conc, day[1] if day else "")


def _measured(row: dict[str, str]) -> tuple[float, float]:
    """Mean TPOT and TTFT to four significant digits: one run copied into two source files may
    be rounded apart."""
    tpot, ttft = (float(f"{float(row[k]):.4g}") for k in ("silicon_tpot_ms", "silicon_ttft_ms"))
    return tpot, ttft


def _same_run(row: dict[str, str], harness: dict[str, dict[str, str]]) -> tuple[Any, ...]:
    """What one run recorded in two places shares whatever columns each fills (`twin_runs`); the
    model by InferenceX's name for it (the dump calls DeepSeek-R1's runs DeepSeek-V3)."""
    day = re.search(r"measured=(\d{4}-\d{2}-\d{2})", row.get("silicon_data_source", ""))
    model = launch_flags.MODEL_KEY.get(row.get("model_path", ""), row.get("model_path", ""))
    what = tuple(row.get(k, "") for k in ("system", "backend", "precision", "mode", "isl", "osl"))
    return (model, *what, row_clients(row, harness.get(row["id"], {})), day[1] if day else "", _measured(row))


def read_recipes(repo: Path, calendar: Sequence[Snapshot]) -> Recipes:
    """Every whole recipe file a search space of ``calendar`` names, from a clone of
    NVIDIA/srt-slurm at the first of its merges of the branch InferenceX ran that has it
    (`srt_slurm_recipes.read_docs`)."""
    import srt_slurm_recipes

    names = sorted({r for snap in calendar for s in snap.spaces for r in recipe_files(s)})
    docs = srt_slurm_recipes.read_docs(repo, [n for n in names if ":" not in n])
    return {name: recipe_facts(doc) for name, (_, doc) in docs.items()}


def main(argv: Sequence[str] | None = None) -> None:
    import silicon

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="a git clone of SemiAnalysisAI/InferenceX")
    parser.add_argument("--srt-slurm", type=Path, required=True,
                        help="a git clone of NVIDIA/srt-slurm (the recipes' clients and layouts)")  # fmt: skip
    parser.add_argument("--rows", type=Path, help="silicon_sample.csv (default: the installed one)")
    parser.add_argument("--harness", type=Path, default=silicon.HARNESS, help="silicon_harness.py's output")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    rows = silicon.read_csv(args.rows or silicon.default_rows())
    calendar = read_calendar(args.repo)
    recipes = read_recipes(args.srt_slurm, calendar)
    lines = classify_all(rows, silicon.harness_by_id(args.harness, None), calendar, recipes)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    args.out.write_bytes(gzip.compress(buf.getvalue().encode(), mtime=0))
    head = git_head(args.repo)
    print(f"{len(lines)} rows from {len(calendar)} versions of {CONFIG} (InferenceX {head}): "
          + ", ".join(f"{k} {v}" for k, v in Counter(x["spec_decoding"] for x in lines).most_common()))  # fmt: skip


def git_head(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip


if __name__ == "__main__":
    main()
