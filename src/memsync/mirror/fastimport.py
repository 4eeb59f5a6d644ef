"""Writing objects into a mirror through ``git fast-import``: git encodes every blob, tree and commit.

One :class:`FastImport` is one process fed one batch, leaving one new pack; the caller moves its own
ref only after :meth:`FastImport.finish`. fast-import commits onto a scratch ref the stream deletes at
its end: a killed writer leaves that ref (the next deletes it) and unreachable objects, never a change
to a ref memsync reads.
"""

from __future__ import annotations

import contextlib
import functools
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pygit2

from memsync.errors import MirrorError
from memsync.mirror.gitbinary import NO_HOOKS, git_environment, require_git

SCRATCH_REF = "refs/memsync/importing"
_END = b"reset " + SCRATCH_REF.encode() + b"\ndone\n"
# Each write(2) releases the GIL to the fetch threads, and waits to get it back: a 256 KiB buffer makes
# a batch's stream (about 800 KiB for 1,000 versions) a few writes, not a hundred. A 1 MiB pipe (Linux's
# default ceiling) holds most of a batch, so the writer does not block whenever fast-import falls behind.
STREAM_BUFFER = 256 << 10
PIPE_SIZE = 1 << 20


def ident(name: str, email: str, seconds: int) -> bytes:
    """An author or committer as git writes it: whole seconds since the epoch, always UTC."""
    return f"{name} <{email}> {seconds} +0000".encode()


@dataclass(frozen=True, slots=True)
class Put:
    """Write ``blob`` (a hex id the stream or the repository already holds) at ``path``."""

    path: str
    blob: str


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove the file (or folder) at ``path``; folders left empty go with it."""

    path: str


@dataclass(frozen=True, slots=True)
class Move:
    """Move the file at ``source`` to ``target``."""

    source: str
    target: str


Change = Put | Remove | Move


def blob_id(data: bytes) -> str:
    """The id git gives a blob of ``data``."""
    return str(pygit2.hash(data))


def _quoted(path: str) -> bytes:
    # fast-import reads a path in C quotes, so any path (spaces, a leading quote) is unambiguous.
    raw = path.encode("utf-8", "surrogateescape")
    return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n") + b'"'


class FastImport:
    """One ``git fast-import`` process writing a batch of objects into the repository at ``git_dir``;
    :meth:`abort` (or an exception leaving a ``with`` block) leaves only unreachable objects."""

    def __init__(self, git_dir: Path, marks_file: Path) -> None:
        require_git()
        self._marks_file = marks_file
        marks_file.unlink(missing_ok=True)
        # Always a pack: git leaves under 100 objects loose, and a daemon's small pulls would pile them up.
        command = ["git", *NO_HOOKS, "-c", "fastimport.unpackLimit=0", f"--git-dir={git_dir}", "fast-import"]
        command += ["--quiet", "--done", "--force", "--date-format=raw", f"--export-marks={marks_file}"]
        self._command = command
        self.commits = 0
        self.bytes_written = 0

    @functools.cached_property
    def _stdin(self) -> IO[bytes]:
        # Started at the first write: a stream that writes nothing (a no-op pull's metadata) runs no git.
        # A file, not a pipe: a pipe nobody reads until the end could fill and stall fast-import.
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by _close, after the wait)
        self._process = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._errors,
            env=git_environment(),
            bufsize=STREAM_BUFFER,
        )
        assert self._process.stdin is not None
        # F_SETPIPE_SZ is Linux's (no fcntl on Windows); under a lower ceiling the pipe keeps its size.
        if sys.platform.startswith("linux"):
            import fcntl

            with contextlib.suppress(OSError, AttributeError):
                fcntl.fcntl(self._process.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        # The scratch branch starts empty: a root commit must not inherit a killed writer's tip.
        with contextlib.suppress(BrokenPipeError):  # git's own words come with the next write
            self._process.stdin.write(b"reset " + SCRATCH_REF.encode() + b"\n")
        return self._process.stdin

    def blob(self, data: bytes) -> str:
        self._send(b"blob\ndata %d\n" % len(data), data, b"\n")
        self.bytes_written += len(data)
        return blob_id(data)

    def commit(
        self,
        *,
        parent: str | None,
        author: bytes,
        committer: bytes,
        message: bytes,
        changes: Iterable[Change],
    ) -> int:
        """Stream a commit of ``changes`` on the previous one of this stream (the first on ``parent``, or
        a root commit); its mark, the key of its id in :meth:`finish`. ``author`` and ``committer`` are
        ident lines (``Name <email> seconds +hhmm``)."""
        self.commits += 1
        lines = [
            b"commit %s\nmark :%d\nauthor %s\ncommitter %s\ndata %d\n%s\n"
            % (SCRATCH_REF.encode(), self.commits, author, committer, len(message), message)
        ]
        if parent is not None and self.commits == 1:
            lines.append(b"from " + parent.encode() + b"\n")
        for change in changes:
            if isinstance(change, Put):
                lines.append(b"M 100644 " + change.blob.encode() + b" " + _quoted(change.path) + b"\n")
            elif isinstance(change, Remove):
                lines.append(b"D " + _quoted(change.path) + b"\n")
            else:
                lines.append(b"R " + _quoted(change.source) + b" " + _quoted(change.target) + b"\n")
        lines.append(b"\n")
        self._send(*lines)
        self.bytes_written += len(message)
        return self.commits

    def finish(self) -> dict[int, str]:
        """End the stream (the scratch ref deleted) and wait for the pack; commit ids by mark."""
        self._send(_END)
        self._close()
        try:
            text = self._marks_file.read_text(encoding="ascii")
            ids = {int(mark[1:]): oid for mark, oid in (line.split() for line in text.splitlines())}
        except FileNotFoundError:
            ids = {}
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise MirrorError(f"cannot read git fast-import's marks file {self._marks_file}: {exc}") from exc
        self._marks_file.unlink(missing_ok=True)
        # A caller indexes by mark: a missing id would be a bare KeyError.
        missing = [mark for mark in range(1, self.commits + 1) if mark not in ids]
        if missing:
            raise MirrorError(
                f"git fast-import finished without the id of commit :{missing[0]} in its marks file"
                f" {self._marks_file} ({len(missing)} missing); nothing was kept: run the command again"
            )
        return ids

    def abort(self) -> None:
        """End the stream, keeping nothing reachable: the scratch ref is deleted, no ref moved."""
        if "_stdin" not in vars(self) or self._process.returncode is not None:
            return
        with contextlib.suppress(MirrorError):
            self._send(_END)
            self._close()
        self._marks_file.unlink(missing_ok=True)

    def __enter__(self) -> FastImport:
        return self

    def __exit__(self, kind: object, value: object, tb: object) -> None:
        if kind is not None:
            self.abort()

    def _send(self, *chunks: bytes) -> None:
        try:
            for chunk in chunks:
                self._stdin.write(chunk)
        except (BrokenPipeError, ValueError):
            self._close()  # raises with git's own words
            raise MirrorError("git fast-import stopped reading its input") from None

    def _close(self) -> None:
        with contextlib.suppress(BrokenPipeError, ValueError):
            self._stdin.close()
        status = self._process.wait()
        self._errors.seek(0)
        errors = self._errors.read().decode("utf-8", "replace").strip()
        self._errors.close()
        if status != 0:
            detail = " / ".join(errors.splitlines()[-3:]) or f"exit status {self._process.returncode}"
            raise MirrorError(f"git fast-import failed writing the mirror's objects: {detail}")
