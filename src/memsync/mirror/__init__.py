"""memsync.mirror: one git repository per memory store (design.md §2-§3; docs/mirror.md).

The only package that imports pygit2. It encodes memory paths for git, writes one deterministic
commit per memory version straight into packs, keeps the refs, reads the import checkpoint back from
the tip's trailers, and updates the checkout without ever overwriting a local edit.
"""

from memsync.mirror.checkout import CheckoutUpdate
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
from memsync.mirror.trailers import Operation

__all__ = [
    "DEFAULT_AUTHOR_EMAIL",
    "DEFAULT_AUTHOR_NAME",
    "MIN_GIT_VERSION",
    "CheckoutUpdate",
    "FormatError",
    "HistoryWriter",
    "ImportedVersion",
    "Mirror",
    "Operation",
    "PathEncodingError",
    "RefMoved",
    "VersionRecord",
    "decode_path",
    "decode_paths",
    "encode_path",
    "encode_paths",
    "escape_for_terminal",
    "quote_for_message",
    "require_git",
    "suggest_tree_path",
    "tree_layout_problems",
]
