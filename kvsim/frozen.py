"""The base class of every scenario schema model (scenario, engine, workload, cost, specs).

Frozen, unknown keys refused, floats finite (NaN and infinities refused: every float field
also has a finite bound, which ``kvsim schema`` shows), strings bounded like YAML scalars,
and integral floats too large for int64 (``1e30`` for a token count) handed to the field's
own bound as exact ints, so that the error names the bound rather than a parse failure.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from kvsim.limits import MAX_YAML_SCALAR_CHARS, exact_int_if_huge


class FrozenModel(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, str_max_length=MAX_YAML_SCALAR_CHARS
    )

    @model_validator(mode="before")
    @classmethod
    def _huge_integral_floats(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: exact_int_if_huge(v) for k, v in data.items()}
        return data
