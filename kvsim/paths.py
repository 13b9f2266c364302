"""Paths and text that come from the user: checked before the operating system sees them.

    path_problem("a" * 300)          # "a name of 300 bytes (aaaa...); at most 255"
    expand_user("~nobody/p.json")    # PathError: cannot expand '~nobody' ...
    is_file("x" * 100_000)           # False, never an OSError
    printable("a\\x1b[31mb")          # 'a\\\\x1b[31mb': control and bidi characters escaped

A path option (``--out``, ``--points``, a profile, a trace, ``--model`` naming a spec file)
may be any text: over-long names, NUL bytes, a ``~`` that cannot expand. The operating
system answers those with ``OSError: File name too long``, ``ValueError: embedded null
byte`` or ``RuntimeError: Could not determine home directory``; here they are a
`PathError` naming the option and the rule, or, for probes like `is_file`, a plain "no".
Text printed to a terminal goes through `printable`, so that a name holding escape
sequences or right-to-left overrides shows as what it is instead of acting on the screen.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from kvsim.errors import KvsimError

#: Longest name of one file or folder, bytes (NAME_MAX of Linux and macOS file systems).
MAX_NAME_BYTES = 255
#: Longest path, bytes (PATH_MAX of Linux).
MAX_PATH_BYTES = 4096

#: Characters that change how text around them is shown: bidirectional embeddings,
#: overrides and isolates, and the invisible marks that steer them.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class PathError(KvsimError):
    """A path given by the user cannot name a file; the message names the option and why."""


def _short(text: str, limit: int = 40) -> str:
    return printable(text if len(text) <= limit else text[: limit - 3] + "...")


def path_problem(text: str | os.PathLike[str]) -> str | None:
    """Why ``text`` cannot name a file on this system (None when it can)."""
    text = os.fspath(text)
    if not isinstance(text, str):
        return f"must be text, got {type(text).__name__}"
    if not text:
        return "an empty path"
    if "\x00" in text:
        return "contains a NUL character"
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:
        return "is not a valid file name (characters the file system cannot encode)"
    if len(raw) > MAX_PATH_BYTES:
        return f"a path of {len(raw):,} bytes; at most {MAX_PATH_BYTES:,}"
    for part in raw.split(b"/"):
        if len(part) > MAX_NAME_BYTES:
            name = os.fsdecode(part)
            return f"a name of {len(part):,} bytes ({_short(name)}); at most {MAX_NAME_BYTES}"
    return None


def check_path(text: str | os.PathLike[str], what: str) -> Path:
    """``text`` as a `Path`, or a `PathError` naming ``what`` (an option, a field) and the rule."""
    problem = path_problem(text)
    if problem is not None:
        shown = _short(os.fspath(text)) if isinstance(os.fspath(text), str) else "?"
        raise PathError(f"{what} {shown}: {problem}")
    return Path(text)


def expand_user(text: str | os.PathLike[str], what: str) -> Path:
    """``text`` with a leading ``~`` or ``~user`` expanded, or a `PathError` when it cannot be
    (no home folder known, no such user); checked by `check_path` first."""
    path = check_path(text, what)
    if not os.fspath(path).startswith("~"):
        return path
    try:
        return path.expanduser()
    except (RuntimeError, KeyError, OSError) as exc:
        head = os.fspath(path).split("/", 1)[0]
        raise PathError(
            f"{what} {_short(os.fspath(path))}: cannot expand {printable(head)} ({exc}); "
            "give the path without ~"
        ) from None


def is_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an existing regular file (or a link to one); False, never an
    exception, for a path no file can have (too long, a NUL byte) or that cannot be looked at."""
    if path_problem(path) is not None:
        return False
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether anything (a link included, even a broken one) is at ``path``; False for a path
    no file can have, True when it cannot be looked at (permission denied): safer to refuse."""
    if path_problem(path) is not None:
        return False
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError:
        return True
    return True


def unprintable(char: str) -> bool:
    """A character that must not reach a terminal as it is: a control character (C0, DEL,
    C1), a line or paragraph separator, or a bidirectional control."""
    return unicodedata.category(char) in ("Cc", "Zl", "Zp") or char in BIDI_CONTROLS


_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029" + "".join(sorted(BIDI_CONTROLS)) + "]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, keep: str = "") -> str:
    """``text`` with every `unprintable` character (except those in ``keep``) written as an
    escape: ``\\x1b``, ``\\u202e``. Plain text comes back unchanged."""
    if text.isprintable() and not keep:
        return text
    if not keep:
        return _UNPRINTABLE.sub(_escape, text)
    return _UNPRINTABLE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


def name_problem(text: str) -> str | None:
    """Why ``text`` may not be a name (of a scenario, a group, a tenant, a model): a control,
    separator or bidirectional character, which would reach terminals and file names."""
    bad = next((c for c in text if unprintable(c) or c in "\t"), None)
    if bad is None:
        return None
    return (
        f"must not contain control or bidirectional characters, found '{printable(bad)}' (U+{ord(bad):04X})"
    )


def text_problem(text: str) -> str | None:
    """Why free text (a description) is refused: as `name_problem`, tabs and newlines allowed."""
    bad = next((c for c in text if unprintable(c) and c not in "\t\n"), None)
    if bad is None:
        return None
    return (
        f"must not contain control or bidirectional characters, found '{printable(bad)}' (U+{ord(bad):04X})"
    )
