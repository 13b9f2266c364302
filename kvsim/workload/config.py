"""Scenario configuration of the workload: arrivals, lengths and prefix structure."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PoissonArrivals(_Frozen):
    """Exponential inter-arrival times at a constant rate."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = Field(gt=0, description="Mean arrival rate, requests per second.")


# More arrival processes join this union as a tagged union on `kind`.
ArrivalConfig = PoissonArrivals


class FixedLength(_Frozen):
    """Every request has the same number of tokens."""

    kind: Literal["fixed"] = "fixed"
    tokens: int = Field(ge=1, description="Number of tokens.")


class LognormalLength(_Frozen):
    """Lognormal token counts with a given mean and coefficient of variation, rounded and clipped."""

    kind: Literal["lognormal"] = "lognormal"
    mean_tokens: float = Field(gt=0, description="Mean number of tokens before clipping.")
    cv: float = Field(default=1.0, gt=0, description="Coefficient of variation (std / mean).")
    min_tokens: int = Field(default=1, ge=1, description="Lower clip.")
    max_tokens: int | None = Field(default=None, ge=1, description="Upper clip (None: no clip).")

    @model_validator(mode="after")
    def _check(self) -> LognormalLength:
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError("max_tokens must be >= min_tokens")
        return self

    @property
    def sigma(self) -> float:
        return math.sqrt(math.log1p(self.cv**2))

    @property
    def mu(self) -> float:
        return math.log(self.mean_tokens) - self.sigma**2 / 2


LengthConfig = Annotated[FixedLength | LognormalLength, Field(discriminator="kind")]


class SyntheticWorkload(_Frozen):
    """Requests drawn from distributions, optionally sharing one system prompt."""

    kind: Literal["synthetic"] = "synthetic"
    num_requests: int = Field(default=1000, ge=1, description="Number of requests to generate.")
    arrival: ArrivalConfig = Field(
        default_factory=lambda: PoissonArrivals(rate_per_s=4.0), description="Arrival process."
    )
    prompt_tokens: LengthConfig = Field(
        default_factory=lambda: LognormalLength(mean_tokens=1024, cv=1.0, max_tokens=8192),
        description="Prompt length distribution (excluding the shared system prompt).",
    )
    output_tokens: LengthConfig = Field(
        default_factory=lambda: LognormalLength(mean_tokens=256, cv=1.0, max_tokens=2048),
        description="Output length distribution (known to the simulator, not to the scheduler).",
    )
    shared_prefix_tokens: int = Field(
        default=0, ge=0, description="Length of a system prompt shared by every request (0: none)."
    )
    tenant: str = Field(default="default", description="Tenant of every request (cache salt).")


# Trace replay joins this as a tagged union on `kind`.
WorkloadConfig = SyntheticWorkload
