"""A user's git configuration that would change or watch everything memsync writes, if it were obeyed.

:func:`hostile_git_environment` builds a home directory whose global git configuration (read by git
through ``GIT_CONFIG_GLOBAL`` and by libgit2 through ``$HOME`` and ``$XDG_CONFIG_HOME``) turns on
end-of-line conversion, a clean/smudge filter on every file, an fsmonitor, a hooks directory and an
init template whose hooks would all leave a marker file, and a global ignore file that would hide
every memory. A mirror must come out of it byte-exact, with no marker anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Every client-side hook git knows: whichever of them git or libgit2 might run, its marker shows it.
HOOKS = (
    "applypatch-msg",
    "commit-msg",
    "fsmonitor-watchman",
    "post-applypatch",
    "post-checkout",
    "post-commit",
    "post-index-change",
    "post-merge",
    "post-rewrite",
    "pre-applypatch",
    "pre-auto-gc",
    "pre-commit",
    "pre-merge-commit",
    "pre-push",
    "pre-rebase",
    "prepare-commit-msg",
    "push-to-checkout",
    "reference-transaction",
    "sendemail-validate",
)


@dataclass(frozen=True)
class HostileGit:
    home: Path
    markers: Path
    env: dict[str, str]

    def ran(self) -> list[str]:
        """Marker files left by hooks, filters or fsmonitor that ran (empty: nothing ran)."""
        return sorted(p.name for p in self.markers.iterdir())


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(0o755)


def hostile_git_environment(directory: Path) -> HostileGit:
    home = directory / "hostile-home"
    markers = directory / "markers"
    hooks = home / "hooks"
    template_hooks = home / "template" / "hooks"
    for folder in (markers, hooks, template_hooks, home / ".config" / "git"):
        folder.mkdir(parents=True, exist_ok=True)
    for name in HOOKS:
        _script(hooks / name, f'touch "{markers}/hook-{name}"; exit 0')
        _script(template_hooks / name, f'touch "{markers}/template-hook-{name}"; exit 0')
    filter_script = home / "filter"
    # Were the filter obeyed, contents would change case: a byte comparison would show it.
    _script(filter_script, f'touch "{markers}/filter-$1"; tr a-z A-Z')
    _script(home / "fsmonitor", f'touch "{markers}/fsmonitor"; exit 1')
    attributes = home / ".config" / "git" / "attributes"
    attributes.write_text("* filter=evil text eol=crlf ident\n", encoding="utf-8")
    ignore = home / "ignore"
    ignore.write_text("*\n", encoding="utf-8")
    config = (
        "[user]\n\tname = hostile\n\temail = hostile@memsync.invalid\n"
        "[core]\n\tautocrlf = true\n\teol = crlf\n\tsafecrlf = true\n\tsymlinks = true\n"
        f"\thooksPath = {hooks}\n\tattributesFile = {attributes}\n\tfsmonitor = {home / 'fsmonitor'}\n"
        f"\texcludesFile = {ignore}\n"
        f'[filter "evil"]\n\tclean = {filter_script} clean\n\tsmudge = {filter_script} smudge\n'
        "\trequired = true\n"
        f"[init]\n\ttemplateDir = {home / 'template'}\n"
        "[gc]\n\tauto = 1\n\tautoDetach = false\n"
    )
    for place in (home / "gitconfig", home / ".gitconfig", home / ".config" / "git" / "config"):
        place.write_text(config, encoding="utf-8")
    env = {
        "GIT_CONFIG_GLOBAL": str(home / "gitconfig"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
    }
    return HostileGit(home, markers, env)
