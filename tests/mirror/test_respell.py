"""A mirror written before spelling rules 5 and 6 is respelled by the redaction rewrite's machinery."""

from __future__ import annotations

import re
from pathlib import Path

from memsync.mirror import Mirror, Rewriter, VersionRecord
from memsync.mirror.state import CACHES
from tests.mirror.oracle import fsck, git, record

HISTORY = [
    record(1, "mem_a", "created", "notes/readme.md", b"lower\n"),
    record(2, "mem_p", "created", "plain.md", b"plain\n"),
    record(3, "mem_b", "created", "notes/Readme.md", b"upper\n"),
    record(4, "mem_c", "created", "a:b.md", b"colon\n"),
    record(5, "mem_a", "updated", "notes/readme.md", b"lower 2\n"),
    record(6, "mem_d", "created", "con.md", b"device\n"),
]
# Today's spelling → the spelling of a memsync without rules 5 and 6.
FORMAT1 = {"notes/%52eadme.md": "notes/Readme.md", "a%3Ab.md": "a:b.md", "%63on.md": "con.md"}


def write(path: Path, records: list[VersionRecord]) -> Mirror:
    mirror = Mirror.init(path)
    with mirror.history_writer(batch_commits=2) as writer:
        for item in records:
            writer.add(item)
    mirror.update_checkout()
    return mirror


def spell_as_format_1(mirror: Mirror) -> None:
    """Make the mirror's history, refs, caches and checkout what a memsync without the new rules
    wrote: git fast-export, the tree paths and format trailers put back, git fast-import."""
    ref = "refs/remotes/memstore/main"
    stream = git(mirror.path, "fast-export", "--signed-tags=strip", ref)
    pattern = re.compile("|".join(re.escape(new) for new in FORMAT1))
    lines = []
    for line in stream.split("\n"):
        if line.startswith(("M 100644 ", "D ")):
            line = pattern.sub(lambda m: FORMAT1[m.group()], line)
        lines.append(line.replace("Memsync-Format: 2", "Memsync-Format: 1"))
    git(mirror.path, "fast-import", "--force", "--quiet", input="\n".join(lines).encode())
    tip = git(mirror.path, "rev-parse", ref).strip()
    for name in ("refs/heads/main", "refs/memsync/base"):
        git(mirror.path, "update-ref", name, tip)
    git(mirror.path, "reset", "-q", "--hard", "main")
    git(mirror.path, "clean", "-qfd")
    mirror.git.state.drop_caches(*CACHES, content_index=True)


def test_an_old_mirror_is_respelled_to_a_fresh_imports_commits(tmp_path: Path) -> None:
    fresh = write(tmp_path / "fresh", HISTORY)
    mirror = write(tmp_path / "old", HISTORY)
    spell_as_format_1(mirror)
    old_tip = mirror.tip()
    assert old_tip != fresh.tip()
    assert {"notes/Readme.md", "a:b.md", "con.md"} <= {
        p.relative_to(mirror.path).as_posix() for p in mirror.path.rglob("*.md")
    }
    mirror = Mirror.open(mirror.path)
    assert Rewriter(mirror).respelling_due()

    report = Rewriter(mirror).respell()

    assert report is not None and report.reason == "spelling"
    assert "path spelling: rewrote" in report.summary() and "memsync backup" in report.summary()
    # Commits before the first tree that needs the new rules keep their ids (record 3 is the first).
    assert report.commits == 4
    assert mirror.tip() == fresh.tip()
    assert git(mirror.path, "rev-parse", "main", "refs/memsync/base").split() == [fresh.tip()] * 2
    on_disk = sorted(
        p.relative_to(mirror.path).as_posix()
        for p in mirror.path.rglob("*")
        if ".git" not in p.parts and p.is_file()
    )
    assert on_disk == ["%63on.md", "a%3Ab.md", "notes/%52eadme.md", "notes/readme.md", "plain.md"]
    assert git(mirror.path, "status", "--porcelain") == ""
    assert old_tip in Rewriter(mirror).superseded()  # the next backup may force-update its remotes
    fsck(mirror.path)
    assert not Rewriter(mirror).respelling_due()
    assert Rewriter(mirror).respell() is None


def test_a_mirror_that_needs_no_new_rule_keeps_its_commits(tmp_path: Path) -> None:
    mirror = write(tmp_path / "m", [HISTORY[0], HISTORY[1]])
    tip = mirror.tip()
    mirror.git.state.put("spelling-rules", None)
    assert Rewriter(mirror).respell() is None
    assert mirror.tip() == tip and not Rewriter(mirror).respelling_due()


def test_the_users_edit_of_a_respelled_file_is_kept(tmp_path: Path) -> None:
    mirror = write(tmp_path / "old", HISTORY)
    spell_as_format_1(mirror)
    (mirror.path / "a:b.md").write_bytes(b"my edit\n")
    Rewriter(Mirror.open(mirror.path)).respell()
    # The edit stays where the user made it; the store's copy is checked out under today's spelling.
    assert (mirror.path / "a:b.md").read_bytes() == b"my edit\n"
    assert (mirror.path / "a%3Ab.md").read_bytes() == b"colon\n"
