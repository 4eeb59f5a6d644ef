"""memsync.mirror: one git repository per memory store (design.md §2-§3; docs/mirror.md).

The only package that imports pygit2. It encodes memory paths for git, writes one deterministic
commit per memory version straight into packs, keeps the refs, reads the import checkpoint back from
the tip's trailers, and updates the checkout without ever overwriting a local edit. For the push
engine it reads snapshots of commits and of the working tree, writes the checkout, merges files,
records conflicts under ``refs/memsync/conflicts/`` and moves ``refs/memsync/base`` and ``main``.
"""

from memsync.mirror.branch import PUSHED_PREFIX, align_index, pushed_refs, reset_main
from memsync.mirror.checkout import CheckoutUpdate
from memsync.mirror.conflicts import (
    CONFLICTS_PREFIX,
    RESOLVED_PREFIX,
    ConflictRecord,
    Merger,
    MergeResult,
    conflict_blob,
    conflict_side,
    end_conflict,
    open_conflicts,
    record_conflict,
    whole_file_markers,
)
from memsync.mirror.errors import FormatError, PathEncodingError, RefMoved
from memsync.mirror.gitbinary import MIN_GIT_VERSION, require_git
from memsync.mirror.history import (
    DEFAULT_AUTHOR_EMAIL,
    DEFAULT_AUTHOR_NAME,
    HistoryWriter,
    VersionRecord,
)
from memsync.mirror.paths import (
    decode_path,
    decode_paths,
    encode_path,
    encode_paths,
    escape_for_terminal,
    quote_for_message,
    suggest_tree_path,
    tree_layout_problems,
)
from memsync.mirror.repository import ImportedVersion, Mirror
from memsync.mirror.rewrite import (
    KeptContent,
    RewriteReport,
    rewrite_pending,
    rewrite_redacted,
    superseded_commits,
)
from memsync.mirror.snapshots import (
    BlobHashes,
    SnapshotEntry,
    base_commit,
    blob_id,
    build_tree,
    commit_snapshot,
    read_base,
    store_blob,
    write_base,
)
from memsync.mirror.trailers import Operation
from memsync.mirror.worktree import (
    NOT_REGULAR,
    CheckoutChange,
    StrayFile,
    WorktreeChanged,
    WorktreeFile,
    WorktreeScan,
    apply_checkout,
    current_sha256,
    head_problem,
    locate,
    read_worktree,
    scan_worktree,
    wait_for_index_lock,
    worktree_blob,
    worktree_memory_paths,
)

__all__ = [
    "CONFLICTS_PREFIX",
    "DEFAULT_AUTHOR_EMAIL",
    "DEFAULT_AUTHOR_NAME",
    "MIN_GIT_VERSION",
    "NOT_REGULAR",
    "PUSHED_PREFIX",
    "RESOLVED_PREFIX",
    "BlobHashes",
    "CheckoutChange",
    "CheckoutUpdate",
    "ConflictRecord",
    "FormatError",
    "HistoryWriter",
    "ImportedVersion",
    "KeptContent",
    "MergeResult",
    "Merger",
    "Mirror",
    "Operation",
    "PathEncodingError",
    "RefMoved",
    "RewriteReport",
    "SnapshotEntry",
    "StrayFile",
    "VersionRecord",
    "WorktreeChanged",
    "WorktreeFile",
    "WorktreeScan",
    "align_index",
    "apply_checkout",
    "base_commit",
    "blob_id",
    "build_tree",
    "commit_snapshot",
    "conflict_blob",
    "conflict_side",
    "current_sha256",
    "decode_path",
    "decode_paths",
    "encode_path",
    "encode_paths",
    "end_conflict",
    "escape_for_terminal",
    "head_problem",
    "locate",
    "open_conflicts",
    "pushed_refs",
    "quote_for_message",
    "read_base",
    "read_worktree",
    "record_conflict",
    "require_git",
    "reset_main",
    "rewrite_pending",
    "rewrite_redacted",
    "scan_worktree",
    "store_blob",
    "suggest_tree_path",
    "superseded_commits",
    "tree_layout_problems",
    "wait_for_index_lock",
    "whole_file_markers",
    "worktree_blob",
    "worktree_memory_paths",
    "write_base",
]
