"""Cost models: how long one engine iteration takes (see `kvsim.cost.base`)."""

from kvsim.cost.base import Batch, ConstantCostModel, CostModel

__all__ = ["Batch", "ConstantCostModel", "CostModel"]
