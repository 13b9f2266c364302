"""Compare two step records of one workload: identical, or where they first part.

Steps are aligned by index (both sides start at step 0 and run the same step clock) and
compared on `fixtures.COMPARED_STEP_FIELDS`: the step's clock value, the tokens
scheduled per request in scheduling order, the preempted ids in order, the finished ids
and the free blocks right after scheduling. Requests are compared on
`fixtures.COMPARED_REQUEST_FIELDS`. The running / waiting queues are shown in a
divergence report but not compared (a queue difference shows up in a later decision).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvsim.validation.fixtures import COMPARED_REQUEST_FIELDS, COMPARED_STEP_FIELDS

#: Labels of the two sides in reports.
REFERENCE, CANDIDATE = "vLLM", "kvsim"


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first step at which the two records part."""

    index: int
    fields: tuple[str, ...]
    reference: Mapping[str, Any] | None
    candidate: Mapping[str, Any] | None
    previous: Mapping[str, Any] | None = None

    @property
    def step(self) -> int:
        side = self.reference or self.candidate
        return int(side["step"]) if side else self.index


@dataclass(frozen=True, slots=True)
class Comparison:
    """Outcome for one workload."""

    name: str
    num_steps: int  # max of both sides' step counts
    steps_identical: int
    num_requests: int
    requests_identical: int
    divergence: Divergence | None
    request_diffs: tuple[tuple[int, str, Any, Any], ...] = ()
    stalled: tuple[bool, bool] = (False, False)
    group: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return self.divergence is None and not self.request_diffs and self.stalled[0] == self.stalled[1]

    def reason(self) -> str:
        """One line: where the records part (for a test's xfail reason)."""
        if self.identical:
            return f"{self.name}: identical ({self.num_steps} steps)"
        parts = [f"{self.name}:"]
        d = self.divergence
        if d is not None:
            parts.append(f"first divergence at step {d.step} ({', '.join(d.fields)}):")
            parts.append(f"{REFERENCE} {_brief(d.reference)} vs {CANDIDATE} {_brief(d.candidate)};")
        if self.request_diffs:
            rid, f, a, b = self.request_diffs[0]
            parts.append(
                f"{len(self.request_diffs)} request field(s) differ, e.g. request {rid} {f} {a} vs {b}"
            )
        if self.stalled[0] != self.stalled[1]:
            parts.append(f"stalled {self.stalled[0]} vs {self.stalled[1]}")
        return " ".join(parts)


def _brief(s: Mapping[str, Any] | None) -> str:
    if s is None:
        return "(no step)"
    return f"sched={s['sched']} preempted={s['preempted']} finished={s['finished']} free={s['free']}"


def compare_records(
    name: str, reference: Mapping[str, Any], candidate: Mapping[str, Any], *, group: str = ""
) -> Comparison:
    """Compare ``candidate`` (kvsim) against ``reference`` (vLLM)."""
    ref_steps: Sequence[Mapping[str, Any]] = reference["steps"]
    cand_steps: Sequence[Mapping[str, Any]] = candidate["steps"]
    n = max(len(ref_steps), len(cand_steps))
    same = 0
    divergence: Divergence | None = None
    for i in range(n):
        a = ref_steps[i] if i < len(ref_steps) else None
        b = cand_steps[i] if i < len(cand_steps) else None
        if a is not None and b is not None:
            diff = tuple(f for f in COMPARED_STEP_FIELDS if a[f] != b[f])
        else:
            diff = ("missing step",)
        if not diff:
            same += 1
        elif divergence is None:
            prev = ref_steps[i - 1] if 0 < i <= len(ref_steps) else None
            divergence = Divergence(i, diff, a, b, prev)
    ref_reqs: Mapping[int, Mapping[str, Any]] = reference["requests"]
    cand_reqs: Mapping[int, Mapping[str, Any]] = candidate["requests"]
    ids = sorted(set(ref_reqs) | set(cand_reqs))
    diffs: list[tuple[int, str, Any, Any]] = []
    same_reqs = 0
    for rid in ids:
        a_r, b_r = ref_reqs.get(rid), cand_reqs.get(rid)
        if a_r is None or b_r is None:
            diffs.append((rid, "present", a_r is not None, b_r is not None))
            continue
        d = [(rid, f, a_r[f], b_r[f]) for f in COMPARED_REQUEST_FIELDS if a_r[f] != b_r[f]]
        if d:
            diffs.extend(d)
        else:
            same_reqs += 1
    return Comparison(
        name=name,
        num_steps=n,
        steps_identical=same,
        num_requests=len(ids),
        requests_identical=same_reqs,
        divergence=divergence,
        request_diffs=tuple(diffs),
        stalled=(bool(reference.get("stalled")), bool(candidate.get("stalled"))),
        group=group,
    )


def totals(comparisons: Iterable[Comparison]) -> dict[str, Any]:
    """Workloads, requests and steps identical, over all comparisons and per group."""
    comps = list(comparisons)

    def tally(cs: list[Comparison]) -> dict[str, int]:
        return {
            "workloads": len(cs),
            "workloads_identical": sum(c.identical for c in cs),
            "requests": sum(c.num_requests for c in cs),
            "requests_identical": sum(c.requests_identical for c in cs),
            "steps": sum(c.num_steps for c in cs),
            "steps_identical": sum(c.steps_identical for c in cs),
        }

    groups: dict[str, list[Comparison]] = {}
    for c in comps:
        groups.setdefault(c.group or "-", []).append(c)
    return {**tally(comps), "groups": {g: tally(cs) for g, cs in groups.items()}}


def _pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


def format_totals(t: Mapping[str, Any]) -> str:
    lines = [
        f"workloads identical: {t['workloads_identical']} / {t['workloads']}",
        f"requests identical:  {t['requests_identical']} / {t['requests']} ({_pct(t['requests_identical'], t['requests'])})",
        f"steps identical:     {t['steps_identical']} / {t['steps']} ({_pct(t['steps_identical'], t['steps'])})",
    ]
    if len(t.get("groups", {})) > 1:
        lines.append("")
        lines.append(f"{'group':<16} {'workloads':>11} {'requests':>9} {'steps':>9}")
        for g, s in sorted(t["groups"].items()):
            lines.append(
                f"{g:<16} {s['workloads_identical']:>5}/{s['workloads']:<5} "
                f"{_pct(s['requests_identical'], s['requests']):>9} {_pct(s['steps_identical'], s['steps']):>9}"
            )
    return "\n".join(lines)


def format_divergence(c: Comparison, *, max_request_diffs: int = 8) -> str:
    """A multi-line report of where ``c``'s records part, with both sides' queues."""
    if c.identical:
        return f"{c.name}: identical, {c.num_steps} steps, {c.num_requests} requests"
    out = [
        f"{c.name}: differs; {c.steps_identical}/{c.num_steps} steps and "
        f"{c.requests_identical}/{c.num_requests} requests identical"
    ]
    d = c.divergence
    if d is not None:
        out.append(f"  first diverging step: {d.step} (index {d.index}), differing: {', '.join(d.fields)}")
        if d.previous is not None:
            out.append(
                f"  step before ({REFERENCE}): running={d.previous['running']} waiting={d.previous['waiting']}"
            )
        for label, s in ((REFERENCE, d.reference), (CANDIDATE, d.candidate)):
            if s is None:
                out.append(f"  {label:>5}: no such step")
                continue
            out.append(
                f"  {label:>5}: sched={s['sched']} preempted={s['preempted']} finished={s['finished']} "
                f"free={s['free']}"
            )
            out.append(f"  {'':>5}  running={s['running']} waiting={s['waiting']}")
    for rid, f, a, b in c.request_diffs[:max_request_diffs]:
        out.append(f"  request {rid}: {f} {REFERENCE}={a} {CANDIDATE}={b}")
    if len(c.request_diffs) > max_request_diffs:
        out.append(f"  ... {len(c.request_diffs) - max_request_diffs} more request field differences")
    if c.stalled[0] != c.stalled[1]:
        out.append(f"  stalled: {REFERENCE}={c.stalled[0]} {CANDIDATE}={c.stalled[1]}")
    return "\n".join(out)
