"""Errors users see: each names the file, the field path and the rule broken."""

from __future__ import annotations


class KvsimError(Exception):
    """Base class of kvsim's user-facing errors."""


class ScenarioError(KvsimError):
    """A scenario (file, dict or override) is invalid.

    ``problems`` holds ``(field_path, rule)`` pairs, e.g. ``("replicas.0.tp", "must be >= 1")``.
    """

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: invalid scenario"]
        lines += [f"  {path or '<root>'}: {rule}" for path, rule in problems]
        super().__init__("\n".join(lines))


class ProfileError(KvsimError):
    """A cost profile is missing, malformed, or does not match the scenario."""


class TraceError(KvsimError):
    """A trace file cannot be read; the message names the file and the line."""


class ResultDirError(KvsimError):
    """A result folder cannot be written or read; the message names the folder and why."""


class YamlError(ScenarioError):
    """A YAML file or text cannot be read: not UTF-8, not valid YAML, or beyond a bound of
    `kvsim.limits` (size, depth, aliases, scalar length, ...). ``problems`` name the line and
    column (or byte offset) and the rule; ``what`` says what the file should have been."""

    def __init__(self, source: str, problems: list[tuple[str, str]], *, what: str = "scenario") -> None:
        super().__init__(source, problems)
        self.what = what
        if what != "scenario":
            lines = [f"{source}: invalid {what}"]
            lines += [f"  {path or '<root>'}: {rule}" for path, rule in problems]
            self.args = ("\n".join(lines),)


class WorkLimitError(KvsimError, ValueError):
    """An analysis would do more work than a bound of `kvsim.limits` allows (too many
    windows, cache lookups, ...); the message names the bound and how to stay within it.
    A `ValueError` too, as the argument checks of the same functions are."""
