"""Opening the files kvsim reads: regular files only, none larger than its cap.

Every path kvsim opens for reading (scenario, sweep and spec files, traces and length
files, cost profiles, measurement CSVs, result folders, vLLM fixtures) goes through
`open_input` or `read_input`. They refuse what is not a regular file before reading a
byte: a character device (``/dev/zero``, ``/dev/urandom``, a terminal) never ends, a FIFO
or a socket blocks until someone writes (``open`` itself blocks on a FIFO without a
writer), a directory has no content. The path is looked at first (`os.stat`), so a
special file is never opened at all; the open is non-blocking, and the opened file is
checked again (`os.fstat`), so that a path swapped in between cannot slip through. A
regular file larger than the caller's cap is refused from its size before it is read, and
`read_input` reads at most the cap, so a file that grows while it is read is bounded too.

The refusals are `OSError` subclasses, so that every reader's ``except OSError`` reports
them with the message it already gives for a file it cannot read: ``str(error)`` is the
reason alone (``not a regular file (a FIFO); ...``), as ``strerror`` is for an OS error.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

#: What each kind of file is called in messages.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(OSError):
    """A file kvsim refuses to read; ``str()`` is the reason alone (like ``strerror``)."""

    def __init__(self, path: str | Path, reason: str, code: int = errno.EINVAL) -> None:
        super().__init__(code, reason, str(path))

    def __str__(self) -> str:
        return str(self.strerror)


class NotRegularFileError(InputFileError):
    """The path is a device, FIFO, socket or directory."""


class FileTooLargeError(InputFileError):
    """The file holds more bytes than the reader's cap."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _limit_text(limit: int | None) -> str:
    return "kvsim reads regular files only" + (
        f", no larger than {limit:,} bytes" if limit is not None else ""
    )


def not_regular(path: str | Path, mode: int, limit: int | None = None) -> NotRegularFileError:
    """The error for a path whose ``st_mode`` is ``mode`` (not a regular file)."""
    code = errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL
    return NotRegularFileError(path, f"not a regular file ({_kind(mode)}); {_limit_text(limit)}", code)


def too_large(path: str | Path, limit: int) -> FileTooLargeError:
    return FileTooLargeError(path, f"file is larger than {limit:,} bytes (the most kvsim reads)", errno.EFBIG)


def check_input(path: str | Path, limit: int | None = None) -> os.stat_result:
    """The path's status if it is a regular file of at most ``limit`` bytes (following links).

    Raises `NotRegularFileError`, `FileTooLargeError`, or the `OSError` of `os.stat`
    (a missing file); a path holding a NUL byte raises `ValueError`, as `open` does.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise not_regular(path, st.st_mode, limit)
    if limit is not None and st.st_size > limit:
        raise too_large(path, limit)
    return st


def open_input(path: str | Path, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading in binary mode, if it is a regular file of at most ``limit`` bytes.

    The caller still bounds what it reads (`read_input` does): a regular file can grow.
    """
    check_input(path, limit)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)  # the file opened, not the one looked at: a path can be swapped
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(path, st.st_mode, limit)
        if limit is not None and st.st_size > limit:
            raise too_large(path, limit)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: str | Path, limit: int) -> bytes:
    """The whole content of a regular file of at most ``limit`` bytes (`open_input`'s errors)."""
    with open_input(path, limit) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew after the size was checked
        raise too_large(path, limit)
    return data


__all__ = [
    "FileTooLargeError",
    "InputFileError",
    "NotRegularFileError",
    "check_input",
    "open_input",
    "read_input",
]
