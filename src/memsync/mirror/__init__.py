"""memsync.mirror: one git repository per memory store (docs/design.md §2-§3; docs/mirror.md).

The only package that imports pygit2, and within it only :mod:`~memsync.mirror.gitstore` holds the
repository. It writes one deterministic commit per memory version, keeps the refs and the checkout
(never overwriting a local edit), and gives the push engine snapshots, merges and conflict records.
"""

from memsync.mirror.backups import BackupRepository, BackupTarget, ImportedCommit, PushResult
from memsync.mirror.branch import main_rewind, pushed_refs, reset_main
from memsync.mirror.clone import Clone
from memsync.mirror.conflicts import ConflictRecord, Merger
from memsync.mirror.errors import FormatError, PathEncodingError, RefMoved
from memsync.mirror.fastimport import blob_id
from memsync.mirror.gitstore import clear_stale_locks
from memsync.mirror.history import HistoryWriter, VersionRecord
from memsync.mirror.origin import Origin
from memsync.mirror.paths import decode_path, encode_path, encode_paths, escape_for_terminal
from memsync.mirror.repository import ImportedVersion, Mirror
from memsync.mirror.rewrite import Rewriter
from memsync.mirror.snapshots import SnapshotEntry, Snapshots
from memsync.mirror.trailers import Operation, inferred_version_id
from memsync.mirror.view import StoreCommit, View, ViewCommit
from memsync.mirror.worktree import NOT_REGULAR, CheckoutChange, Worktree, WorktreeChanged, WorktreeScan

__all__ = [
    "NOT_REGULAR",
    "BackupRepository",
    "BackupTarget",
    "CheckoutChange",
    "Clone",
    "ConflictRecord",
    "FormatError",
    "HistoryWriter",
    "ImportedCommit",
    "ImportedVersion",
    "Merger",
    "Mirror",
    "Operation",
    "Origin",
    "PathEncodingError",
    "PushResult",
    "RefMoved",
    "Rewriter",
    "SnapshotEntry",
    "Snapshots",
    "StoreCommit",
    "VersionRecord",
    "View",
    "ViewCommit",
    "Worktree",
    "WorktreeChanged",
    "WorktreeScan",
    "blob_id",
    "clear_stale_locks",
    "decode_path",
    "encode_path",
    "encode_paths",
    "escape_for_terminal",
    "inferred_version_id",
    "main_rewind",
    "pushed_refs",
    "reset_main",
]
