"""`kvsim.planning.pricing`: cost and energy of a run, checked by hand on two requests; price tables."""

from __future__ import annotations

import pytest

import kvsim
from kvsim.planning.pricing import (
    GroupUsage,
    PriceError,
    PriceTable,
    Usage,
    default_prices,
    load_prices,
    price_usage,
    usage_of,
)
from kvsim.request import RequestSpec, Segment


def two_requests() -> kvsim.Result:
    """One H100 at 0.1 s per step. Request 0 (t=0): a 96-token prompt, 3 output tokens;
    request 1 (t=10 s): the same prompt, 2 output tokens, which finds 80 of its tokens (5
    whole blocks; the last token is always computed) in the prefix cache.

        t 0.0  prefill 96      t 10.0  prefill 16
        t 0.1  decode 1        t 10.1  decode 1      -> ends at 10.2 s
        t 0.2  decode 1
    """
    specs = [RequestSpec(0, 0.0, (Segment(7, 96),), 3), RequestSpec(1, 10.0, (Segment(7, 96),), 2)]
    return kvsim.run(
        None, overrides=["replicas.0.cost_model={kind: constant, step_time_s: 0.1}"], requests=specs
    )


def table(**extra: object) -> PriceTable:
    return PriceTable.model_validate(
        {"label": "test", "gpus": {"h100-sxm": {"usd_per_gpu_hour": 3.6, "board_power_w": 700}}, **extra}
    )


def test_usage_of_two_requests() -> None:
    usage = usage_of(two_requests())
    assert usage.span_s == pytest.approx(10.2)
    (g,) = usage.groups
    assert (g.gpu, g.tp, g.replicas) == ("h100-sxm", 1, 1)
    assert g.gpu_seconds == pytest.approx(10.2)
    assert g.busy_prefill_gpu_s == pytest.approx(0.2)  # two prefill steps
    assert g.busy_decode_gpu_s == pytest.approx(0.3)  # three decode steps
    # Computed prompt tokens 96 + 16, cached 80, output 3 + 2.
    assert (usage.input_tokens, usage.cached_input_tokens, usage.output_tokens) == (112, 80, 5)


def test_cost_per_million_tokens_by_hand() -> None:
    usage = usage_of(two_requests())
    cost = price_usage(usage, table())
    # 10.2 GPU-seconds at $3.60 per GPU-hour: $0.0102. The GPU was busy 0.5 s, 0.2 s of it on
    # prompt tokens: the prompt carries 0.4 of the cost ($0.00408), the output 0.6 ($0.00612).
    assert cost.usd_per_hour == pytest.approx(3.6)
    assert cost.gpu_hours == pytest.approx(10.2 / 3600)
    assert cost.usd_total == pytest.approx(0.0102)
    assert cost.usd_per_m_input == pytest.approx(0.00408 / 112 * 1e6)  # $36.43
    assert cost.usd_per_m_cached_input == 0.0  # a hit computes nothing (weight 0)
    assert cost.usd_per_m_output == pytest.approx(0.00612 / 5 * 1e6)  # $1,224
    assert cost.usd_per_m_tokens == pytest.approx(0.0102 / 197 * 1e6)
    assert cost.busy_share == pytest.approx(0.5 / 10.2)
    # Every dollar is carried by some token.
    carried = (cost.usd_per_m_input * 112 + cost.usd_per_m_output * 5) / 1e6
    assert carried == pytest.approx(cost.usd_total)


def test_a_cached_token_weight_moves_part_of_the_prompt_cost_to_cached_input() -> None:
    cost = price_usage(usage_of(two_requests()), table(cached_input_weight=0.5))
    # 112 computed + 0.5 x 80 cached = 152 weighted prompt tokens share $0.00408.
    assert cost.usd_per_m_input == pytest.approx(0.00408 * 112 / 152 / 112 * 1e6)
    assert cost.usd_per_m_cached_input == pytest.approx(0.00408 * 40 / 152 / 80 * 1e6)
    assert cost.usd_per_m_cached_input == pytest.approx(0.5 * cost.usd_per_m_input)
    assert cost.usd_per_m_output == pytest.approx(0.00612 / 5 * 1e6)


def test_energy_by_hand() -> None:
    cost = price_usage(usage_of(two_requests()), table())
    # 700 W x (0.82 x 0.2 s prefill + 0.39 x 0.3 s decode + 0.24 x 9.7 s idle) = 1,826.3 J.
    assert cost.energy_j == pytest.approx(700 * (0.82 * 0.2 + 0.39 * 0.3 + 0.24 * 9.7))
    assert cost.energy_j_per_token == pytest.approx(cost.energy_j / 197)
    assert cost.energy_j_per_output_token == pytest.approx(cost.energy_j / 5)
    assert cost.mean_power_w == pytest.approx(cost.energy_j / 10.2)


def test_groups_are_charged_each_at_their_gpu_price() -> None:
    usage = Usage(
        span_s=3600.0,
        groups=(
            GroupUsage("h100-sxm", 2, 1, 7200.0, busy_prefill_gpu_s=3600.0, busy_decode_gpu_s=0.0),  # prefill
            GroupUsage("h200", 1, 2, 7200.0, busy_prefill_gpu_s=0.0, busy_decode_gpu_s=3600.0),  # decode
        ),
        input_tokens=1_000_000,
        cached_input_tokens=0,
        output_tokens=100_000,
    )
    prices = PriceTable.model_validate(
        {"label": "t", "gpus": {"h100_sxm": {"usd_per_gpu_hour": 2.0}, "H200": {"usd_per_gpu_hour": 3.0}}}
    )
    cost = price_usage(usage, prices)
    assert cost.num_gpus == 4 and cost.usd_per_hour == pytest.approx(2 * 2.0 + 2 * 3.0)
    assert cost.usd_per_m_input == pytest.approx(4.0)  # the prefill group's $4 over 1 M tokens
    assert cost.usd_per_m_output == pytest.approx(60.0)  # the decode group's $6 over 0.1 M tokens
    # Board power from the shipped table (h100-sxm and h200: 700 W), none in this one.
    assert cost.energy_j == pytest.approx(
        700 * (0.82 * 3600 + 0.24 * 3600) + 700 * (0.39 * 3600 + 0.24 * 3600)
    )


def test_the_shipped_table_is_labelled_dated_and_complete() -> None:
    prices = default_prices()
    assert "not a quote" in prices.label and prices.date == "2026-09-20"
    assert "coreweave.com/pricing" in prices.source
    assert prices.price("h100-sxm") == pytest.approx(49.24 / 8)
    assert prices.price("h200") == pytest.approx(50.44 / 8)
    assert prices.price("b200") == pytest.approx(68.80 / 8)
    for gpu in prices.gpus:
        assert prices.power_w(gpu) is not None
    assert prices.power_w("l4") == 72 and prices.power_w("rtx-4090") is None
    assert prices.cached_input_weight == 0.0


def test_bad_price_tables_name_the_file_and_the_field(tmp_path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(
        "label: mine\ngpus:\n  h100-sxm: {usd_per_gpu_hour: -1}\n  nosuchgpu: {usd_per_gpu_hour: 1}\n"
    )
    with pytest.raises(PriceError) as err:
        load_prices(bad)
    text = str(err.value)
    assert text.startswith(f"{bad}: invalid price table")
    assert "gpus.h100-sxm.usd_per_gpu_hour: Input should be greater than 0" in text
    bad.write_text("label: mine\ngpus:\n  nosuchgpu: {usd_per_gpu_hour: 1}\n")
    with pytest.raises(PriceError, match="unknown GPU preset 'nosuchgpu'"):
        load_prices(bad)
    bad.write_text("- a list\n")
    with pytest.raises(PriceError, match="must be a mapping"):
        load_prices(bad)
    mine = tmp_path / "mine.yaml"
    mine.write_text("label: mine\ngpus:\n  h100-sxm: {usd_per_gpu_hour: 2.5}\n")
    with pytest.raises(PriceError, match=r"the price table \(mine\) has no price for GPU 'b200'"):
        load_prices(mine).price("b200")
