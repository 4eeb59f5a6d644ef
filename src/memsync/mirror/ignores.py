"""What in a checkout is never a memory unless the store or git already has it (a memory may have any
name: ignoring it would delete it). Editors' temporaries and ``.gitignore`` files are in every mirror's
``.git/info/exclude`` (docs/push.md, "What is a memory"); git's matcher decides, so the push's scan, the
daemon's watcher and ``git status`` agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memsync.mirror.gitstore import GitStore

_ALNUM = "[A-Za-z0-9]"
# docs/push.md says who writes each. An exact count of characters is spelt as that many bracket
# expressions, so only the names those tools make match (a memory named ``tmp`` or ``sediment`` is one).
EXCLUDE_BLOCK = (
    "# memsync: editor and tool temporaries are never memories (untracked files only)\n"
    "*.swp\n*.swo\n*.swx\n*~\n.#*\n\\#*#\n4913\n.*.kate-swp\n.DS_Store\n"
    "*___jb_tmp___\n*___jb_old___\n.goutputstream-*\n"
    f"tmp{'[a-z0-9_]' * 8}\n.tmp{_ALNUM * 6}\nsed{_ALNUM * 6}\n"
    "# memsync: your .gitignore files are yours, never memories (a memory named .gitignore is"
    " %2Egitignore)\n.gitignore\n"
)

# What earlier versions wrote: replaced by EXCLUDE_BLOCK where found, so a mirror keeps one list.
OLD_EXCLUDE_BLOCKS = (
    "# memsync: editor and tool temporaries are never memories (untracked files only)\n"
    "*.swp\n*.swo\n*.swx\n*~\n.#*\n\\#*#\n4913\n.*.kate-swp\n.DS_Store\n",
)


def is_ignore_file(tree_path: str) -> bool:
    """Whether ``tree_path`` is a ``.gitignore`` file: the user's, whatever git tracks."""
    return tree_path.rpartition("/")[2] == ".gitignore"


def is_ignored(mirror: GitStore, tree_path: str) -> bool:
    """Whether an untracked file at ``tree_path`` is left out, unless the caller knows it is a memory."""
    return is_ignore_file(tree_path) or mirror.is_ignored(tree_path)
