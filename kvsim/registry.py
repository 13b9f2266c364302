"""Registries of the pluggable policies a scenario names by string.

    ROUTERS              router.kind               kvsim.engine.routers
    EVICTION_POLICIES    engine.eviction_policy    kvsim.core.eviction
    SCHEDULING_POLICIES  engine.scheduling_policy  kvsim.core.queues
    COST_MODELS          replicas[].cost_model     kvsim.cost.factory (builders by config kind)

Each built-in registers itself beside its class; a user adds one the same way, before
loading the scenario that names it:

    from kvsim.registry import ROUTERS

    @ROUTERS.register("shortest_queue")
    class ShortestQueue:
        def __init__(self, config): ...
        def route(self, req, view): return min(view.replicas, key=lambda r: r.num_waiting)

The scenario schema checks names against these registries and lists them in
``kvsim schema``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> factories of one kind of policy, in registration order."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator registering a factory (usually a class) under ``name``."""
        if not name or not name.replace("_", "").isalnum():
            raise ValueError(f"{self.what} name {name!r} must be a non-empty identifier")

        def add(item: T) -> T:
            if name in self._items and self._items[name] is not item:
                raise ValueError(f"{self.what} {name!r} is already registered")
            self._items[name] = item
            return item

        return add

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that register temporary policies clean up with this)."""
        del self._items[name]

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(self.unknown(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def names(self) -> list[str]:
        return list(self._items)

    def unknown(self, name: str) -> str:
        return f"unknown {self.what} {name!r}; registered: {', '.join(self._items) or '(none)'}"

    def check(self, name: str) -> str:
        """``name`` if registered, else ValueError (for schema validators)."""
        if name not in self._items:
            raise ValueError(self.unknown(name))
        return name

    def json_schema_enum(self, schema: dict[str, Any]) -> None:
        """``json_schema_extra`` hook: list the registered names as the field's enum."""
        schema["enum"] = self.names()


ROUTERS: Registry[Any] = Registry("router")
EVICTION_POLICIES: Registry[Any] = Registry("eviction policy")
SCHEDULING_POLICIES: Registry[Any] = Registry("scheduling policy")
COST_MODELS: Registry[Any] = Registry("cost model")
