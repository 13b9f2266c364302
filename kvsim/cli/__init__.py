"""Command-line interface: ``kvsim <command> ...``.

Each command lives in its own module exposing ``register(subparsers)``; the parser
below only assembles them. Commands print results on stdout, progress and errors on
stderr, and return an exit code (0 ok, 1 simulation or I/O failure, 2 bad input).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kvsim import __version__
from kvsim.cli import analysis_cmd, calibrate_cmd, capacity_cmd, kvsize_cmd, run_cmd, sweep_cmd, trace_cmd
from kvsim.errors import KvsimError

_COMMAND_MODULES = (run_cmd, kvsize_cmd, trace_cmd, sweep_cmd, capacity_cmd, analysis_cmd, calibrate_cmd)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KvsimError as exc:
        print(f"kvsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
