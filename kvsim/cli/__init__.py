"""Command-line interface: ``kvsim <command> ...``.

Each command lives in its own module exposing ``register(subparsers)``; the parser
below only assembles them. Commands print results on stdout, progress and errors on
stderr, and return an exit code (0 ok, 1 simulation or I/O failure, 2 bad input).
A reader that closes stdout early (``kvsim run --json | head -c 300``) ends the output,
not the command: the rest of what it prints is dropped, quietly, and the exit code is the
one the command returns.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from kvsim import __version__
from kvsim.cli import (
    analysis_cmd,
    bench_cmd,
    calibrate_cmd,
    capacity_cmd,
    fit_cmd,
    kvsize_cmd,
    observe_cmd,
    plan_cmd,
    run_cmd,
    sweep_cmd,
    trace_cmd,
    verify_cmd,
)
from kvsim.errors import KvsimError
from kvsim.paths import printable

_COMMAND_MODULES = (
    run_cmd,
    bench_cmd,
    kvsize_cmd,
    fit_cmd,
    trace_cmd,
    sweep_cmd,
    capacity_cmd,
    plan_cmd,
    analysis_cmd,
    calibrate_cmd,
    verify_cmd,
    observe_cmd,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvsim",
        description="Discrete-event simulator of LLM serving with the KV cache as a first-class citizen.",
    )
    parser.add_argument("--version", action="version", version=f"kvsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _COMMAND_MODULES:
        module.register(sub)
    return parser


#: Characters written as they are although `kvsim.paths.printable` would escape them.
_LAYOUT = "\n\t\r"


class _Escaping:
    """A text stream that writes control and bidirectional characters as escapes (``\\x1b``,
    ``\\u202e``), line breaks, tabs and carriage returns excepted: a scenario name, a path or
    a key holding terminal escape sequences is shown, never obeyed by the terminal."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text, keep=_LAYOUT))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _ClosedPipeGuard:
    """A stdout that drops what is written once the reader has gone (BrokenPipeError), and
    escapes what a terminal would act on (see `_Escaping`).

    The real stream's file descriptor is then pointed at /dev/null, so that the flush at
    interpreter exit does not fail either.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.closed_by_reader = False

    def _closed(self) -> None:
        self.closed_by_reader = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # no real file descriptor (pytest capture)
            pass

    def write(self, text: str) -> int:
        if not self.closed_by_reader:
            try:
                self._stream.write(printable(text, keep=_LAYOUT))
            except BrokenPipeError:
                self._closed()
        return len(text)

    def flush(self) -> None:
        if not self.closed_by_reader:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


#: errno values of an OSError that mean the path given was wrong (bad input, exit 2), not
#: that writing or reading failed (exit 1).
_BAD_PATH_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENAMETOOLONG", "ENOENT", "ENOTDIR", "EISDIR", "ELOOP", "EINVAL", "EEXIST", "ENOTEMPTY")
    if hasattr(errno, name)
)


def main(argv: Sequence[str] | None = None) -> int:
    stdout, stderr = sys.stdout, sys.stderr
    guard = _ClosedPipeGuard(stdout)
    sys.stdout = guard
    sys.stderr = _Escaping(stderr)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return int(args.func(args) or 0)
    except KvsimError as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # what a command did not foresee: the file and the reason, no traceback
        where = f"{exc.filename}: " if exc.filename is not None else ""
        if len(where) > 200:
            where = where[:197] + "...: "
        print(f"kvsim: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2 if exc.errno in _BAD_PATH_ERRNOS else 1
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return 130
    finally:
        guard.flush()
        if sys.stdout is guard:
            sys.stdout = stdout
        sys.stderr = stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
