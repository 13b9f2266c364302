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
    run_cmd,
    sweep_cmd,
    trace_cmd,
    verify_cmd,
)
from kvsim.errors import KvsimError

_COMMAND_MODULES = (
    run_cmd,
    bench_cmd,
    kvsize_cmd,
    fit_cmd,
    trace_cmd,
    sweep_cmd,
    capacity_cmd,
    analysis_cmd,
    calibrate_cmd,
    verify_cmd,
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


class _ClosedPipeGuard:
    """A stdout that drops what is written once the reader has gone (BrokenPipeError).

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
                return self._stream.write(text)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    stdout = sys.stdout
    guard = _ClosedPipeGuard(stdout)
    sys.stdout = guard
    try:
        return int(args.func(args) or 0)
    except KvsimError as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return 130
    finally:
        guard.flush()
        if sys.stdout is guard:
            sys.stdout = stdout


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
