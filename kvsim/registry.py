"""Registries of the pluggable policies a scenario names by string.

    ROUTERS              router.kind               kvsim.engine.routers
    EVICTION_POLICIES    engine.eviction_policy    kvsim.core.eviction
    SCHEDULING_POLICIES  engine.scheduling_policy  kvsim.core.queues
    COST_MODELS          replicas[].cost_model     kvsim.cost.factory (builders by config kind)
    WORKLOAD_KINDS       workload.kind             kvsim.workload (generators by config kind)

GPU presets are not a registry of factories but of specs: `kvsim.model.presets.register_gpu`.

Each built-in registers itself beside its class; a user adds one the same way, before
loading the scenario that names it:

    from kvsim.registry import ROUTERS

    @ROUTERS.register("shortest_queue")
    class ShortestQueue:
        def __init__(self, config): ...
        def route(self, req, view): return min(view.replicas, key=lambda r: r.num_waiting)

The scenario schema checks names against these registries and lists them in
``kvsim schema``. A cost model or a workload kind also has settings of its own: its
registration names the pydantic config class that reads them (``config=``), and
`RegisteredKinds` lets the schema's tagged union accept every kind so registered:

    @WORKLOAD_KINDS.register("pairs", config=PairsWorkload)
    def generate_pairs(cfg, rng, *, base_dir=None): ...

docs/engine.md ("Extending kvsim") has a complete example of each kind, tested as written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic_core import InitErrorDetails, core_schema

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> factories of one kind of policy, in registration order."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._items: dict[str, T] = {}
        self._configs: dict[str, type[BaseModel]] = {}

    def register(self, name: str, *, config: type[BaseModel] | None = None) -> Callable[[T], T]:
        """Decorator registering a factory (usually a class) under ``name``.

        ``config``: the pydantic model that reads this kind's section of a scenario (its
        ``kind`` field a ``Literal[name]``); only kinds with settings of their own need one.
        """
        if not name or not name.replace("_", "").isalnum():
            raise ValueError(f"{self.what} name {name!r} must be a non-empty identifier")
        if config is not None and not (isinstance(config, type) and issubclass(config, BaseModel)):
            raise TypeError(f"{self.what} {name!r}: config must be a pydantic model class, got {config!r}")

        def add(item: T) -> T:
            if name in self._items and (
                self._items[name] is not item or self._configs.get(name) is not config
            ):
                raise ValueError(f"{self.what} {name!r} is already registered")
            self._items[name] = item
            if config is not None:
                self._configs[name] = config
            return item

        return add

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that register temporary policies clean up with this)."""
        del self._items[name]
        self._configs.pop(name, None)

    def config_class(self, name: str) -> type[BaseModel] | None:
        """The config class registered with ``name`` (None: registered without one)."""
        return self._configs.get(name)

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


class RegisteredKinds:
    """Pydantic type of the configs of the kinds registered in ``registry`` with ``config=``.

    The schema's tagged unions (workload, cost model) list their built-in variants and end
    with ``Annotated[Any, RegisteredKinds(REGISTRY, BUILTIN), Tag(REGISTERED_TAG)]``; their
    discriminator (`kind_tag`) sends every kind it does not know to this member, which
    validates the data with the class registered under its kind. An unknown kind is one
    problem listing the registered ones; a field problem is reported under
    ``<field>.<kind>.<name>``, as pydantic reports a built-in variant's.
    """

    def __init__(self, registry: Registry[Any], builtin: tuple[str, ...]) -> None:
        self.registry = registry
        self.builtin = builtin  # the union's own variants, not listed again in the JSON schema

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # No serializer: pydantic serializes the validated object as the model it is.
        return core_schema.no_info_plain_validator_function(self.validate)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        kinds = [n for n in self.registry if n not in self.builtin and self.registry.config_class(n)]
        what = f"A {self.registry.what} registered in kvsim.registry with its own config class"
        if not kinds:  # an empty enum is not valid JSON Schema everywhere; "not {}" matches nothing
            return {"not": {}, "description": f"{what} (none registered)."}
        return {
            "type": "object",
            "description": f"{what}.",
            "properties": {"kind": {"enum": kinds, "description": "Selects the registered kind."}},
            "required": ["kind"],
        }

    def validate(self, value: Any) -> BaseModel:
        kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
        if not isinstance(kind, str):
            names = ", ".join(self.registry.names()) or "(none)"
            raise ValueError(f"kind must name a {self.registry.what}; registered: {names}")
        cls = self.registry.config_class(self.registry.check(kind))
        if cls is None:
            raise ValueError(
                f"{self.registry.what} {kind!r} is registered without a config class "
                "(register it with config=...)"
            )
        if isinstance(value, cls):
            return value
        try:
            return cls.model_validate(value)
        except ValidationError as err:
            details: list[InitErrorDetails] = [
                {"type": e["type"], "loc": (kind, *e["loc"]), "input": e["input"], "ctx": e.get("ctx", {})}
                for e in err.errors()
            ]
            raise ValidationError.from_exception_data(err.title, details) from None


#: The tag of the `RegisteredKinds` member in a tagged union.
REGISTERED_TAG = "Registered"


def kind_tag(builtin: tuple[str, ...], default: str | None) -> Callable[[Any], str | None]:
    """Discriminator of a union of built-in variants (tagged by kind) plus `RegisteredKinds`:
    a built-in kind is its own tag, any other kind goes to the registered member, and a
    missing ``kind`` is ``default`` (None: the union's usual "unable to extract tag")."""

    def kind(value: Any) -> str | None:  # pydantic names it in "unable to extract tag using kind()"
        name = value.get("kind", default) if isinstance(value, dict) else getattr(value, "kind", default)
        if name is None:
            return None
        return name if name in builtin else REGISTERED_TAG

    return kind


ROUTERS: Registry[Any] = Registry("router")
EVICTION_POLICIES: Registry[Any] = Registry("eviction policy")
SCHEDULING_POLICIES: Registry[Any] = Registry("scheduling policy")
COST_MODELS: Registry[Any] = Registry("cost model")
WORKLOAD_KINDS: Registry[Any] = Registry("workload kind")
