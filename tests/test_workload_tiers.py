"""Retention flows from workload, tenants and trace columns into requests; mixture workloads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvsim.errors import TraceError
from kvsim.request import DEFAULT_RETENTION, Retention
from kvsim.workload import generate_requests, generate_workload
from kvsim.workload.config import MixtureWorkload, SyntheticWorkload, TraceWorkload
from kvsim.workload.mixture import COMPONENT_ID_STRIDE


def test_retention_from_the_workload_and_its_tenants() -> None:
    cfg = SyntheticWorkload.model_validate(
        {
            "num_requests": 40,
            "retention": {"kind": "priority", "priority": 80, "duration_s": 30},
            "tenants": [{"name": "chat"}, {"name": "classifier", "retention": "none"}],
        }
    )
    reqs = generate_requests(cfg, np.random.default_rng(0))
    by_tenant = {r.tenant: r.retention for r in reqs}
    assert by_tenant == {"chat": Retention("priority", 80, 30.0), "classifier": Retention("none")}
    plain = generate_requests(SyntheticWorkload(num_requests=3), np.random.default_rng(0))
    assert all(r.retention is DEFAULT_RETENTION for r in plain)


def test_retention_values_are_checked() -> None:
    with pytest.raises(ValueError, match="less than or equal to 100"):
        SyntheticWorkload.model_validate({"retention": {"kind": "priority", "priority": 101}})
    with pytest.raises(ValueError):
        SyntheticWorkload.model_validate({"retention": {"kind": "priority", "duration_s": float("inf")}})
    with pytest.raises(ValueError, match="expected none, default"):
        Retention.parse("keep")
    assert Retention.parse("priority:90:12.5") == Retention("priority", 90, 12.5)
    assert Retention.parse(" NONE ") == Retention("none")


def test_retention_trace_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("t,p,o,r\n0,100,5,none\n1,100,5,priority:70:10\n2,100,5,default\n")
    cols = {"timestamp": "t", "prompt_tokens": "p", "output_tokens": "o", "retention": "r"}
    reqs = generate_requests(
        TraceWorkload(path=str(path), format="csv", columns=cols), np.random.default_rng(0)
    )
    assert [r.retention for r in reqs] == [
        Retention("none"),
        Retention("priority", 70, 10.0),
        DEFAULT_RETENTION,
    ]
    path.write_text("t,p,o,r\n0,100,5,forever\n")
    with pytest.raises(TraceError, match="line 2: retention 'forever'"):
        generate_requests(TraceWorkload(path=str(path), format="csv", columns=cols), np.random.default_rng(0))


def test_mixture_merges_components_by_arrival_and_keeps_their_content_apart() -> None:
    chat = {
        "num_requests": 30,
        "tenant": "chat",
        "sessions": {"turns": {"kind": "fixed", "tokens": 3}, "think_time_s": 1.0},
        "shared_prefix_tokens": 64,
    }
    clf = {"num_requests": 20, "tenant": "classifier", "retention": "none", "shared_prefix_tokens": 64}
    cfg = MixtureWorkload.model_validate({"kind": "mixture", "components": [chat, clf]})
    w = generate_workload(cfg, np.random.default_rng(5))
    reqs = w.requests
    assert w.info.kind == "mixture" and len(reqs) == 50
    assert [r.request_id for r in reqs] == list(range(50))
    assert [r.arrival_s for r in reqs] == sorted(r.arrival_s for r in reqs)
    chat_reqs = [r for r in reqs if r.tenant == "chat"]
    clf_reqs = [r for r in reqs if r.tenant == "classifier"]
    # Both have a shared 64-token prefix, content id 0 in each component: kept apart.
    assert {r.prompt[0].content_id for r in chat_reqs} == {0}
    assert {r.prompt[0].content_id for r in clf_reqs} == {COMPONENT_ID_STRIDE}
    assert all(r.retention == Retention("none") for r in clf_reqs)
    # A follow-up turn names its (renumbered) parent and re-sends its output segment.
    by_id = {r.request_id: r for r in reqs}
    follow = [r for r in chat_reqs if r.parent_id is not None]
    assert follow
    for r in follow:
        parent = by_id[r.parent_id]
        assert parent.tenant == "chat" and parent.output_segment in r.prompt
    # The same seed draws the same mixture; the first component alone draws what it drew alone.
    again = generate_requests(cfg, np.random.default_rng(5))
    assert again == reqs
