"""What in a checkout is never a memory unless the store or git already has it: one list, one matcher.

Both sources are matched by git's own rules (libgit2's ``path_is_ignored``, as ``git status`` and
``git check-ignore`` answer), so the push's scan, the daemon's watcher and ``git status`` agree:

* **Temporaries** of editors and tools (:data:`TEMPORARIES`, in every mirror's ``.git/info/exclude``):
  one may outlive its save (an editor killed mid-save); pushed, it would become a memory, and its
  removal a delete.
* **The user's rules**: ``.gitignore`` files, which are never memories nor reported (a memory named
  ``.gitignore`` is ``%2Egitignore``), and their lines in ``.git/info/exclude``. No global excludes
  file (the mirror sets ``core.excludesfile`` to nothing): what hides a memory must be in the mirror.

A path either rule matches still counts when it is tracked, or when the store (or the base) has a
memory at it: a memory may have any name, and ignoring it would delete it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memsync.mirror.gitstore import GitStore

# gitignore syntax. An exact count of characters is spelt as that many bracket expressions, so only
# the names those tools make match (a memory named ``tmp`` or ``sediment`` is a memory).
_LOWER_DIGIT_UNDERSCORE = "[a-z0-9_]"
_ALNUM = "[A-Za-z0-9]"
TEMPORARIES: tuple[tuple[str, str], ...] = (
    ("*.swp", "vim's swap file (and .swo, .swx after it)"),
    ("*.swo", "vim"),
    ("*.swx", "vim"),
    ("*~", "backup files of vim, emacs, gedit, kate"),
    (".#*", "emacs's lock file; memsync's own temporaries are .#memsync-*"),
    ("\\#*#", "emacs's auto-save file"),
    ("4913", "vim's probe of whether it may create files in a folder"),
    (".*.kate-swp", "kate's swap file"),
    (".DS_Store", "macOS Finder"),
    ("*___jb_tmp___", "JetBrains IDEs' safe write: the new content"),
    ("*___jb_old___", "JetBrains IDEs' safe write: the old file"),
    (".goutputstream-*", "gedit and other GLib programs' safe write (GOutputStream)"),
    ("tmp" + _LOWER_DIGIT_UNDERSCORE * 8, "Python's tempfile.mkstemp(): tmp and 8 of a-z 0-9 _"),
    (".tmp" + _ALNUM * 6, "C mkstemp() with the template .tmpXXXXXX: .tmp and 6 of A-Z a-z 0-9"),
    ("sed" + _ALNUM * 6, "GNU sed -i: sed and 6 of A-Z a-z 0-9"),
)

IGNORE_FILE = ".gitignore"

EXCLUDE_BLOCK = (
    "# memsync: editor and tool temporaries are never memories (untracked files only)\n"
    + "".join(f"{pattern}\n" for pattern, _ in TEMPORARIES)
    + "# memsync: your .gitignore files are yours, never memories (a memory named .gitignore is"
    " %2Egitignore)\n" + f"{IGNORE_FILE}\n"
)

# What earlier versions wrote: replaced by EXCLUDE_BLOCK where found, so a mirror keeps one list.
OLD_EXCLUDE_BLOCKS = (
    "# memsync: editor and tool temporaries are never memories (untracked files only)\n"
    "*.swp\n*.swo\n*.swx\n*~\n.#*\n\\#*#\n4913\n.*.kate-swp\n.DS_Store\n",
)


def is_ignore_file(tree_path: str) -> bool:
    """Whether ``tree_path`` is a ``.gitignore`` file: the user's, whatever git tracks."""
    return tree_path.rpartition("/")[2] == IGNORE_FILE


def is_ignored(mirror: GitStore, tree_path: str) -> bool:
    """Whether an untracked file at ``tree_path`` is left out, unless the caller knows it is a memory."""
    return is_ignore_file(tree_path) or mirror.is_ignored(tree_path)
