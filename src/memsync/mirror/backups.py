"""Backup repositories: pushing a mirror to one, reading one back (docs/backup.md, "Backup").

A password reaches libgit2 only in the credential callback, never a URL shown or ``.git/config``.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import pygit2
from pygit2.enums import CredentialType

from memsync.crashpoints import crash_point
from memsync.errors import MirrorError
from memsync.mirror.errors import FormatError, PathEncodingError, translated
from memsync.mirror.gitbinary import require_git, run_git
from memsync.mirror.gitstore import GitStore, blob_at, is_repository, temporary_beside
from memsync.mirror.history import PathMap, replay
from memsync.mirror.metadata import read_metadata
from memsync.mirror.paths import decode_path
from memsync.mirror.repository import ImportedVersion, Mirror
from memsync.mirror.rewrite import Rewriter
from memsync.mirror.trailers import parse_message

TargetKind = Literal["local", "ssh", "http", "git"]

BACKUP_MAIN = "refs/heads/main"
RECORDS_PREFIX = "refs/memsync/"
_PRUNE_PENDING = "backup-prune-pending"  # the state intent naming targets owed a prune (by display)
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^/:]+):(?P<path>.+)$")
_ENV_REFERENCE = re.compile(r"^\$(\{)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?(1)\})$")  # $NAME or ${NAME}


@dataclass(frozen=True)
class BackupTarget:
    """One backup location (a local path, ssh, http(s) or git URL). ``url`` is what libgit2 gets and
    ``display`` what people see; neither holds a password."""

    url: str
    display: str
    kind: TargetKind
    path: Path | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def parse(
        cls, url: str, *, base: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> BackupTarget:
        """Read a configured URL; a relative local path is taken relative to ``base``."""
        env = os.environ if environ is None else environ
        text = url.strip()
        if not text:
            raise MirrorError("a backup URL is empty; set [[backup.remotes]] url to a path or a git URL")
        parsed = urllib.parse.urlsplit(text)
        scheme = parsed.scheme.lower()
        if scheme == "file":
            if parsed.netloc not in ("", "localhost"):
                raise MirrorError(f"{text}: a file:// URL names a path on this machine (file:///path)")
            return cls._local(Path(urllib.parse.unquote(parsed.path)), base)
        if scheme in ("http", "https", "ssh", "git+ssh", "ssh+git", "git"):
            kind: TargetKind = "http" if scheme in ("http", "https") else "git" if scheme == "git" else "ssh"
            username = _resolve(urllib.parse.unquote(parsed.username), env) if parsed.username else None
            password = _resolve(urllib.parse.unquote(parsed.password), env) if parsed.password else None
            clean = _without_password(parsed)
            if password is not None and kind != "http":
                raise MirrorError(
                    f"{clean}: a password in an {scheme} URL is not used; ssh"
                    " authenticates with keys (the SSH agent, $MEMSYNC_SSH_KEY or ~/.ssh/id_*)"
                )
            return cls(url=clean, display=clean, kind=kind, username=username, password=password)
        if len(scheme) > 1 and "://" in text:
            raise MirrorError(
                f"{scheme}:// is not a backup URL memsync can push to; use a path, file://, ssh://,"
                " user@host:path, https:// or git://"
            )
        scp = _SCP_LIKE.match(text)
        if scp is not None and not text.startswith(("/", ".", "~")) and "/" not in scp.group("host"):
            return cls(url=text, display=text, kind="ssh", username=scp.group("user"))
        return cls._local(Path(text).expanduser(), base)

    @classmethod
    def _local(cls, path: Path, base: Path | None) -> BackupTarget:
        path = Path(os.path.normpath(path if path.is_absolute() else (base or Path.cwd()) / path))
        return cls(url=str(path), display=str(path), kind="local", path=path)

    def push(self, mirror: Mirror) -> PushResult:
        """Push the mirror's :func:`backup_refs` here; errors land in the result, never raised."""
        result = PushResult(target=self.display)
        try:
            _push(mirror, self, result)
        except (MirrorError, pygit2.GitError, OSError, KeyError, ValueError) as exc:
            # Defence in depth: libgit2 never sees the password, but an error could still quote an input.
            text = str(exc).replace(self.password, "[password]") if self.password else str(exc)
            result.error = text if isinstance(exc, MirrorError) else f"pushing to {self.display}: {text}"
        return result

    @property
    def identity(self) -> str:
        """A spelling two targets share exactly when they are the same place (to refuse collisions)."""
        if self.path is not None:
            return "local:" + str(self.path.resolve() if self.path.exists() else self.path)
        return self.url.rstrip("/").removesuffix(".git")


def _resolve(value: str, env: Mapping[str, str]) -> str:
    """A user or password as written, or the value of the environment variable it names."""
    match = _ENV_REFERENCE.match(value)
    if match is None:
        return value
    if not (found := env.get(name := match.group("name"), "")):
        raise MirrorError(
            f"the backup URL names the environment variable {name}, which is not set or empty: export it"
        )
    return found


def _without_password(parsed: urllib.parse.SplitResult) -> str:
    host = parsed.hostname or ""
    host = f"[{host}]" if ":" in host else host
    if parsed.port is not None:
        host = f"{host}:{parsed.port}"
    user = f"{urllib.parse.quote(parsed.username, safe='')}@" if parsed.username else ""
    if parsed.username and _ENV_REFERENCE.match(urllib.parse.unquote(parsed.username)):
        user = ""  # the variable's value goes through the callback, not the URL
    return urllib.parse.urlunsplit((parsed.scheme, user + host, parsed.path, parsed.query, ""))


class _Callbacks(pygit2.RemoteCallbacks):
    """Credentials for one push and the remote's answer per ref. Each credential is offered once,
    so a refusal ends the push instead of looping: http(s) the URL's user and password; ssh the
    SSH agent's key, then ``$MEMSYNC_SSH_KEY`` or the default keys (``$MEMSYNC_SSH_PASSPHRASE``)."""

    def __init__(self, target: BackupTarget) -> None:
        super().__init__()
        self._target = target
        self._offered: set[str] = set()
        self.answers: dict[str, str | None] = {}
        self.refused: str | None = None

    def credentials(
        self, url: str, username_from_url: str | None, allowed_types: CredentialType
    ) -> pygit2.Username | pygit2.UserPass | pygit2.Keypair:
        user = self._target.username or username_from_url
        if (
            allowed_types & CredentialType.USERPASS_PLAINTEXT
            and self._target.password is not None
            and "userpass" not in self._offered
        ):
            self._offered.add("userpass")
            return pygit2.UserPass(user or "", self._target.password)
        if allowed_types & CredentialType.SSH_KEY:
            user = user or "git"
            if "agent" not in self._offered and os.environ.get("SSH_AUTH_SOCK"):
                self._offered.add("agent")
                return pygit2.KeypairFromAgent(user)
            if chosen := os.environ.get("MEMSYNC_SSH_KEY"):
                keys = [Path(chosen).expanduser()]
            else:
                keys = [Path.home() / ".ssh" / name for name in ("id_ed25519", "id_ecdsa", "id_rsa")]
            for private in keys:
                if str(private) not in self._offered and (chosen or private.exists()):
                    self._offered.add(str(private))
                    public = private.with_name(private.name + ".pub")
                    passphrase = os.environ.get("MEMSYNC_SSH_PASSPHRASE", "")
                    return pygit2.Keypair(user, public if public.exists() else None, private, passphrase)
        if allowed_types & CredentialType.USERNAME and user and "username" not in self._offered:
            self._offered.add("username")
            return pygit2.Username(user)
        self.refused = (
            f"{self._target.display} asks for credentials memsync does not have or that it refused"
            " (https: put the user and a password, or ${VARIABLE} naming one, in the URL; ssh: load a key"
            " into the SSH agent or set MEMSYNC_SSH_KEY)"
        )
        raise MirrorError(self.refused)

    def push_update_reference(self, refname: str, message: str | None) -> None:
        self.answers[refname] = message


@dataclass(frozen=True)
class RefPush:
    """One ref of a push: ``status`` is ``created``, ``updated`` (fast-forward), ``forced`` (from a
    commit a redaction replaced), ``deleted``, ``up-to-date`` or ``rejected`` (``message`` says why)."""

    local: str | None
    remote: str
    old: str | None
    new: str | None
    status: str
    message: str | None = None


@dataclass
class PushResult:
    """What :meth:`BackupTarget.push` did at one target."""

    target: str
    created: bool = False
    refs: list[RefPush] = field(default_factory=list)
    pruned: bool = False
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(ref.status != "rejected" for ref in self.refs)

    @property
    def pushed(self) -> int:
        return sum(ref.status in ("created", "updated", "forced", "deleted") for ref in self.refs)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.target,
            "ok": self.ok,
            "error": self.error,
            "created": self.created,
            "pushed": self.pushed,
            "refs": [asdict(ref) for ref in self.refs],
            "pruned": self.pruned,
            "warnings": self.warnings,
        }


def backup_refs(mirror: Mirror) -> dict[str, str]:
    """``{mirror ref: backup ref}``: ``memstore/main`` as ``refs/heads/main`` (so ``git clone`` checks
    out the memories), the metadata branch and every ``refs/memsync/`` ref under its own name."""
    names = mirror.git.refs("refs/")
    wanted = {mirror.MEMSTORE_REF: BACKUP_MAIN, mirror.METADATA_REF: mirror.METADATA_REF}
    wanted |= {name: name for name in names if name.startswith(RECORDS_PREFIX)}
    return {local: remote for local, remote in wanted.items() if local in names}


def _push(mirror: Mirror, target: BackupTarget, result: PushResult) -> None:
    refs = backup_refs(mirror)
    if target.path is not None:
        result.created = _ensure_local_repository(target.path)
    callbacks = _Callbacks(target)
    try:
        heads = mirror.git.advertised_refs(target.url, callbacks)
    except pygit2.GitError as exc:
        raise MirrorError(callbacks.refused or f"connecting to {target.display}: {exc}") from None
    superseded = Rewriter(mirror).superseded()
    specs: list[str] = []
    planned: list[RefPush] = []
    for local, remote_ref in refs.items():
        new, old = mirror.git.ref_target(local), heads.get(remote_ref)
        if new is None:
            continue
        message = None
        if old == new:
            status = "up-to-date"
        elif old is None:
            status = "created"
        elif mirror.git.has_object(old) and mirror.git.is_ancestor(old, new):
            status = "updated"
        elif old in superseded:
            status = "forced"
        else:
            status = "rejected"
            message = (
                f"the backup's {remote_ref} is at {old}, which this mirror neither contains nor"
                " replaced in a redaction: not overwritten. If the backup is another store's, point"
                " this store elsewhere; if you want this mirror to win, delete that ref in the backup"
            )
        if status in ("created", "updated", "forced"):
            specs.append(f"{'+' if status == 'forced' else ''}{local}:{remote_ref}")
        planned.append(RefPush(local, remote_ref, old, new, status, message))
    kept = set(refs.values())
    for remote_ref, old in sorted(heads.items()):
        if remote_ref.startswith(RECORDS_PREFIX) and remote_ref not in kept:
            specs.append(f":{remote_ref}")
            planned.append(RefPush(None, remote_ref, old, None, "deleted"))
    owing = _prune_owed(mirror)
    owed = target.display in owing
    if not owed and any(ref.status in ("forced", "deleted") for ref in planned):
        mirror.git.state.put(_PRUNE_PENDING, sorted(owing | {target.display}))
        crash_point("backup.prune_noted")
    callbacks = _Callbacks(target)
    if specs:
        try:
            mirror.git.push_refs(target.url, specs, callbacks)
        except pygit2.GitError as exc:
            raise MirrorError(callbacks.refused or f"pushing to {target.display}: {exc}") from None
        crash_point("backup.remote_pushed")  # the remote's refs moved; a forced update not pruned yet
    for ref in planned:
        answer = callbacks.answers.get(ref.remote)
        if ref.status not in ("up-to-date", "rejected") and answer is not None:
            ref = replace(ref, status="rejected", message=f"{target.display}: {answer}")
        result.refs.append(ref)
    if not owed and not any(ref.status in ("forced", "deleted") for ref in result.refs):
        return
    if target.path is None:
        result.warnings.append(
            f"{target.display} had refs replaced after a redaction; the host may keep the old objects"
            " (in its reflogs, caches, forks or pull-request refs) until it collects garbage: ask its"
            " administrator to purge them if the redacted content must be gone there too"
        )
    else:  # drop what the backup no longer reaches: old reflog entries, then unreachable objects
        require_git()
        expire = ["reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all"]
        run_git(target.path, expire, action=f"expiring the reflogs of {target.path}")
        run_git(target.path, ["gc", "--prune=now", "--quiet"], action=f"pruning {target.path}")
        crash_point("backup.remote_pruned")
        result.pruned = True
    mirror.git.state.put(_PRUNE_PENDING, sorted(_prune_owed(mirror) - {target.display}) or None)


def _prune_owed(mirror: Mirror) -> set[str]:
    """Targets (by display) still owed a prune: a push killed before it leaves their refs up to date."""
    found = mirror.git.state.get(_PRUNE_PENDING)
    return {item for item in found if isinstance(item, str)} if isinstance(found, list) else set()


def _ensure_local_repository(path: Path) -> bool:
    """A bare repository at ``path``, created when nothing or an empty folder is there; whether it
    was created. Anything else at ``path`` is refused and left as it is."""
    if path.is_symlink():
        path = path.resolve()  # a link to an empty folder: the repository goes where it points
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        if not is_repository(path):
            raise MirrorError(_not_a_repository(path))
        return False
    # Made whole under a temporary sibling name, then renamed into place: a kill while libgit2
    # writes it leaves no half-made repository at ``path`` (the next run would refuse that as "not a
    # git repository" for good), only a temporary the next creation removes.
    with translated(f"creating the backup repository {path}"):
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = temporary_beside(path)
        if temporary.exists():
            shutil.rmtree(temporary)  # this process's own, from an attempt that failed
        try:
            GitStore(temporary, create="bare").close()
            if path.is_dir():  # an empty folder someone prepared: the repository keeps its mode
                os.chmod(temporary, stat.S_IMODE(path.stat().st_mode))
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
    crash_point("backup.remote_initialised")  # the repository whole, at its temporary name
    try:
        # rename(2) replaces an empty folder, and refuses a non-empty one or a file: nothing is lost.
        os.rename(temporary, path)
    except OSError as exc:
        shutil.rmtree(temporary, ignore_errors=True)
        if is_repository(path):
            return False  # another process made it meanwhile
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise MirrorError(_not_a_repository(path)) from None
        raise MirrorError(
            f"cannot put the new backup repository at {path} ({exc.strerror}); memsync changed"
            " nothing there. If it is a mount point or a folder that cannot be replaced, point"
            f" [[backup.remotes]] url at a path inside it, or create the repository yourself:"
            f" git init --bare --initial-branch=main {path}"
        ) from None
    crash_point("backup.remote_created")  # an empty bare repository, nothing pushed into it
    return True


def _not_a_repository(path: Path) -> str:
    what = "a folder that holds files but no git repository" if path.is_dir() else "not a folder"
    return (
        f"the backup path {path} is {what}: memsync leaves it untouched and backs nothing up there."
        " Point [[backup.remotes]] url at a new or empty path, or move it away and run again"
    )


@dataclass(frozen=True, slots=True)
class ImportedCommit(ImportedVersion):
    """One imported version (its commit's trailers) and ``blob``: the content it wrote."""

    blob: str | None = None


@dataclass(frozen=True)
class TreeFiles:
    """The memories of one commit: ``{memory path: blob id}``, and tree paths that do not decode."""

    files: dict[str, str]
    problems: dict[str, str]


class BackupRepository:
    """A mirror or a bare backup, read-only, for ``restore`` and ``verify``. Open with :meth:`open`;
    use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.git = GitStore(path, action=f"{path} is not a git repository (a memsync mirror or a backup)")
        self.path = path
        mirror = "memsync.mirrorformat" in self.git.config
        self.kind: Literal["mirror", "backup"] = "mirror" if mirror else "backup"
        # The imported history: memstore/main in a mirror, refs/heads/main in a backup.
        self.default_ref = Mirror.MEMSTORE_REF if mirror else BACKUP_MAIN

    def close(self) -> None:
        self.git.close()

    def __enter__(self) -> BackupRepository:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> BackupRepository:
        """Open a memsync mirror (its working tree or its .git) or a bare backup."""
        root = Path(path).expanduser().absolute()
        found = cls(root)
        if found.tip() is None:
            found.close()
            raise MirrorError(
                f"{root} has no {found.default_ref}: it is not a memsync "
                f"{'mirror with imported history' if found.kind == 'mirror' else 'backup'}"
            )
        return found

    def content(self, blob: str) -> bytes:
        """The bytes of a memory's file (a blob id from :meth:`files` or :meth:`imported`)."""
        return self.git.read_blob(blob)

    def tip(self) -> str | None:
        return self.git.ref_target(self.default_ref)

    def resolve(self, revision: str | None = None) -> str:
        """The commit ``revision`` names (any git revision: id, ref, ``main~3``); default the tip."""
        wanted = revision or self.default_ref
        found = self.git.revision(wanted)
        if found is None:
            raise MirrorError(f"{self.path} has no commit {wanted!r}")
        return found

    def files(self, commit: str) -> TreeFiles:
        """The memories at ``commit``; tree paths that are no memory path's spelling are problems."""
        found = TreeFiles({}, {})
        for tree_path, blob in sorted(self.git.tree_files(commit).items()):
            try:
                found.files[decode_path(tree_path)] = blob
            except PathEncodingError as exc:
                found.problems[tree_path] = str(exc)
        return found

    def memory_ids(self, commit: str) -> dict[str, str] | None:
        """``{memory path: memory id}`` at ``commit`` from the trailers; None if it is not imported
        history (a commit of the user's, say)."""
        paths = PathMap()
        try:
            with translated(f"reading the history of {commit}"):
                replay(self.git, paths, commit, None)
        except FormatError:
            return None
        return paths.as_dict()

    def imported(self, revision: str | None = None) -> Iterator[ImportedCommit]:
        """Every imported version up to ``revision`` (default the tip), newest first, with its blob."""
        start = self.resolve(revision)
        with translated("reading the imported history"):
            for commit in self.git.walk(start):
                commit_id = str(commit.id)
                version = ImportedVersion.from_trailers(commit_id, parse_message(commit.message, commit_id))
                wrote = version.operation != "deleted" and version.skipped is None
                path = version.memory_path if wrote else None
                found = None if path is None else blob_at(commit.tree, path)
                copied = {item.name: getattr(version, item.name) for item in fields(version)}
                yield ImportedCommit(**copied, blob=None if found is None else str(found.id))

    def metadata(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """``(store document or None, {memory id: document})`` from the metadata branch's tip."""
        return read_metadata(self.git)
