"""What in a checkout is never a memory unless the store or git already has it: one list, one matcher.

Two sources, both matched by git's own rules (libgit2's ``path_is_ignored``, the same answer ``git
status`` and ``git check-ignore`` give), so the push's scan, the daemon's watcher and ``git status``
never disagree:

* **Temporaries** of editors and tools, which :data:`TEMPORARIES` lists and every mirror's
  ``.git/info/exclude`` carries (:data:`EXCLUDE_BLOCK`). A save is made of them, and one may outlive
  the save (an editor killed mid-save); pushed, each would become a memory, and its removal a delete.
* **The user's own rules**: ``.gitignore`` files anywhere in the checkout and the lines they add to
  ``.git/info/exclude``. A ``.gitignore`` file is the user's: never a memory, never reported (a memory
  whose path is ``.gitignore`` lives at ``%2Egitignore``, which git does not read). A global excludes
  file is not consulted (the mirror sets ``core.excludesfile`` to nothing): what hides a memory must
  be visible in the mirror itself.

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

# What earlier versions of memsync wrote: replaced by EXCLUDE_BLOCK where found, so a mirror does not
# keep two copies of the list.
OLD_EXCLUDE_BLOCKS = (
    """\
# memsync: editor and tool temporaries are never memories (untracked files only)
*.swp
*.swo
*.swx
*~
.#*
\\#*#
4913
.*.kate-swp
.DS_Store
""",
)


def is_ignore_file(tree_path: str) -> bool:
    """Whether ``tree_path`` is a ``.gitignore`` file: the user's, whatever git tracks."""
    return tree_path.rpartition("/")[2] == IGNORE_FILE


def is_ignored(mirror: GitStore, tree_path: str) -> bool:
    """Whether an untracked file at ``tree_path`` is left out: a ``.gitignore``, or a path git ignores.

    Only the caller knows whether the path is a memory already (tracked, in the base or the store),
    which overrides this.
    """
    return is_ignore_file(tree_path) or mirror.is_ignored(tree_path)
