"""What one command did to one store: the part every command's report shares.

Each command's report (pull, push, status, verify, backup) adds its own fields and its ``output``;
the store, the outcome and the exit code are these, and a failure is recorded the same way (restore
shares :class:`Outcome` only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memsync.errors import EXIT_FAILED, EXIT_OK, storage_fault_hint
from memsync.sync.outputs import Output


class Outcome:
    """Success or failure with its exit code: what every report records the same way.

    A mixin, not a dataclass: each report declares ``ok``, ``error`` and ``code`` among its own
    fields (a restore's store id may be None, so it cannot take :class:`StoreReport`'s).
    """

    ok: bool
    error: str | None
    code: int

    @property
    def exit_code(self) -> int:
        return self.code

    def fail(self, message: str, code: int = EXIT_FAILED) -> None:
        self.ok = False
        # A full disk quoted by git or libgit2 gets its fix named, as an OSError's does.
        hint = storage_fault_hint(message)
        if hint is not None and hint not in message:
            message = f"{message}: {hint}"
        self.error = message
        self.code = code


class Reported:
    """A report whose ``--json`` form is :meth:`output`, a model of :mod:`memsync.sync.outputs`."""

    def output(self) -> Output:
        raise NotImplementedError(f"{type(self).__name__} declares no output model")

    def to_json(self) -> dict[str, Any]:
        return self.output().to_json()


@dataclass
class StoreReport(Outcome, Reported):
    id: str
    name: str = ""
    ok: bool = True
    error: str | None = None
    code: int = EXIT_OK
