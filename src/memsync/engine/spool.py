"""A disk-backed reversal of a stream, so memory stays bounded whatever the store's size.

The API lists versions newest first and the import writes them oldest first (docs/api-contract.md
§6). Holding a whole history in memory would make a pull's peak memory grow with the store (it has to
stay flat from 10,000 to 100,000 versions), so the listing is spooled to an anonymous temporary file
and read back in reverse. Only an 8-byte offset per item stays in memory.
"""

from __future__ import annotations

import pickle
import tempfile
from array import array
from collections.abc import Iterable, Iterator
from typing import IO, Generic, TypeVar

T = TypeVar("T")


class ReverseSpool(Generic[T]):
    """Append items, then iterate them last-in first-out. Use as a context manager to free the file."""

    def __init__(self) -> None:
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="memsync-spool-")  # noqa: SIM115 (closed by close())
        self._offsets = array("Q")
        self._end = 0

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, item: T) -> None:
        data = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(self._end)
        self._file.write(data)
        self._offsets.append(self._end)
        self._end += len(data)

    def extend(self, items: Iterable[T]) -> None:
        for item in items:
            self.append(item)

    def reversed(self) -> Iterator[T]:
        """Yield the items newest-appended first; the spool may not grow while this runs."""
        end = self._end
        for index in range(len(self._offsets) - 1, -1, -1):
            start = self._offsets[index]
            self._file.seek(start)
            # Only memsync wrote this file, in this process: unpickling it is safe.
            yield pickle.loads(self._file.read(end - start))
            end = start

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ReverseSpool[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
