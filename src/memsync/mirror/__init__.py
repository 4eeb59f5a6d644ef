"""memsync.mirror: one git repository per memory store (docs/design.md §2-§3; docs/mirror.md).

The only package that imports pygit2, and within it only :mod:`~memsync.mirror.gitstore` holds the
repository. It writes one deterministic commit per memory version, keeps the refs and the checkout
(never overwriting a local edit), and gives the push engine snapshots, merges and conflict records.

``__all__`` names what a caller drives; the records those objects hand back (``CheckoutChange``,
``ConflictRecord``, ``SnapshotEntry``, …) are imported from the module that defines them.
"""

from memsync.mirror.backups import BackupRepository, BackupTarget
from memsync.mirror.clone import Clone
from memsync.mirror.conflicts import Merger
from memsync.mirror.fastimport import blob_id
from memsync.mirror.history import VersionRecord
from memsync.mirror.origin import Origin
from memsync.mirror.paths import decode_path, encode_path, encode_paths, escape_for_terminal
from memsync.mirror.repository import Mirror
from memsync.mirror.rewrite import Rewriter
from memsync.mirror.snapshots import Snapshots
from memsync.mirror.view import View

__all__ = [
    "BackupRepository",
    "BackupTarget",
    "Clone",
    "Merger",
    "Mirror",
    "Origin",
    "Rewriter",
    "Snapshots",
    "VersionRecord",
    "View",
    "blob_id",
    "decode_path",
    "encode_path",
    "encode_paths",
    "escape_for_terminal",
]
