"""Where kvsim writes, and its one rule: it replaces or deletes only what it can prove it wrote.

The proof is a marker kvsim writes, never a file name a user could also have chosen:

    folders   every folder kvsim writes (a result folder, a sweep folder, and the hidden
              temporary folders beside them) holds a small file ``.kvsim``, written first:
              ``{"kvsim": "result", "version": "0.1.0"}`` (the kind of folder and the
              version that wrote it). An existing folder is reused or replaced only when it
              is empty or holds that marker, of the same kind, and nothing kvsim does not
              write there; anything else is refused before any work starts.
    files     a single-file output (a cost profile, a fixture file) is JSON whose first
              field names a kvsim format, ``{"format": "kvsim-profile", ...}``. An existing
              file is replaced only when it is such a file of the same format; outputs that
              cannot carry a marker (CSV) never replace an existing file.
    temporary hidden siblings named ``.NAME.kvsim-tmp-PID-HEX`` (``kvsim-old`` for a
              previous result parked during a replacement): the kvsim prefix and the PID of
              the writing process, so that a user's ``.NAME.tmp-mine`` is never taken for
              kvsim's; and a leftover is removed only when its process is gone and it holds
              the marker.
    never     a filesystem root or the home folder itself, a path that cannot name a file
              (`kvsim.paths.path_problem`), a symbolic link or a special file in place of
              an output file.

Writes are atomic: into a temporary sibling, renamed into place once complete, so a
failure leaves nothing half-written. Refusals are `OutputError`s (exit 2) naming the path
and the rule.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import zlib
from collections.abc import Iterable
from pathlib import Path

from kvsim import __version__
from kvsim.errors import KvsimError
from kvsim.paths import MAX_NAME_BYTES, path_problem, printable

#: The marker file of every folder kvsim writes.
MARKER_FILE = ".kvsim"
#: Largest marker file read, bytes (one is about 40).
MAX_MARKER_BYTES = 4096
#: Bytes of a file's head read to find its format (the field comes first).
FORMAT_HEAD_BYTES = 4096

_FORMAT = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"(kvsim-[A-Za-z0-9._/-]{1,100})"')
_GZIP_MAGIC = b"\x1f\x8b"


class OutputError(KvsimError):
    """kvsim will not write where it was asked to; the message names the path and the rule."""


# --------------------------------------------------------------------------- refusals


def _shown(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    return printable(text if len(text) <= 200 else text[:197] + "...")


def check_target(path: str | os.PathLike[str], what: str, error: type[KvsimError] = OutputError) -> Path:
    """``path`` as an absolute, resolved `Path`, unless no output may go there: a path no
    file can have, a filesystem root, the home folder itself."""
    problem = path_problem(path)
    if problem is not None:
        raise error(f"{what} {_shown(path)}: {problem}")
    target = Path(os.path.realpath(os.path.abspath(path)))
    if target.parent == target:
        raise error(f"{what} {_shown(path)}: is a filesystem root; kvsim never writes into one")
    try:
        home = Path(os.path.realpath(Path.home()))
    except (RuntimeError, KeyError, OSError):
        home = None
    if home is not None and target == home:
        raise error(f"{what} {_shown(path)}: is your home folder; kvsim never writes into it")
    return target


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def check_parent(target: Path, shown: str, what: str, error: type[KvsimError] = OutputError) -> None:
    """Refuse a target whose nearest existing ancestor is not a folder."""
    for ancestor in target.parents:
        try:
            st = os.stat(ancestor)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise error(f"{what} {shown}: cannot look at {ancestor}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise error(f"{what} {shown}: cannot be created: {ancestor} is not a folder")
        check_writable(ancestor, shown, what, error)
        return


def check_writable(folder: Path, shown: str, what: str, error: type[KvsimError] = OutputError) -> None:
    """Refuse, before any work, an output whose folder this process may not write into."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise error(f"{what} {shown}: cannot write into {_shown(folder)}: permission denied")


# --------------------------------------------------------------------------- folder markers


def write_marker(folder: Path, kind: str) -> None:
    """Write the marker of a folder of ``kind`` (``result``, ``sweep``, ...) into ``folder``."""
    text = json.dumps({"kvsim": kind, "version": __version__}) + "\n"
    with open(folder / MARKER_FILE, "x", encoding="utf-8") as fh:
        fh.write(text)


def marker_kind(folder: Path) -> str | None:
    """The kind named by the marker in ``folder``; None when there is no valid marker (no file,
    a link, a folder, larger than a marker, not the JSON kvsim writes)."""
    path = folder / MARKER_FILE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        raw = os.read(fd, MAX_MARKER_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) > MAX_MARKER_BYTES:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    kind = data.get("kvsim") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def foreign_entries(folder: Path, kind: str, allowed: Iterable[str] | None) -> list[str]:
    """What in an existing ``folder`` kvsim cannot prove it wrote as a folder of ``kind``:
    ``[]`` when it may be reused or replaced (empty, or marked with nothing else but regular
    files named in ``allowed``; ``allowed`` None: anything in a marked folder).

    The marker's absence is reported as ``"no .kvsim marker"``.
    """
    entries = sorted(os.listdir(folder))
    if not entries:
        return []
    found = marker_kind(folder)
    if found != kind:
        what = f"a {found!r} marker, not {kind!r}" if found else f"no {MARKER_FILE} marker"
        others = [printable(e) for e in entries if e != MARKER_FILE]
        return [what, *others[:3], *(["..."] if len(others) > 3 else [])]
    if allowed is None:
        return []
    names = set(allowed) | {MARKER_FILE}
    foreign = []
    for entry in entries:
        st = _lstat(folder / entry)
        if entry not in names or st is None or not stat.S_ISREG(st.st_mode):
            foreign.append(printable(entry) + ("/" if st is not None and stat.S_ISDIR(st.st_mode) else ""))
    return foreign[:4] + (["..."] if len(foreign) > 4 else [])


def claim_folder(
    path: str | os.PathLike[str], kind: str, what: str, error: type[KvsimError] = OutputError
) -> Path:
    """Make ``path`` a folder of ``kind`` that kvsim may write into: created (parents too) with
    the marker, or an existing empty folder given the marker, or one already marked so.
    Anything else is refused. Returns the resolved folder."""
    target = check_target(path, what, error)
    shown = _shown(path)
    st = _lstat(target)
    if st is None:
        check_parent(target, shown, what, error)
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise error(f"{what} {shown}: cannot create the folder: {exc.strerror or exc}") from None
    elif not stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {shown}: exists and is not a folder")
    check_writable(target, shown, what, error)
    try:
        foreign = foreign_entries(target, kind, None)
        if foreign:
            raise error(
                f"{what} {shown}: not used: it holds files other than a kvsim {kind} ({', '.join(foreign)}); "
                f"kvsim writes only into a new or empty folder, or one it marked as its own with a "
                f"{MARKER_FILE} file. Choose another folder"
            )
        if marker_kind(target) != kind:
            write_marker(target, kind)
    except OSError as exc:
        raise error(f"{what} {shown}: cannot use the folder: {exc.strerror or exc}") from None
    return target


def claim_folder_beside(
    path: str | os.PathLike[str],
    kind: str,
    outputs: Iterable[str],
    what: str,
    error: type[KvsimError] = OutputError,
) -> Path:
    """Make an existing folder of inputs a folder of ``kind`` kvsim may write ``outputs`` into:
    one already marked so, or one where none of ``outputs`` exists yet (nothing of the user's
    can be replaced; the marker is added). Anything else is refused. Returns the folder."""
    target = check_target(path, what, error)
    shown = _shown(path)
    st = _lstat(target)
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {shown}: no such folder")
    if marker_kind(target) == kind:
        return target
    present = [name for name in outputs if _lstat(target / name) is not None]
    if present:
        raise error(
            f"{what} {shown}: not used: it holds {', '.join(printable(n) for n in present[:4])}, which kvsim "
            f"would replace but cannot prove it wrote (no {MARKER_FILE} marker of a {kind} folder)"
        )
    try:
        write_marker(target, kind)
    except FileExistsError:
        raise error(f"{what} {shown}: holds a {MARKER_FILE} that is not a {kind} marker") from None
    except OSError as exc:
        raise error(f"{what} {shown}: cannot use the folder: {exc.strerror or exc}") from None
    return target


# --------------------------------------------------------------------------- temporary siblings


def _stem(name: str) -> str:
    """``name`` cut so that ``.NAME.kvsim-KIND-PID-HEX`` stays within a file name's length."""
    raw = name.encode("utf-8", "surrogateescape")
    room = MAX_NAME_BYTES - 48
    return raw[:room].decode("utf-8", "ignore") if len(raw) > room else name


def sibling_prefix(name: str, kind: str) -> str:
    """The start of the temporary siblings of ``name`` of ``kind`` (``tmp``, ``old``)."""
    return f".{_stem(name)}.kvsim-{kind}-"


def make_sibling(parent: Path, name: str, kind: str, marker: str) -> Path:
    """A new hidden folder ``.NAME.kvsim-KIND-PID-HEX`` in ``parent`` holding a ``marker``
    marker, created with the user's umask (``tempfile.mkdtemp`` would make it 0700)."""
    for _ in range(100):
        folder = parent / f"{sibling_prefix(name, kind)}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(folder)  # mode 0o777 & ~umask
        except FileExistsError:
            continue
        try:
            write_marker(folder, marker)
        except BaseException:
            os.rmdir(folder)
            raise
        return folder
    raise OutputError(f"{parent}: cannot create a temporary folder for {name}")  # pragma: no cover


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` may still be running (this process counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):
        return True  # it exists but belongs to someone else, or the number is odd: keep
    return True


def stale_siblings(target: Path, kind: str, marker: str, *, include_alive: bool = False) -> list[Path]:
    """Temporary siblings of ``target`` of ``kind`` that kvsim may remove: named
    ``.NAME.kvsim-KIND-PID-HEX``, a folder (not a link), holding a ``marker`` marker, and
    left by a process that is gone (``include_alive``: or not). Newest first."""
    parent = target.parent
    prefix = sibling_prefix(target.name, kind)
    pattern = re.compile(re.escape(prefix) + r"(\d{1,10})-[0-9a-f]{8}")
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    found = []
    for entry in entries:
        match = pattern.fullmatch(entry)
        if match is None:
            continue
        folder = parent / entry
        st = _lstat(folder)
        if st is None or not stat.S_ISDIR(st.st_mode):
            continue
        if not include_alive and pid_alive(int(match.group(1))):
            continue
        if marker_kind(folder) == marker:
            found.append((st.st_mtime, folder))
    found.sort(reverse=True)
    return [folder for _, folder in found]


# --------------------------------------------------------------------------- single files


def file_format(path: Path) -> str | None:
    """The kvsim format a file declares in its first field (gzip'd or not); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.read(fd, FORMAT_HEAD_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    if head.startswith(_GZIP_MAGIC):
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, FORMAT_HEAD_BYTES)
        except zlib.error:
            return None
    match = _FORMAT.match(head)
    return match.group(1).decode() if match else None


def _same_format(found: str | None, fmt: str) -> bool:
    return found is not None and found.split("/")[0] == fmt.split("/")[0]


def check_file_target(
    path: str | os.PathLike[str], what: str, fmt: str | None, error: type[KvsimError] = OutputError
) -> Path:
    """Refuse an output file kvsim may not write (see the module); return the resolved path.

    ``fmt``: the kvsim format of what will be written (an existing file of that format may
    be replaced); None for outputs without one, which never replace an existing file.
    """
    shown = _shown(path)
    problem = path_problem(path)
    if problem is not None:
        raise error(f"{what} {shown}: {problem}")
    given = Path(os.path.abspath(path))
    st = _lstat(given)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise error(f"{what} {shown}: is a symbolic link; kvsim replaces only files it wrote")
    target = check_target(path, what, error)
    if st is None:
        check_parent(target, shown, what, error)
        return target
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{what} {shown}: is a folder; give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{what} {shown}: is not a regular file; kvsim replaces only files it wrote")
    if fmt is None:
        raise error(f"{what} {shown}: already exists; kvsim does not replace a file it cannot prove it wrote")
    if not _same_format(file_format(target), fmt):
        raise error(
            f"{what} {shown}: not replaced: it is not a file kvsim wrote (its first field is not "
            f'"format": "{fmt}"); remove it yourself or choose another name'
        )
    check_writable(target.parent, shown, what, error)
    return target


def write_file(
    path: str | os.PathLike[str],
    data: bytes,
    what: str,
    fmt: str | None,
    error: type[KvsimError] = OutputError,
) -> Path:
    """Write ``data`` to ``path`` atomically under the rule of `check_file_target` (parents
    created): into ``.NAME.kvsim-tmp-PID-HEX`` beside it, renamed into place when complete."""
    target = check_file_target(path, what, fmt, error)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise error(f"{what} {_shown(path)}: cannot create {target.parent}: {exc.strerror or exc}") from None
    _write_atomic(target.parent, target.name, data)
    return target


def replace_file(folder: Path, name: str, data: bytes) -> None:
    """Write ``folder/name`` atomically, inside a folder kvsim owns (a marked sweep folder)."""
    _write_atomic(folder, name, data)


def _write_atomic(folder: Path, name: str, data: bytes) -> None:
    """``data`` into ``.NAME.kvsim-tmp-PID-HEX`` in ``folder`` (mode 0o666 & ~umask), then
    renamed to ``name``; the temporary file is removed if anything fails."""
    tmp = folder / f"{sibling_prefix(name, 'tmp')}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
        os.replace(tmp, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
