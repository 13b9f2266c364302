"""The base class of every scenario schema model (scenario, engine, workload, cost, specs).

Frozen, unknown keys refused, floats finite (NaN and infinities refused: every float field
also has a finite bound, which ``kvsim schema`` shows), strings bounded like YAML scalars,
and integral floats too large for int64 (``1e30`` for a token count) handed to the field's
own bound as exact ints, so that the error names the bound rather than a parse failure.

Types are taken as written, where pydantic's lax mode would convert: a boolean is not a
number (``seed: true`` is refused, not read as 1) and a number or a string is not a
boolean, bytes are not text. Text holds no
control or bidirectional characters (tabs and line breaks excepted), and a name (`Name`:
of the scenario, a replica group, a tenant, a model, a GPU) not even those: names reach
terminals, tables and file names.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from kvsim.limits import MAX_YAML_SCALAR_CHARS, exact_int_if_huge
from kvsim.paths import name_problem, text_problem


def _check_name(text: str) -> str:
    problem = name_problem(text)
    if problem is not None:
        raise PydanticCustomError("name_characters", problem)
    return text


#: A name: no control, line-break, tab or bidirectional characters.
Name = Annotated[str, AfterValidator(_check_name)]


def _members(annotation: Any) -> set[Any]:
    """The types an annotation admits at its top level (through Optional, unions, Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return set().union(*(_members(a) for a in typing.get_args(annotation)))
    return {origin or annotation}


def _takes_bool(annotation: Any) -> bool:
    members = _members(annotation)
    return bool(members & {bool, Any, object})


def _text_problem(value: Any) -> str | None:
    """The first problem of text in a field's value: a string, or the strings directly in a
    list or mapping (mappings and lists of models are checked by those models)."""
    if isinstance(value, str):
        return text_problem(value)
    items: list[Any] = []
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple):
        items = list(value)
    for item in items:
        if isinstance(item, str) and (problem := text_problem(item)):
            return problem
    return None


def _as_written(cls: type[BaseModel], name: str, value: Any) -> InitErrorDetails | None:
    """The error of a field's raw value that lax mode would have converted silently: a boolean
    for a number, bytes for text; or text holding control or bidirectional characters."""
    field = cls.model_fields.get(name)
    if field is None:
        return None  # an unknown key: extra="forbid" reports it
    error: PydanticCustomError | None = None
    if isinstance(value, bool) and not _takes_bool(field.annotation):
        error = PydanticCustomError("bool_type", "Input should not be a boolean (true/false) here")
    elif (
        value is not None and not isinstance(value, bool) and _members(field.annotation) <= {bool, type(None)}
    ):
        error = PydanticCustomError("bool_type", "Input should be a boolean: true or false")
    elif isinstance(value, bytes | bytearray):
        error = PydanticCustomError("bytes_type", "Input should be text, not bytes")
    elif isinstance(value, list) and any(isinstance(v, bool) for v in value):
        inner = {
            t for a in typing.get_args(field.annotation) for m in _members(a) for t in _members_of_list(m)
        }
        if inner & {int, float} and bool not in inner:
            error = PydanticCustomError(
                "bool_type", "List items should be numbers, not booleans (true/false)"
            )
    elif (
        problem := _text_problem(
            value if isinstance(value, str) or not _holds_models(field.annotation) else ""
        )
    ) is not None:
        error = PydanticCustomError("text_characters", problem)
    if error is None:
        return None
    return InitErrorDetails(
        type=error, loc=(name,), input=value if not isinstance(value, bytes | bytearray) else "<bytes>"
    )


def _holds_models(annotation: Any) -> bool:
    """Whether a field's value may be (or hold) models, which check their own text."""
    types_ = _members(annotation)
    types_ |= {t for m in typing.get_args(annotation) for a in _members(m) for t in _members_of_list(a)}
    types_ |= {t for a in typing.get_args(annotation) for t in _members(a)}
    return any(isinstance(t, type) and issubclass(t, BaseModel) for t in types_)


def _members_of_list(annotation: Any) -> set[Any]:
    """The item types of ``list[X]`` (empty for anything else)."""
    if typing.get_origin(annotation) in (list, tuple):
        return {t for a in typing.get_args(annotation) if a is not Ellipsis for t in _members(a)}
    return set()


class FrozenModel(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, str_max_length=MAX_YAML_SCALAR_CHARS
    )

    @model_validator(mode="before")
    @classmethod
    def _huge_integral_floats(cls, data: Any) -> Any:
        if isinstance(data, dict):
            errors = [e for k, v in data.items() if isinstance(k, str) and (e := _as_written(cls, k, v))]
            if errors:
                raise ValidationError.from_exception_data(cls.__name__, errors)
            return {k: exact_int_if_huge(v) for k, v in data.items()}
        return data
