"""benchmarks/inferencex_spec.py: which InferenceX rows ran MTP speculative decoding, from the
configuration file in force when each was measured; and benchmarks/silicon.py refusing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark

from kvsim.cost.tables import package_tables_root

ROOT = Path(__file__).resolve().parent.parent


spec_mod = load_benchmark("inferencex_spec")
silicon = load_benchmark("silicon")
Space, Snapshot, classify = spec_mod.Space, spec_mod.Snapshot, spec_mod.classify

SGLANG_IMAGE = "lmsysorg/sglang:v0.5.9-cu130"
DAY = 86_400.0
T0 = 1_774_000_000.0  # 2026-03-20, a commit's time


def space(entry: dict[str, Any], *, name: str = "dsr1-fp8-b200-sglang", image: str = SGLANG_IMAGE,
          precision: str = "fp8", isl: int = 1024, osl: int = 8192, engine: str = "sglang") -> Any:  # fmt: skip
    return Space(name=name, prefix="dsr1", gpu="b200", engine=engine, precision=precision, image=image,
                 isl=isl, osl=osl, entry=entry)  # fmt: skip


def row(**over: str) -> dict[str, str]:
    """An InferenceX DeepSeek-R1 SGLang B200 row: TP 8, 4 clients, ISL 1,024 / OSL 8,192."""
    out = {
        "id": "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x8192_c4_tp8_0_ep1_0_303",
        "silicon_data_source": f"source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=4; "
        f"measured=2026-03-25T16:34:14Z; wip=False; image={SGLANG_IMAGE}",
        "backend": "sglang", "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "precision": "fp8",
        "mode": "agg", "isl": "1024", "osl": "8192", "batch_size": "4", "tp_size": "8", "attention_dp_size": "1",
        "moe_ep_size": "1",
    }  # fmt: skip
    out.update(over)
    return out


HARNESS = {"harness": "inferencex-single-node", "concurrency": "4"}
PLAIN = space({"tp": 8, "ep": 1, "conc-start": 4, "conc-end": 64})
MTP = space({"tp": 8, "ep": 1, "conc-start": 4, "conc-end": 512, "spec-decoding": "mtp"},
            name="dsr1-fp8-b200-sglang-mtp")  # fmt: skip


def kind(r: dict[str, str], *spaces: Any, harness: dict[str, str] = HARNESS) -> str | None:
    line = classify(r, harness, [Snapshot("c" * 40, T0, tuple(spaces))])
    return None if line is None else line["spec_decoding"]


def test_client_counts_double_from_start_to_end_or_are_listed() -> None:
    assert spec_mod.clients({"conc-start": 4, "conc-end": 64}) == {4, 8, 16, 32, 64}
    assert spec_mod.clients({"conc-start": 4, "conc-end": 48}) == {4, 8, 16, 32}
    assert spec_mod.clients({"conc-list": [875, 6]}) == {6, 875}
    assert spec_mod.clients({"tp": 8}) == set()


def test_a_point_only_an_mtp_search_space_holds_is_mtp() -> None:
    assert kind(row(), MTP) == "mtp"
    assert kind(row(), PLAIN, MTP) == "both"  # ran twice, the row does not say which
    assert kind(row(), PLAIN) == "none"
    # 128 clients: beyond the plain space (4..64), inside the MTP one (4..512).
    assert kind(row(batch_size="128"), PLAIN, MTP, harness={**HARNESS, "concurrency": "128"}) == "mtp"


def test_image_precision_gpus_and_lengths_must_match() -> None:
    assert kind(row(), space(MTP.entry, image="lmsysorg/sglang:v0.5.8-cu130")) == "unmatched"
    assert kind(row(), space(MTP.entry, precision="fp4")) == "unmatched"
    tp4 = row(tp_size="4", id=row()["id"].replace("_tp8_", "_tp4_"))
    assert kind(tp4, MTP) == "unmatched"  # a TP 4 row: the MTP space runs TP 8
    assert kind(row(attention_dp_size="8", tp_size="1"), MTP) == "unmatched"  # dp-attn differs
    # Another ISL/OSL, or no MTP configuration at all for the model, GPU and engine: none.
    assert kind(row(), space(MTP.entry, osl=1024)) == "none"
    assert kind(row(), space(MTP.entry, engine="trt")) == "none"
    # A row without an image matches on the rest.
    plain_source = "source_file=2026-04-06.csv; model=DeepSeek-R1; measured=2026-03-25T00:00:00.000Z"
    assert kind(row(silicon_data_source=plain_source), MTP) == "mtp"


def test_the_launch_the_id_names_gives_the_gpus() -> None:
    """Rows whose columns count X x Y GPUs for ``tpX_epY`` (silicon.parallel_layout) match tp X."""
    r = row(id="2026_04_06_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x8192_c4_tp8_ep8_20", tp_size="64")
    assert kind(r, MTP) == "mtp"
    # The database dump's rows name no launch: X x X > 8 GPUs matches tp X, other counts do not.
    dump = row(id="dsr1_b200_sglang_fp8_agg_1024x8192_c4_cfg201", tp_size="64")
    assert kind(dump, MTP) == "mtp"
    assert kind(row(id="dsr1_b200_sglang_fp8_agg_1024x8192_c4_cfg201", tp_size="32"), MTP) == "unmatched"


def test_the_file_in_force_at_the_measurement_is_used() -> None:
    before, after = Snapshot("a" * 40, T0, (PLAIN,)), Snapshot("b" * 40, T0 + 10 * DAY, (PLAIN, MTP))
    line = classify(row(), HARNESS, [before, after])  # measured 2026-03-25: `after` is not yet in force
    assert line is not None and line["spec_decoding"] == "none" and line["commit"] == "a" * 12
    late = row(silicon_data_source=row()["silicon_data_source"].replace("2026-03-25T16", "2026-04-05T16"))
    line = classify(late, HARNESS, [before, after])
    assert (
        line is not None
        and line["spec_decoding"] == "both"
        and line["configs"] == ("dsr1-fp8-b200-sglang,dsr1-fp8-b200-sglang-mtp")
    )
    early = row(silicon_data_source=row()["silicon_data_source"].replace("2026-03-25", "2026-03-01"))
    assert classify(early, HARNESS, [before, after]) is None  # before the file's first version


def test_rows_outside_inferencex_get_no_line() -> None:
    assert kind(row(), MTP, harness={"harness": "nvidia-gap-analysis", "concurrency": "4"}) is None
    wip = row(silicon_data_source=row()["silicon_data_source"].replace("wip=False", "wip=True"))
    assert kind(wip, MTP) is None
    assert kind(row(model_path="meta-llama/Llama-3.1-70B-Instruct"), MTP) is None


def test_disaggregated_rows_match_each_side() -> None:
    side = {"num-worker": 1, "tp": 8, "ep": 8, "dp-attn": False}
    mtp = space({"spec-decoding": "mtp", "conc-list": [4, 64], "prefill": side, "decode": {**side, "num-worker": 3}},
                name="dsr1-fp8-b200-dynamo-sglang-mtp", isl=1024, osl=1024)  # fmt: skip
    d = row(mode="disagg", isl="1024", osl="1024", batch_size="", tp_size="", prefill_tp_size="8",
            decode_tp_size="8", prefill_num_workers="", decode_num_workers="")  # fmt: skip
    harness = {"harness": "inferencex-multi-node-srt-slurm", "concurrency": "64"}
    assert kind(d, mtp, harness=harness) == "mtp"  # worker counts not given: matched on tp and clients
    assert kind({**d, "decode_num_workers": "3", "prefill_num_workers": "1"}, mtp, harness=harness) == "mtp"
    assert kind({**d, "decode_num_workers": "2"}, mtp, harness=harness) == "unmatched"
    assert kind(d, mtp, harness={**harness, "concurrency": "32"}) == "unmatched"
    assert kind(row(isl="1024", osl="1024"), mtp) == "unmatched"  # an aggregated row: no single-node space


def test_a_multi_node_row_takes_its_worker_counts_and_draft_length_from_the_configuration() -> None:
    """The srt-slurm rows leave the worker counts empty: every search space holding the row
    must agree on both sides' ``num-worker``; an MTP one's recipe names its draft length."""
    side = {"num-worker": 1, "tp": 8, "ep": 8, "dp-attn": True}
    recipe = "CONFIG_FILE=recipes/trtllm/b200-fp4/1k1k/mtp/ctx1_gen3_dep8_batch16_eplb0_mtp3.yaml"
    mtp = space({"spec-decoding": "mtp", "conc-list": [64],
                 "prefill": {**side, "additional-settings": [recipe]}, "decode": {**side, "num-worker": 3}},
                name="dsr1-fp4-b200-dynamo-trt-mtp", isl=1024, osl=1024, engine="trt")  # fmt: skip
    d = row(mode="disagg", backend="trtllm", isl="1024", osl="1024", batch_size="", tp_size="",
            prefill_tp_size="1", prefill_attention_dp_size="8", decode_tp_size="1",
            decode_attention_dp_size="8", silicon_data_source=row()["silicon_data_source"].split("; image=")[0])  # fmt: skip
    harness = {"harness": "inferencex-multi-node-srt-slurm", "concurrency": "64"}
    line = classify(d, harness, [Snapshot("c" * 40, T0, (mtp,))])
    assert line is not None and line["spec_decoding"] == "mtp"
    assert (line["draft_tokens"], line["prefill_workers"], line["decode_workers"]) == ("3", "1", "3")
    # A second space holding the row with other counts: neither count is known.
    other = space({**mtp.entry, "prefill": side, "decode": {**side, "num-worker": 5}}, name="dsr1-fp4-b200-dynamo-trt-mtp",
                  isl=1024, osl=1024, engine="trt")  # fmt: skip
    line = classify(d, harness, [Snapshot("c" * 40, T0, (mtp, other))])
    assert line is not None and (line["prefill_workers"], line["decode_workers"]) == ("", "")
    assert line["draft_tokens"] == ""  # the other recipe names no length
    assert spec_mod.recipe_drafts(
        space({"prefill": {"additional-settings": [recipe.replace("mtp3", "mtp1_1229")]}})
    )
    unnamed = {"prefill": {"additional-settings": ["CONFIG_FILE=1k1k.yaml:zip[0]"]}}
    assert spec_mod.recipe_drafts(space(unnamed, engine="trt")) is None


def test_sglang_recipes_draft_two_steps_but_the_b200_fp8_1k1k_1p2d_one() -> None:
    """srt-slurm's SGLang MTP recipes run EAGLE with ``speculative-num-steps: 2``, but one."""

    def drafts(setting: str) -> int | None:
        return spec_mod.recipe_drafts(space({"prefill": {"additional-settings": [setting]}}))

    assert drafts("CONFIG_FILE=recipes/b200-fp8/1k1k/mtp/low-latency-tep8-1p1d.yaml") == 2
    assert drafts("CONFIG_FILE=recipes/b200-fp4/8k1k.yaml:zip_override_mtp_lowlat[2]") == 2
    assert drafts("CONFIG_FILE=recipes/h200/8k1k/bs16-1p3d-mtp.yaml") == 2
    assert drafts("CONFIG_FILE=recipes/b200-fp8/1k1k/mtp/max-tpt-dep8-1p2d.yaml") == 1
    assert drafts("CONFIG_FILE=recipes/b200-fp8/1k1k.yaml:override_mtp_maxtpt_1p2d") == 1
    assert drafts("CONFIG_FILE=recipes/b200-fp8/8k1k/mtp/max-tpt-dep8-1p2d.yaml") == 2  # 8k/1k: two
    assert drafts("--no-config-file") is None


def _run(
    r: dict[str, str], ttft: str, tpot: str, day: str = "2026-03-25T16:34:14Z", n: int = 0
) -> dict[str, str]:
    source = r["silicon_data_source"].replace("2026-03-25T16:34:14Z", day)
    return {
        **r,
        "id": f"{r['id']}_{n}",
        "silicon_data_source": source,
        "silicon_ttft_ms": ttft,
        "silicon_tpot_ms": tpot,
    }


def test_the_faster_of_a_points_two_runs_is_its_mtp_run() -> None:
    """A ``both`` point's rows: the same columns, clients and day; two measurements are its two
    runs, the lower TPOT drafting; a copy of one run from another source file goes with it."""
    harness = {}
    plain, mtp = _run(row(), "183.2", "8.76", n=1), _run(row(), "206.7", "6.70", n=2)
    copy = _run(row(), "206.70", "6.7000", day="2026-03-25T00:00:00.000Z", n=3)  # another file, same run
    assert spec_mod.twin_runs([plain, mtp, copy], harness) == {
        plain["id"]: "plain",
        mtp["id"]: "mtp",
        copy["id"]: "mtp",
    }
    # The other run is not in the file: taken for the MTP run (LONE_RUN, fitted on H200).
    assert spec_mod.twin_runs([plain], harness) == {plain["id"]: "mtp"}
    assert spec_mod.twin_runs([mtp, copy], harness) == {mtp["id"]: "mtp", copy["id"]: "mtp"}
    third = _run(row(), "190.0", "7.50", n=4)
    assert spec_mod.twin_runs([plain, mtp, third], harness) == {}  # three runs: undecided
    alone = {plain["id"]: "mtp"}  # each of two points alone
    other_day = _run(row(), "206.7", "6.70", day="2026-03-26T10:00:00Z", n=5)
    assert spec_mod.twin_runs([plain, other_day], harness) == alone | {other_day["id"]: "mtp"}
    other_clients = _run(row(batch_size="8"), "206.7", "6.70", n=6)
    assert spec_mod.twin_runs([plain, other_clients], harness) == alone | {other_clients["id"]: "mtp"}
    # Where the harness gives the clients, they count too.
    apart = {plain["id"]: {"concurrency": "4"}, mtp["id"]: {"concurrency": "8"}}
    assert spec_mod.twin_runs([plain, mtp], apart) == alone | {mtp["id"]: "mtp"}
    # The same run recorded with more columns filled (the database dump's worker counts) is
    # a point alone, but the run of a decided point: it takes that run's label.
    dump = _run(row(prefill_num_workers="1"), "183.20", "8.760", n=7)
    assert spec_mod.twin_runs([plain, mtp, dump], harness)[dump["id"]] == "plain"
    assert spec_mod.twin_runs([dump], harness) == {dump["id"]: "mtp"}  # nothing to take it from
    elsewhere = _run(row(prefill_num_workers="1"), "183.2", "8.76", day="2026-03-26T10:00:00Z", n=8)
    assert spec_mod.twin_runs([plain, mtp, elsewhere], harness)[elsewhere["id"]] == "mtp"  # another day


def test_a_both_rows_recipe_columns_come_from_the_search_spaces_of_its_run() -> None:
    side = {"num-worker": 1, "tp": 8, "ep": 8, "dp-attn": False}
    recipe = "CONFIG_FILE=recipes/trtllm/b200-fp4/1k1k/{}/ctx1_gen{}_tep8_batch{}_eplb0{}.yaml"
    mtp = space({"spec-decoding": "mtp", "conc-list": [64],
                 "prefill": {**side, "additional-settings": [recipe.format("mtp", 3, 16, "_mtp3")]},
                 "decode": {**side, "num-worker": 3}},
                name="dsr1-fp4-b200-dynamo-trt-mtp", isl=1024, osl=1024, engine="trt")  # fmt: skip
    plain = space({"conc-list": [64], "prefill": {**side, "additional-settings": [recipe.format("stp", 2, 32, "")]},
                   "decode": {**side, "num-worker": 2}},
                  name="dsr1-fp4-b200-dynamo-trt", isl=1024, osl=1024, engine="trt")  # fmt: skip
    d = row(mode="disagg", backend="trtllm", isl="1024", osl="1024", batch_size="", tp_size="", prefill_tp_size="8",
            decode_tp_size="8", silicon_data_source=row()["silicon_data_source"].split("; image=")[0])  # fmt: skip
    harness = {"harness": "inferencex-multi-node-srt-slurm", "concurrency": "64"}
    calendar = [Snapshot("c" * 40, T0, (mtp, plain))]
    columns = ("spec_decoding", "twin_run", "draft_tokens", "decode_workers", "decode_batch")
    line = classify(d, harness, calendar)
    assert line is not None and tuple(line[k] for k in columns) == ("both", "", "", "", "")
    line = classify(d, harness, calendar, "mtp")
    assert line is not None and tuple(line[k] for k in columns) == ("both", "mtp", "3", "3", "16")
    line = classify(d, harness, calendar, "plain")
    assert line is not None and tuple(line[k] for k in columns) == ("both", "plain", "", "2", "32")
    # classify_all pairs the two runs and classifies each with its own spaces.
    runs = [{**d, "id": "slow", "silicon_ttft_ms": "900", "silicon_tpot_ms": "12.0"},
            {**d, "id": "fast", "silicon_ttft_ms": "950", "silicon_tpot_ms": "7.5"}]  # fmt: skip
    lines = spec_mod.classify_all(runs, {"slow": harness, "fast": harness}, calendar)
    assert [(x["id"], x["twin_run"], x["draft_tokens"]) for x in lines] == [
        ("slow", "plain", ""),
        ("fast", "mtp", "3"),
    ]


def test_a_multi_node_row_names_the_recipes_of_the_spaces_of_its_run() -> None:
    """``recipes``: every CONFIG_FILE of the spaces holding the row (of its own run, for a ``both``
    row), sorted and space-separated; a gap-analysis copy gets no line of its own."""
    side = {"num-worker": 1, "tp": 8, "ep": 8, "dp-attn": False}
    recipe = "CONFIG_FILE=recipes/h200/8k1k/bs{}-1p{}d{}.yaml"
    plain = [space({"conc-list": [64], "prefill": {**side, "additional-settings": [recipe.format(n, d, "")]},
                    "decode": {**side, "num-worker": d}}, name="dsr1-fp8-h200-dynamo-sglang", isl=1024, osl=1024)
             for n, d in ((16, 3), (8, 6))]  # fmt: skip
    mtp = space({"spec-decoding": "mtp", "conc-list": [64],
                 "prefill": {**side, "additional-settings": [recipe.format(16, 3, "-mtp")]},
                 "decode": {**side, "num-worker": 3}}, name="dsr1-fp8-h200-dynamo-sglang-mtp", isl=1024, osl=1024)  # fmt: skip
    d = row(mode="disagg", isl="1024", osl="1024", batch_size="", tp_size="", prefill_tp_size="8",
            decode_tp_size="8", silicon_data_source=row()["silicon_data_source"].split("; image=")[0])  # fmt: skip
    harness = {"harness": "inferencex-multi-node-srt-slurm", "concurrency": "64"}
    calendar = [Snapshot("c" * 40, T0, (*plain, mtp))]
    line = classify(d, harness, calendar, "plain")
    assert line is not None
    assert line["recipes"] == "recipes/h200/8k1k/bs16-1p3d.yaml recipes/h200/8k1k/bs8-1p6d.yaml"
    line = classify(d, harness, calendar, "mtp")
    assert line is not None and line["recipes"] == "recipes/h200/8k1k/bs16-1p3d-mtp.yaml"
    line = classify(row(), HARNESS, [Snapshot("c" * 40, T0, (PLAIN,))])
    assert line is not None and line["recipes"] == ""  # single node: no recipe
    assert classify(d, {**harness, "copy_of": "twin"}, calendar) is None


def test_a_multi_node_row_takes_each_sides_layout_from_the_configuration_and_its_recipe() -> None:
    """The srt-slurm rows' columns do not say how a worker's GPUs split (a ``dep8`` decode
    worker appears as tp 8, attention DP 1; a ``tep8`` one with moe 2 x 4): every search space holding the row
    must agree on a side's ``dp-attn`` and ``ep`` and give it the row's GPUs per worker; a
    recipe whose name gives the decode layout (``gen1_tep8``) wins over the space's fields."""

    def trt(prefill: dict[str, Any], decode: dict[str, Any], recipe: str = "") -> Any:
        settings = {"additional-settings": [recipe]} if recipe else {}
        return space({"conc-list": [64], "prefill": {"num-worker": 1, **prefill, **settings},
                      "decode": {"num-worker": 1, **decode}},
                     name="dsr1-fp4-gb200-dynamo-trt", isl=1024, osl=1024, engine="trt")  # fmt: skip

    dep4, dep8 = {"tp": 4, "ep": 4, "dp-attn": True}, {"tp": 8, "ep": 8, "dp-attn": True}
    d = row(mode="disagg", backend="trtllm", isl="1024", osl="1024", batch_size="", tp_size="",
            prefill_tp_size="4", prefill_attention_dp_size="1", prefill_moe_tp_size="1", prefill_moe_ep_size="4",
            decode_tp_size="8", decode_attention_dp_size="1", decode_moe_tp_size="2", decode_moe_ep_size="4",
            silicon_data_source=row()["silicon_data_source"].split("; image=")[0])  # fmt: skip
    harness = {"harness": "inferencex-multi-node-srt-slurm", "concurrency": "64"}

    def sides(*spaces: Any) -> tuple[str, ...]:
        line = classify(d, harness, [Snapshot("c" * 40, T0, spaces)])
        assert line is not None
        return tuple(line[f"{s}_{k}"] for s in ("prefill", "decode") for k in ("dp_attn", "ep"))

    assert sides(trt(dep4, dep8)) == ("true", "4", "true", "8")
    assert sides(trt(dep4, {**dep8, "dp-attn": False})) == ("true", "4", "false", "8")
    # The recipe's name is what ran: ``tep8`` under a space that says dp-attn.
    tep8 = "CONFIG_FILE=recipes/trtllm/gb200-fp4/8k1k/stp/ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml"
    assert sides(trt(dep4, dep8, tep8)) == ("true", "4", "false", "8")
    assert spec_mod.recipe_decode(trt(dep4, dep8, tep8.replace("tep8", "dp8"))) == (True, 1, 8)
    assert spec_mod.recipe_decode(trt(dep4, dep8)) is None
    # The recipe's decode batch (max_batch_size per rank), when every space names the same one.
    assert spec_mod.recipe_batch(trt(dep4, dep8, tep8)) == 16
    assert spec_mod.recipe_batch(trt(dep4, dep8, tep8.replace("_batch16", ""))) is None
    assert spec_mod.recipe_batch(trt(dep4, dep8)) is None
    line = classify(d, harness, [Snapshot("c" * 40, T0, (trt(dep4, dep8, tep8),))])
    assert line is not None and line["decode_batch"] == "16"
    batch1 = trt(dep4, dep8, tep8.replace("batch16", "batch1"))
    line = classify(d, harness, [Snapshot("c" * 40, T0, (trt(dep4, dep8, tep8), batch1))])
    assert line is not None and line["decode_batch"] == ""
    # Two spaces that disagree on the decode side: only the prefill side is known.
    assert sides(trt(dep4, dep8), trt(dep4, {**dep8, "ep": 1})) == ("true", "4", "", "")
    # A space that holds the row on its tp alone (tp 8 x attention DP 2 = 16 GPUs per worker):
    # its layout is not this worker's.
    wide = {**d, "decode_attention_dp_size": "2"}
    line = classify(wide, harness, [Snapshot("c" * 40, T0, (trt(dep4, dep8),))])
    assert line is not None and (line["decode_dp_attn"], line["decode_ep"]) == ("", "")


def test_a_recipes_benchmark_clients_and_its_workers_as_written_decide() -> None:
    """InferenceX's H200 TensorRT-LLM spaces list the clients per decode worker (``conc-list:
    [4]`` for ``c4_ctx1_gen9_tep8_batch256``) where the recipe's benchmark runs 36, the rows'
    count; and their prefill sides say ``dp-attn: false`` where the recipe launches
    ``enable_attention_dp: true``. The recipe, read from srt-slurm, is what ran."""
    name = "recipes/trtllm/h200/1k1k/stp/c4_ctx1_gen9_tep8_batch256_eplb0_mtp0.yaml"
    tep8 = {"tp": 8, "ep": 8, "dp-attn": False}
    s = space({"conc-list": [4], "prefill": {"num-worker": 1, **tep8, "additional-settings": [f"CONFIG_FILE={name}"]},
               "decode": {"num-worker": 9, **tep8}}, name="dsr1-fp8-h200-dynamo-trt", isl=1024, osl=1024,
              engine="trt", image="")  # fmt: skip
    doc = {"benchmark": {"concurrencies": "36"},
           "backend": {"trtllm_config": {
               "prefill": {"tensor_parallel_size": 8, "moe_expert_parallel_size": 8, "enable_attention_dp": True},
               "decode": {"tensor_parallel_size": 8, "moe_expert_parallel_size": 8, "enable_attention_dp": False}}}}  # fmt: skip
    recipes = {name: spec_mod.recipe_facts(doc)}
    d = row(mode="disagg", backend="trtllm", isl="1024", osl="1024", batch_size="", tp_size="",  # space(): B200
            prefill_tp_size="8", prefill_attention_dp_size="1", prefill_moe_ep_size="8",
            decode_tp_size="8", decode_attention_dp_size="1", decode_moe_ep_size="8", decode_batch_size="4",
            silicon_data_source=row()["silicon_data_source"].split("; image=")[0])  # fmt: skip
    harness = {"harness": "inferencex-multi-node-srt-slurm", "concurrency": "36"}
    calendar = [Snapshot("c" * 40, T0, (s,))]
    assert classify(d, harness, calendar) is None or classify(d, harness, calendar)["configs"] == ""
    line = classify(d, harness, calendar, recipes=recipes)
    assert line is not None and line["configs"] == "dsr1-fp8-h200-dynamo-trt"
    assert (line["prefill_workers"], line["decode_workers"], line["decode_batch"]) == ("1", "9", "256")
    assert (line["prefill_dp_attn"], line["prefill_ep"], line["decode_dp_attn"], line["decode_ep"]) == (
        "true", "8", "false", "8")  # fmt: skip
    # Without the recipe's contents the space's own fields: tensor-parallel prefill.
    at4 = classify({**d}, {**harness, "concurrency": "4"}, calendar)
    assert at4 is not None and at4["prefill_dp_attn"] == "false"
    # A client count neither the space nor its recipe runs is not held.
    assert classify(d, {**harness, "concurrency": "72"}, calendar, recipes=recipes)["configs"] == ""
    # The benchmark's clients as srt-slurm writes them; a recipe without TensorRT-LLM sides.
    facts = spec_mod.recipe_facts
    assert facts({"benchmark": {"concurrencies": "10x15x25"}}).clients == {10, 15, 25}
    assert facts({"benchmark": {"concurrencies": [1600]}}).clients == {1600}
    assert facts({"benchmark": {"concurrencies": 8}}).clients == {8}
    assert facts({"backend": {"sglang_config": {"prefill": {"tp-size": 8}}}}) == spec_mod.Recipe()
    assert facts(None) == spec_mod.Recipe() and facts({"benchmark": "x"}).clients == frozenset()
    # ``moe_expert_parallel_size`` left out: TensorRT-LLM's experts are tensor-parallel (ep 1).
    assert facts({"backend": {"trtllm_config": {"prefill": {"tensor_parallel_size": 4}}}}).side("prefill") == (
        False, 1, 4)  # fmt: skip


def test_dynamos_performance_sweeps_ran_each_count_per_decode_worker() -> None:
    """InferenceX's first GB200 TensorRT-LLM spaces name no recipe: Dynamo's performance
    sweeps ran them, and their bench.sh multiplies each listed count by the decode workers."""
    side = {"tp": 4, "ep": 4, "dp-attn": False}
    sweep = space({"conc-list": [1, 36], "prefill": {"num-worker": 1, **side},
                   "decode": {"num-worker": 4, "tp": 8, "ep": 8, "dp-attn": False}},
                  name="dsr1-fp4-gb200-dynamo-trt", engine="trt")  # fmt: skip
    assert spec_mod.sweep_clients(sweep) == {4, 144}
    assert spec_mod.holds(sweep, row(mode="disagg", prefill_tp_size="4", decode_tp_size="8"), 144)
    assert not spec_mod.holds(sweep, row(mode="disagg", prefill_tp_size="4", decode_tp_size="8"), 72)
    named = {
        **sweep.entry,
        "prefill": {**sweep.entry["prefill"], "additional-settings": ["CONFIG_FILE=r.yaml"]},
    }
    assert spec_mod.sweep_clients(space(named, engine="trt")) == set()  # srt-slurm's recipe says
    assert spec_mod.sweep_clients(space(sweep.entry)) == set()  # SGLang's: no such rule
    # Their draft length and decode batch are settings, not a recipe's name.
    mtp = {**sweep.entry, "spec-decoding": "mtp",
           "decode": {**sweep.entry["decode"], "additional-settings": ["DECODE_MAX_BATCH_SIZE=32", "DECODE_MTP_SIZE=3"]}}  # fmt: skip
    assert (
        spec_mod.recipe_drafts(space(mtp, engine="trt")),
        spec_mod.recipe_batch(space(mtp, engine="trt")),
    ) == (3, 32)
    plain = {**mtp, "decode": {**mtp["decode"], "additional-settings": ["DECODE_MTP_SIZE=0"]}}
    assert (spec_mod.recipe_drafts(space(plain, engine="trt")), spec_mod.recipe_batch(space(plain, engine="trt"))) == (
        None, None)  # fmt: skip


def test_a_row_whose_columns_count_the_whole_deployment_takes_its_spaces_workers() -> None:
    """``..._c32_tp36_ep1``: prefill and decode tp 36 and no worker counts, where the space runs
    one 4-GPU prefill worker and four 8-GPU decode workers (4 + 32); silicon then launches each
    side on its own worker's GPUs."""
    sweep = space({"conc-list": [8], "prefill": {"num-worker": 1, "tp": 4, "ep": 4, "dp-attn": False},
                   "decode": {"num-worker": 4, "tp": 8, "ep": 8, "dp-attn": False}},
                  name="dsr1-fp4-gb200-dynamo-trt", isl=1024, osl=1024, engine="trt")  # fmt: skip
    d = row(mode="disagg", backend="trtllm", isl="1024", osl="1024", batch_size="", tp_size="",
            prefill_tp_size="36", prefill_attention_dp_size="1", decode_tp_size="36", decode_attention_dp_size="1",
            silicon_data_source=row()["silicon_data_source"].split("; image=")[0])  # fmt: skip
    assert spec_mod.whole_deployment(sweep, d)
    assert not spec_mod.whole_deployment(sweep, {**d, "decode_tp_size": "32"})  # not the total
    assert not spec_mod.whole_deployment(sweep, {**d, "decode_num_workers": "4"})  # counts given
    harness = {"harness": "inferencex-multi-node-early", "concurrency": "32"}
    line = classify(d, harness, [Snapshot("c" * 40, T0, (sweep,))])
    assert line is not None and line["configs"] == "dsr1-fp4-gb200-dynamo-trt"
    assert [line[k] for k in ("prefill_workers", "decode_workers", "prefill_gpus", "decode_gpus")] == [
        "1",
        "4",
        "4",
        "8",
    ]
    assert [line[k] for k in ("prefill_dp_attn", "prefill_ep", "decode_dp_attn", "decode_ep")] == [
        "false",
        "4",
        "false",
        "8",
    ]
    h = {k: v for k, v in line.items() if v}
    groups = silicon.disagg_scenario_for(d, {**harness, **h}, {})["replicas"]
    assert [(g["count"], g["tp"], g.get("attention_dp"), g.get("moe_ep")) for g in groups] == [
        (1, 4, None, 4),
        (4, 8, None, 8),
    ]
    # A row whose columns give one worker's GPUs keeps the columns' match and no *_gpus.
    one = classify(
        {**d, "prefill_tp_size": "4", "decode_tp_size": "8"}, harness, [Snapshot("c" * 40, T0, (sweep,))]
    )
    assert one is not None and (one["prefill_gpus"], one["decode_gpus"]) == ("", "")


def test_silicon_runs_a_multi_node_side_as_launched() -> None:
    """`silicon.launched_layout`: a ``dep8`` decode worker, eight attention-DP ranks with the
    experts over EP 8, whatever split of its 8 GPUs the row's columns give."""
    d = row(mode="disagg", backend="trtllm", prefill_num_workers="1", decode_num_workers="2",
            prefill_tp_size="4", prefill_attention_dp_size="1", prefill_moe_tp_size="1", prefill_moe_ep_size="4",
            decode_tp_size="8", decode_attention_dp_size="1", decode_moe_tp_size="2", decode_moe_ep_size="4")  # fmt: skip
    h = {"concurrency": "64", "prefill_dp_attn": "true", "prefill_ep": "4", "decode_dp_attn": "true",
         "decode_ep": "8"}  # fmt: skip
    decode = silicon.launched_layout(d, h, "decode")
    assert [decode[f"decode_{k}"] for k in ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")] == [
        "1", "8", "1", "8"]  # fmt: skip
    tep = silicon.launched_layout(d, {**h, "decode_dp_attn": "false"}, "decode")
    assert [tep[f"decode_{k}"] for k in ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")] == [
        "8", "1", "1", "8"]  # fmt: skip
    assert silicon.launched_layout(d, {**h, "decode_ep": "3"}, "decode") == d  # 3 does not divide 8
    assert silicon.launched_layout(d, {"concurrency": "64"}, "decode") == d  # the record says nothing
    groups = silicon.disagg_scenario_for(d, h, {})["replicas"]
    assert [(g["tp"], g.get("attention_dp"), g.get("moe_tp"), g.get("moe_ep")) for g in groups] == [
        (1, 4, 1, 4), (1, 8, 1, 8)]  # fmt: skip
    assert groups[1]["engine"]["max_num_seqs"] == 32  # 64 clients over 2 decode workers
    # The recipe's batch caps each decode rank (``ctx1_gen2_dep8_batch4``: 2 x 8 x 4 = 64 slots).
    groups = silicon.disagg_scenario_for(d, {**h, "decode_batch": "4"}, {})["replicas"]
    assert groups[1]["engine"]["max_num_seqs"] == 4 and "max_num_seqs" not in groups[0]["engine"]


def test_silicon_drafts_on_mtp_rows_and_runs_the_ambiguous_ones_without(tmp_path: Path) -> None:
    r = row()
    harness_csv = tmp_path / "h.csv"
    harness_csv.write_text(f"id,harness,concurrency\n{r['id']},inferencex-single-node,4\n")
    spec_csv = tmp_path / "s.csv"
    spec_csv.write_text(f"id,spec_decoding,configs,commit\n{r['id']},mtp,dsr1-fp8-b200-sglang-mtp,abc\n")
    merged = silicon.harness_by_id(harness_csv, spec_csv)
    assert merged[r["id"]] == {"id": r["id"], "harness": "inferencex-single-node", "concurrency": "4",
                               "spec_decoding": "mtp"}  # fmt: skip
    assert silicon.harness_by_id(harness_csv, None)[r["id"]].get("spec_decoding") is None
    assert silicon.mtp_run(r, merged[r["id"]])
    assert not silicon.mtp_run(r, {**merged[r["id"]], "spec_decoding": "both"})
    assert silicon.mtp_run(r, {**merged[r["id"]], "spec_decoding": "both", "twin_run": "mtp"})
    assert not silicon.mtp_run(r, {**merged[r["id"]], "spec_decoding": "both", "twin_run": "plain"})
    assert not silicon.mtp_run(r, {**merged[r["id"]], "spec_decoding": "none"})
    engine = silicon.scenario_for(r, merged[r["id"]], {})["replicas"][0]["engine"]
    assert engine["speculative_config"]["method"] == "mtp"  # dsr1_fp8_b200_mtp.sh: 2 steps
    assert engine["speculative_config"]["num_speculative_tokens"] == 2
    # SGLang's drafts at its own acceptance (fitted on its H200 rows), TensorRT-LLM's at theirs.
    assert engine["speculative_config"]["acceptance_rate"] == silicon.SGLANG_MTP_ACCEPTANCE == 0.5
    assert silicon.mtp_acceptance({"backend": "trtllm"}) == silicon.MTP_ACCEPTANCE == 0.7
    both = silicon.scenario_for(r, {**merged[r["id"]], "spec_decoding": "both"}, {})
    assert "speculative_config" not in both["replicas"][0]["engine"]
    d = {**r, "mode": "disagg", "prefill_num_workers": "1", "decode_num_workers": "1", "prefill_tp_size": "8",
         "decode_tp_size": "8", "prefill_moe_tp_size": "8", "decode_moe_tp_size": "8"}  # fmt: skip
    with pytest.raises(
        ValueError, match=r"^unsupported: a disaggregated MTP speculative-decoding run whose recipe"
    ):
        silicon.disagg_scenario_for(d, merged[r["id"]], {})
    # With the recipe's draft length the decode workers draft; the prefill worker does not.
    groups = silicon.disagg_scenario_for(d, {**merged[r["id"]], "draft_tokens": "3"}, {})["replicas"]
    assert "speculative_config" not in groups[0]["engine"]
    assert groups[1]["engine"]["speculative_config"] == {
        "method": "mtp", "num_speculative_tokens": 3, "acceptance_rate": silicon.SGLANG_MTP_ACCEPTANCE}  # fmt: skip
    # Worker counts the row leaves empty come from the configuration; the row's own win.
    empty = {**d, "prefill_num_workers": "", "decode_num_workers": ""}
    plain = {**merged[r["id"]], "spec_decoding": "none"}
    with pytest.raises(ValueError, match=r"^unsupported: the row has no prefill_num_workers or decode_num"):
        silicon.disagg_scenario_for(empty, plain, {})
    counts = {**plain, "prefill_workers": "2", "decode_workers": "3"}
    groups = silicon.disagg_scenario_for(empty, counts, {})["replicas"]
    assert (groups[0]["count"], groups[1]["count"]) == (2, 3)
    groups = silicon.disagg_scenario_for(d, counts, {})["replicas"]
    assert (groups[0]["count"], groups[1]["count"]) == (1, 1)


def test_a_copy_of_an_inferencex_row_runs_as_that_row(tmp_path: Path) -> None:
    twin = row()
    copy = {
        **twin,
        "id": "gap_copy",
        "attention_dp_size": "",
        "silicon_data_source": "source_file=x-gap-analysis.csv",
    }
    harness_csv = tmp_path / "h.csv"
    harness_csv.write_text(
        f"id,harness,concurrency,copy_of\n{twin['id']},inferencex-single-node,4,\n"
        f"gap_copy,inferencex-single-node,4,{twin['id']}\n"
    )
    spec_csv = tmp_path / "s.csv"
    spec_csv.write_text(f"id,spec_decoding,configs,commit\n{twin['id']},mtp,dsr1-fp8-b200-sglang-mtp,abc\n")
    merged = silicon.harness_by_id(harness_csv, spec_csv)
    assert merged["gap_copy"]["spec_decoding"] == "mtp"  # the twin's configuration
    by_id = {twin["id"]: twin, "gap_copy": copy}
    assert silicon.as_run(copy, merged["gap_copy"], by_id) == {**twin, "id": "gap_copy"}
    assert silicon.as_run(twin, merged[twin["id"]], by_id) is twin
    assert silicon.as_run(copy, merged["gap_copy"], {"gap_copy": copy}) is copy  # no twin: itself


def test_the_committed_harness_runs_the_gap_files_as_their_inferencex_twins() -> None:
    harness = silicon.harness_by_id(silicon.HARNESS, None)
    copied = {rid: h["copy_of"] for rid, h in harness.items() if h.get("copy_of")}
    assert len(copied) == 123  # every row of qwen3.5-397b- and kimi-k2.5-gap-analysis.csv
    assert all("gap_analysis" in rid and "gap_analysis" not in twin for rid, twin in copied.items())
    assert all(harness[rid]["harness"] == harness[twin]["harness"] == "inferencex-single-node"
               for rid, twin in copied.items())  # fmt: skip


@pytest.mark.skipif(package_tables_root() is None, reason="aiconfigurator-core is not installed")
def test_the_committed_classification_covers_the_known_mtp_runs() -> None:
    """The TensorRT-LLM B200 1.2.0rc6.post3 rows (dsr1_fp8_b200_trt_mtp.sh, InferenceX #632/#642)
    are MTP by the configuration file too; the classification names only rows of the sample."""
    rows = {r["id"]: r for r in silicon.read_csv(silicon.default_rows())}
    harness = silicon.harness_by_id(silicon.HARNESS)
    lines = silicon.read_csv(silicon.SPEC_DECODING)
    assert {line["spec_decoding"] for line in lines} <= {"mtp", "both", "none", "unmatched"}
    assert all(line["id"] in rows for line in lines)
    post3 = [
        i
        for i, r in rows.items()
        if i in harness and silicon.mtp_run(r, {**harness[i], "spec_decoding": "", "twin_run": ""})
    ]
    assert len(post3) >= 80
    # A ``dep8`` decode worker (recipe ctx1_gen2_dep8_batch768_eplb0_mtp2_1600.yaml) whose columns
    # say tp 8: it runs as eight attention-DP ranks.
    dep8 = harness["2026_03_25_deepseek_r1_b200_sxm_trtllm_fp8_disagg_1024x1024_c1600_tp8_0_ep8_0_355"]
    assert (dep8["decode_dp_attn"], dep8["decode_ep"], dep8["decode_workers"]) == ("true", "8", "2")
    assert all(harness[i].get("spec_decoding") == "mtp" for i in post3)
    # A ``both`` point's two runs (DeepSeek-R1 SGLang B200 1k/1k, 4 clients): TPOT 6.70 ms drafted.
    pair = "2026_03_25_deepseek_r1_b200_sxm_sglang_fp8_agg_1024x1024_c4_tp8_0_ep1_0_{}"
    assert (harness[pair.format(265)]["twin_run"], harness[pair.format(284)]["twin_run"]) == ("mtp", "plain")
    twins = [line["twin_run"] for line in lines if line["twin_run"]]
    assert all(line["spec_decoding"] == "both" for line in lines if line["twin_run"])
    # 241 rows without a twin: 53 repeat a decided run (taken for it), 188 are taken for MTP runs.
    assert (twins.count("mtp"), twins.count("plain")) == (146 + 188, 156 + 53)
