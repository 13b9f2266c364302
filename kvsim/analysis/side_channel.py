"""The prefix-cache timing side channel measured as an attacker would exploit it.

An attacker tenant wants to know whether a victim tenant sent a given prompt prefix (a
system prompt, a document). It sends the prefix itself, once (a *probe*: its own first use,
so its own cache entries cannot answer), and times its first token. With a cache shared
between tenants, a prefix the victim sent recently is still cached and the probe's prefill
is short; with per-tenant caches the probe always recomputes. The attacker:

    probes (in arrival order)   p0  p1  p2  p3  p4  p5 ...
    secret: victim sent it?     1   0   1   1   0   0        (the ground truth, from the workload)
    attacker's TTFT (ms)        8   54  9   61  52  50
    train (even) / test (odd)   T   t   T   t   T   t
    threshold on the train half: guess "sent" when TTFT < x, x maximising balanced accuracy
    report on the test half:    accuracy, balanced accuracy (chance: 0.5), majority-class chance

plus the two-sample Kolmogorov-Smirnov statistic of the probes' TTFTs, sent vs not sent (0:
identical distributions; 1: a threshold separates them perfectly) and its asymptotic p-value.
A probe whose victim-sent prefix was evicted before it arrived counts as an attacker error:
that is what the attacker would see. Isolation (``cache_isolation: tenant``) must bring the
balanced accuracy to 0.5 within noise and the KS statistic below its 5% critical value.

`cross_tenant_exposure` is the passive view of the same channel, from any run's tables: the
requests that send a prefix their tenant never sent before, and whether they hit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from kvsim.analysis.spikes import PREFIX_HIT_TOKENS, column
from kvsim.request import RequestSpec


def probes(
    requests: pd.DataFrame, specs: Sequence[RequestSpec], *, attacker: str, victim: str
) -> pd.DataFrame:
    """The attacker's first uses of each prefix, with the secret and what it measured.

    The prefix is the prompt's first segment. Columns: request_id, arrival_s, ttft_s,
    victim_sent (the victim's request with that prefix arrived earlier), hit (the probe hit
    the prefix cache). Probes that never got a first token are left out.
    """
    first = {s.request_id: s.prompt[0].content_id for s in specs}
    df = requests[["request_id", "tenant", "arrival_s", "ttft_s", "prefix_cache_hits_tokens"]]
    df = df.sort_values(["arrival_s", "request_id"], kind="stable")
    victim_seen: set[int] = set()
    attacker_seen: set[int] = set()
    rows = []
    for rid, tenant, arrival, ttft, hits in df.itertuples(index=False):
        prefix = first[int(rid)]
        if tenant == victim:
            victim_seen.add(prefix)
        elif tenant == attacker and prefix not in attacker_seen:
            attacker_seen.add(prefix)
            if not math.isnan(ttft):
                rows.append((int(rid), float(arrival), float(ttft), prefix in victim_seen, hits > 0))
    cols = ["request_id", "arrival_s", "ttft_s", "victim_sent", "hit"]
    return pd.DataFrame(rows, columns=cols)


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    if not len(a) or not len(b):
        return math.nan
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / len(a)
    cdf_b = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def ks_p_value(statistic: float, n: int, m: int) -> float:
    """Asymptotic two-sided p-value of a KS statistic for samples of sizes n and m.

    Kolmogorov's distribution, Q(lambda) = 2 sum_k (-1)^(k-1) exp(-2 k^2 lambda^2), at
    lambda = (sqrt(ne) + 0.12 + 0.11 / sqrt(ne)) D with ne = n m / (n + m) (Stephens'
    small-sample correction, as in Numerical Recipes' ``probks``).
    """
    if math.isnan(statistic) or n == 0 or m == 0:
        return math.nan
    ne = n * m / (n + m)
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * statistic
    if lam < 1e-3:
        return 1.0
    total = sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return float(min(max(2 * total, 0.0), 1.0))


def ks_critical_value(n: int, m: int, alpha: float = 0.05) -> float:
    """The KS statistic above which two samples of sizes n, m differ at level ``alpha``."""
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


@dataclass(frozen=True)
class AttackerReport:
    """What the attacker achieves (test half) and how far apart the two TTFT samples lie."""

    num_probes: int
    num_test: int
    victim_sent_rate: float
    probe_hit_rate: float
    threshold_s: float
    accuracy: float
    balanced_accuracy: float
    chance_accuracy: float
    ks_statistic: float
    ks_p_value: float
    ks_critical_value: float

    @property
    def noise(self) -> float:
        """Two standard errors of a balanced accuracy of 0.5 on the test half (chance's spread)."""
        return 2 * 0.5 / math.sqrt(self.num_test) if self.num_test else math.nan

    def summary(self, prefix: str = "side_channel_") -> dict[str, Any]:
        out = {f"{prefix}{k}": v for k, v in self.__dict__.items()}
        out[f"{prefix}noise"] = self.noise
        return out


def _balanced(pred: np.ndarray, truth: np.ndarray) -> float:
    pos, neg = truth, ~truth
    tpr = (pred & pos).sum() / pos.sum() if pos.any() else math.nan
    tnr = (~pred & neg).sum() / neg.sum() if neg.any() else math.nan
    return float(np.nanmean([tpr, tnr]))


def best_threshold(ttft: np.ndarray, truth: np.ndarray) -> float:
    """The TTFT below which guessing "victim sent it" has the best balanced accuracy."""
    values = np.unique(ttft)
    candidates = np.concatenate([[values[0] - 1.0], (values[1:] + values[:-1]) / 2, [values[-1] + 1.0]])
    scores = [_balanced(ttft < c, truth) for c in candidates]
    return float(candidates[int(np.nanargmax(scores))])


def attacker_report(probe_table: pd.DataFrame) -> AttackerReport:
    """Train a threshold on the even-indexed probes, measure it on the odd ones; KS on all."""
    ttft = probe_table["ttft_s"].to_numpy(dtype=float)
    truth = probe_table["victim_sent"].to_numpy(dtype=bool)
    n = len(ttft)
    train, test = np.arange(n) % 2 == 0, np.arange(n) % 2 == 1
    if n < 4 or truth[train].all() or not truth[train].any():
        threshold = math.nan
        accuracy = balanced = math.nan
    else:
        threshold = best_threshold(ttft[train], truth[train])
        pred = ttft[test] < threshold
        accuracy = float((pred == truth[test]).mean())
        balanced = _balanced(pred, truth[test])
    sent, unsent = ttft[truth], ttft[~truth]
    stat = ks_statistic(sent, unsent)
    base = float(truth[test].mean()) if test.any() else math.nan
    return AttackerReport(
        num_probes=n,
        num_test=int(test.sum()),
        victim_sent_rate=float(truth.mean()) if n else math.nan,
        probe_hit_rate=float(probe_table["hit"].mean()) if n else math.nan,
        threshold_s=threshold,
        accuracy=accuracy,
        balanced_accuracy=balanced,
        chance_accuracy=max(base, 1 - base),
        ks_statistic=stat,
        ks_p_value=ks_p_value(stat, len(sent), len(unsent)),
        ks_critical_value=ks_critical_value(len(sent), len(unsent))
        if len(sent) and len(unsent)
        else math.nan,
    )


def side_channel_summary(
    requests: pd.DataFrame, specs: Sequence[RequestSpec], *, attacker: str, victim: str
) -> dict[str, Any]:
    """The ``side_channel_*`` summary keys of a run (see docs/results.md)."""
    return attacker_report(probes(requests, specs, attacker=attacker, victim=victim)).summary()


def cross_tenant_exposure(requests: pd.DataFrame, specs: Sequence[RequestSpec]) -> pd.DataFrame:
    """Requests that send a prompt prefix their tenant never sent before, and whether they hit.

    Such a request can only hit the prefix cache on blocks another tenant put there, and a
    hit shows in its TTFT: the timing side channel of a cache shared between tenants. The
    prefix is the prompt's first segment (a system prompt, a document, a session's start).
    With ``cache_isolation: tenant`` none of these requests hits. Columns: request_id,
    tenant, arrival_s, hit, ttft_s; only first uses that were admitted.
    """
    first = {s.request_id: s.prompt[0].content_id for s in specs}
    df = (
        requests[["request_id", "tenant", "arrival_s", "ttft_s"]]
        .assign(hit_tokens=column(requests, PREFIX_HIT_TOKENS))
        .dropna(subset=["ttft_s"])
    )
    df = df.sort_values(["arrival_s", "request_id"], kind="stable")
    seen: set[tuple[str, int]] = set()
    keep = []
    for rid, tenant in zip(df["request_id"], df["tenant"], strict=True):
        key = (tenant, first[int(rid)])
        keep.append(key not in seen)
        seen.add(key)
    out = df[np.asarray(keep, dtype=bool)].copy()
    out["hit"] = out["hit_tokens"] > 0
    return out[["request_id", "tenant", "arrival_s", "hit", "ttft_s"]].reset_index(drop=True)


def exposure_summary(exposure: pd.DataFrame) -> dict[str, Any]:
    """How often first uses hit, and how far apart hit and miss TTFTs lie (medians, seconds)."""
    hits, misses = exposure[exposure["hit"]], exposure[~exposure["hit"]]
    return {
        "first_uses": len(exposure),
        "first_use_hit_rate": float(exposure["hit"].mean()) if len(exposure) else float("nan"),
        "ttft_p50_hit_s": float(hits["ttft_s"].median()) if len(hits) else float("nan"),
        "ttft_p50_miss_s": float(misses["ttft_s"].median()) if len(misses) else float("nan"),
    }
