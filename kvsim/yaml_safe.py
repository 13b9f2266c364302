"""A bounded YAML loader: kvsim's only way of reading YAML files and text.

    data = load_yaml_file("scenarios/default.yaml")          # raises YamlError
    data = load_yaml_text(text, "<upload>", what="scenario")

It is PyYAML's safe loader (no Python objects, only plain data) with every bound of
`kvsim.limits` checked while the document is composed, before any Python object is built:

    bytes read       the file is read with a cap: /dev/zero fails after MAX_YAML_BYTES
    UTF-8            checked on the bytes; the error gives the offset of the first bad byte
    depth            mappings and lists nested at most MAX_YAML_DEPTH deep, aliases
                     expanded (an alias of a deep node counts its depth where it stands)
    nodes            at most MAX_YAML_NODES nodes once every alias is expanded; an alias
                     counts the size of what it names, so an alias bomb is refused after
                     reading a few hundred bytes, long before anything is expanded
    anchors/aliases  at most MAX_YAML_ANCHORS / MAX_YAML_ALIASES; an alias inside what it
                     names (a recursive structure) is refused
    scalars          at most MAX_YAML_SCALAR_CHARS characters
    integers         at most MAX_YAML_INT_DIGITS digits (Python's 4,300-digit limit never
                     shows up as a traceback)
    keys             a key repeated in one mapping is refused with both lines (YAML says
                     keys are unique; PyYAML would keep the last silently)
    tags             plain data only: strings, numbers, booleans, null, lists, mappings and
                     dates; ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs`` are refused

Every failure is a `YamlError` (a `ScenarioError`) whose problems name the line and column
(or the byte offset) and the rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode
from yaml.reader import ReaderError

from kvsim.errors import YamlError
from kvsim.inputs import FileTooLargeError, read_input
from kvsim.limits import (
    MAX_YAML_ALIASES,
    MAX_YAML_ANCHORS,
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_INT_DIGITS,
    MAX_YAML_NODES,
    MAX_YAML_SCALAR_CHARS,
)

_MERGE_TAG = "tag:yaml.org,2002:merge"
#: The tags a document may hold, explicitly or implicitly: plain data. ``!!binary`` (bytes),
#: ``!!set``, ``!!omap`` and ``!!pairs`` build values no field takes as written (bytes would
#: pass as text), and the safe loader refuses every other tag already.
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}"
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge")
)
_BOM = b"\xef\xbb\xbf"


class _LimitError(yaml.MarkedYAMLError):
    """A bound of kvsim.limits broken at a place in the document."""


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that enforces kvsim's bounds while composing (see the module)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0  # collections open around the node being composed
        self._deepest = 0  # deepest expanded nesting reached in the current subtree
        self._num_nodes = 0
        self._num_anchors = 0
        self._num_aliases = 0
        self._anchor_sizes: dict[str, int] = {}  # anchor -> expanded size of what it names
        self._anchor_heights: dict[str, int] = {}  # anchor -> expanded nesting of what it names
        self._open_anchors: set[str] = set()  # anchors whose node is still being composed

    def _fail(self, rule: str, mark: Any) -> None:
        raise _LimitError(problem=rule, problem_mark=mark)

    def _add_nodes(self, n: int, mark: Any) -> None:
        self._num_nodes += n
        if self._num_nodes > MAX_YAML_NODES:
            self._fail(
                f"more than {MAX_YAML_NODES:,} nodes once aliases are expanded "
                "(an alias bomb?); kvsim refuses before expanding them",
                mark,
            )

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in types-PyYAML
        if isinstance(event, AliasEvent):
            self._num_aliases += 1
            if self._num_aliases > MAX_YAML_ALIASES:
                self._fail(f"more than {MAX_YAML_ALIASES} aliases", event.start_mark)
            if event.anchor in self._open_anchors:
                self._fail(
                    f"alias *{event.anchor} inside the node it names (a recursive structure)",
                    event.start_mark,
                )
            node = super().compose_node(parent, index)  # undefined aliases raise here
            alias = event.anchor or ""
            self._add_nodes(self._anchor_sizes.get(alias, 1), event.start_mark)
            # What an alias names nests further where the alias stands: aliases of aliases
            # can build depth that no single level of the text shows.
            deepest = self._depth + self._anchor_heights.get(alias, 0)
            if deepest > MAX_YAML_DEPTH:
                self._fail(
                    f"nested deeper than {MAX_YAML_DEPTH} levels once alias *{event.anchor} is expanded",
                    event.start_mark,
                )
            self._deepest = max(self._deepest, deepest)
            assert node is not None
            return node
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            self._num_anchors += 1
            if self._num_anchors > MAX_YAML_ANCHORS:
                self._fail(f"more than {MAX_YAML_ANCHORS} anchors", event.start_mark)
            self._open_anchors.add(anchor)
        if isinstance(event, ScalarEvent) and len(event.value) > MAX_YAML_SCALAR_CHARS:
            self._fail(
                f"a scalar of {len(event.value):,} characters; at most {MAX_YAML_SCALAR_CHARS:,}",
                event.start_mark,
            )
        nested = isinstance(event, CollectionStartEvent)
        outer_depth, outer_deepest = self._depth, self._deepest
        self._deepest = outer_depth
        if nested:
            self._depth += 1
            self._deepest = self._depth
            if self._depth > MAX_YAML_DEPTH:
                self._fail(f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
        before = self._num_nodes
        self._add_nodes(1, event.start_mark)
        node = super().compose_node(parent, index)
        self._depth = outer_depth
        if anchor is not None:
            self._open_anchors.discard(anchor)
            self._anchor_sizes[anchor] = self._num_nodes - before
            self._anchor_heights[anchor] = self._deepest - outer_depth
        self._deepest = max(outer_deepest, self._deepest)
        assert node is not None
        return node

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if node.tag not in _PLAIN_TAGS:
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise ConstructorError(
                None,
                None,
                f"tag {_short(tag)} is not allowed: kvsim reads plain YAML (strings, numbers, "
                "booleans, null, lists, mappings, dates)",
                node.start_mark,
            )
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except Exception as exc:  # e.g. a timestamp 2023-13-45, !!bool maybe, !!float abc
            raise ConstructorError(
                None, None, f"cannot read {node.tag.rsplit(':', 1)[-1]} value: {exc}", node.start_mark
            ) from None

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # merged keys may be overridden: that is what merging is for
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in first_line:
                        self._fail(
                            f"duplicate key {_short(key)} (first on line {first_line[key]})",
                            key_node.start_mark,
                        )
                    first_line[key] = key_node.start_mark.line + 1
                except TypeError:
                    continue  # an unhashable key: the base class reports it
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "").lstrip("+-")
        for prefix in ("0b", "0x", "0o"):
            text = text.removeprefix(prefix)
        digits = sum(c.isalnum() for c in text)
        if digits > MAX_YAML_INT_DIGITS:
            self._fail(f"an integer of {digits:,} digits; at most {MAX_YAML_INT_DIGITS}", node.start_mark)
        return super().construct_yaml_int(node)


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _problem(exc: yaml.YAMLError, text: str) -> tuple[str, str]:
    if isinstance(exc, _LimitError):
        return _where(exc.problem_mark), str(exc.problem)
    if isinstance(exc, ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return f"line {line}, column {column}", f"character #x{exc.character:04x} is not allowed in YAML"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        text = "; ".join(str(part) for part in (exc.context, exc.problem) if part)
        return _where(mark), f"not valid YAML: {text}"
    return "", f"not valid YAML: {exc}"


def load_yaml_text(text: str, source: str, *, what: str = "scenario") -> Any:
    """Plain data of one YAML document (None when empty), within every bound of the module.

    ``source`` names the text in errors (a path, ``<upload>``); ``what`` says what the
    text should be (``scenario``, ``sweep file``).
    """
    if len(text) > MAX_YAML_BYTES:
        raise YamlError(
            source, [("", f"{len(text):,} characters; at most {MAX_YAML_BYTES:,} are read")], what=what
        )
    loader = None
    try:
        loader = BoundedLoader(text)  # checks that every character may appear in YAML
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise YamlError(source, [_problem(exc, text)], what=what) from None
    except RecursionError:  # only if the caller's stack is already nearly full
        raise YamlError(source, [("", "nested too deeply to read")], what=what) from None
    except Exception as exc:  # PyYAML's own failures on hostile text, e.g. chr() of "\UA0010000"
        where = _where(loader.get_mark()) if loader is not None else ""
        raise YamlError(
            source, [(where, f"not valid YAML: {type(exc).__name__}: {exc}")], what=what
        ) from None
    finally:
        if loader is not None:
            loader.dispose()


def decode_utf8(data: bytes, source: str, *, what: str = "scenario") -> str:
    """``data`` as text (a leading UTF-8 byte-order mark dropped), or a `YamlError` naming
    the offset and line of the first byte that is not UTF-8."""
    skip = len(_BOM) if data.startswith(_BOM) else 0
    try:
        return data[skip:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = skip + exc.start
        line = data.count(b"\n", 0, offset) + 1
        raise YamlError(
            source,
            [(f"byte {offset} (line {line})", f"not UTF-8: byte 0x{data[offset]:02x} ({exc.reason})")],
            what=what,
        ) from None


def read_capped(
    path: str | Path, source: str, *, what: str = "scenario", limit: int = MAX_YAML_BYTES
) -> bytes:
    """At most ``limit`` bytes of a file, or a `YamlError` if it cannot be read or holds more."""
    try:
        return read_input(path, limit)  # a regular file only: never a FIFO, a device, a directory
    except FileTooLargeError as exc:
        raise YamlError(source, [("", str(exc))], what=what) from None
    except OSError as exc:  # missing, unreadable, or not a regular file (the reason alone)
        raise YamlError(source, [("", f"cannot read file: {exc.strerror or exc}")], what=what) from None
    except ValueError as exc:  # a path holding a NUL byte
        raise YamlError(source, [("", f"cannot read file: {exc}")], what=what) from None


def load_yaml_file(path: str | Path, source: str | None = None, *, what: str = "scenario") -> Any:
    """Plain data of a YAML file (None when empty): read with a cap, UTF-8 checked, bounded."""
    source = str(path) if source is None else source
    text = decode_utf8(read_capped(path, source, what=what), source, what=what)
    return load_yaml_text(text, source, what=what)
