"""Backup repositories: pushing a mirror to one (pygit2, with credential callbacks), reading one back.

**Where a backup goes** (:class:`BackupTarget`). A local path or a ``file://`` URL (a bare repository
is created there when nothing or an empty folder is, whole or not at all: made beside it, renamed in),
``ssh://host/path`` or ``user@host:path``, ``https://`` or ``http://``, and ``git://``. A URL may
carry a user name, and for http(s) a password; the password is taken out of the URL before libgit2
sees it and handed over in the credential callback only. It may name an environment variable
instead of holding the secret (``https://me:${GH_TOKEN}@host/r.git``).
Nothing here writes a remote into ``.git/config``: pushes go to an anonymous remote, and every URL
in a message or a report is :attr:`BackupTarget.display`, which never holds a password.

**Credentials** (``_Credentials``), offered once each so a refusal ends the push instead of looping:
http(s) the URL's user and password; ssh a key from the SSH agent, then ``$MEMSYNC_SSH_KEY`` or the
default keys ``~/.ssh/id_ed25519``, ``id_ecdsa``, ``id_rsa`` (passphrase from
``$MEMSYNC_SSH_PASSPHRASE``). Host keys and TLS certificates are checked by libgit2 as usual.

**What is pushed** (:func:`backup_refs`): the imported history ``memstore/main`` becomes the
backup's ``refs/heads/main`` (so ``git clone`` checks out the memories), the metadata branch and
every ref under ``refs/memsync/`` keep their names. Updates are fast-forward only; a ref is
force-updated only from a commit a redaction rewrite replaced (:func:`memsync.mirror.superseded_commits`),
and a ``refs/memsync/`` ref the mirror no longer has is deleted from the backup. After a forced update
or a delete, a local backup is pruned (reflogs expired, ``git gc --prune=now``) so the replaced
objects leave it too; a network host may keep them, and the result says so. The prune is owed from
before the push until it is done (``.git/memsync/backup-prune-pending``), so a push killed in
between is pruned (or warned about) by the next run although its refs are up to date by then.

**Reading a backup back** (:class:`BackupRepository`): a mirror or a bare backup, for ``restore``
and ``verify``: commits, files at a commit (memory paths, decoded strictly), blobs, the imported
versions with the blob each one wrote, and the metadata branch.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
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
from memsync.mirror.rewrite import superseded_commits
from memsync.mirror.trailers import Trailers, parse_message

TargetKind = Literal["local", "ssh", "http", "git"]

# The backup's branch for the imported history: git clone checks it out.
BACKUP_MAIN = "refs/heads/main"
RECORDS_PREFIX = "refs/memsync/"
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>[^/:]+):(?P<path>.+)$")
_ENV_REFERENCE = re.compile(
    r"^\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))$"
)
_DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")
# A local backup repository is made at ".<name>.memsync-tmp-<pid>" beside its path, then renamed.


@dataclass(frozen=True)
class BackupTarget:
    """One backup location. ``url`` is what libgit2 gets and ``display`` what people see; neither
    holds a password. ``path`` is set for local targets."""

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
            if password is not None and kind != "http":
                raise MirrorError(
                    f"{_without_password(parsed)}: a password in an {scheme} URL is not used; ssh"
                    " authenticates with keys (the SSH agent, $MEMSYNC_SSH_KEY or ~/.ssh/id_*)"
                )
            clean = _without_password(parsed)
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
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        path = Path(os.path.normpath(path))
        return cls(url=str(path), display=str(path), kind="local", path=path)

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
    name = match.group("braced") or match.group("bare")
    found = env.get(name, "")
    if not found:
        raise MirrorError(
            f"the backup URL names the environment variable {name}, which is not set or empty: export it"
        )
    return found


def _without_password(parsed: urllib.parse.SplitResult) -> str:
    host = parsed.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parsed.port is not None:
        host = f"{host}:{parsed.port}"
    user = f"{urllib.parse.quote(parsed.username, safe='')}@" if parsed.username else ""
    if parsed.username and _ENV_REFERENCE.match(urllib.parse.unquote(parsed.username)):
        user = ""  # the variable's value goes through the callback, not the URL
    return urllib.parse.urlunsplit((parsed.scheme, user + host, parsed.path, parsed.query, ""))


# --- credentials ------------------------------------------------------------------------------------


class _Callbacks(pygit2.RemoteCallbacks):
    """Credentials for one push (each kind offered once) and the remote's answer per ref."""

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
            for private in _ssh_keys():
                if str(private) not in self._offered:
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


def _ssh_keys() -> Iterator[Path]:
    chosen = os.environ.get("MEMSYNC_SSH_KEY")
    if chosen:
        yield Path(chosen).expanduser()
        return
    home = Path.home() / ".ssh"
    for name in _DEFAULT_KEYS:
        if (home / name).exists():
            yield home / name


# --- pushing ----------------------------------------------------------------------------------------


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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PushResult:
    """What :func:`push_mirror` did at one target."""

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
            "refs": [ref.to_json() for ref in self.refs],
            "pruned": self.pruned,
            "warnings": self.warnings,
        }


def backup_refs(mirror: Mirror) -> dict[str, str]:
    """``{mirror ref: backup ref}`` of everything a backup holds (see the module docstring)."""
    wanted: dict[str, str] = {}
    names = mirror.git.refs("refs/")
    if mirror.MEMSTORE_REF in names:
        wanted[mirror.MEMSTORE_REF] = BACKUP_MAIN
    if mirror.METADATA_REF in names:
        wanted[mirror.METADATA_REF] = mirror.METADATA_REF
    for name in names:
        if name.startswith(RECORDS_PREFIX):
            wanted[name] = name
    return wanted


def push_mirror(mirror: Mirror, target: BackupTarget) -> PushResult:
    """Push the mirror's :func:`backup_refs` to ``target``; errors land in the result, never raised."""
    result = PushResult(target=target.display)
    try:
        _push(mirror, target, result)
    except MirrorError as exc:
        result.error = _scrub(str(exc), target)
    except (pygit2.GitError, OSError, KeyError, ValueError) as exc:
        result.error = f"pushing to {target.display}: {_scrub(str(exc), target)}"
    return result


def _scrub(text: str, target: BackupTarget) -> str:
    # Defence in depth: libgit2 never sees the password, but an error could still quote an input.
    if target.password:
        text = text.replace(target.password, "[password]")
    return text


def _push(mirror: Mirror, target: BackupTarget, result: PushResult) -> None:
    refs = backup_refs(mirror)
    if target.path is not None:
        result.created = _ensure_local_repository(target.path)
        if result.created:
            crash_point("backup.remote_created")  # an empty bare repository, nothing pushed into it
    heads = _remote_heads(mirror, target)
    superseded = superseded_commits(mirror)
    specs: list[str] = []
    planned: list[RefPush] = []
    for local, remote_ref in refs.items():
        new = mirror.git.ref_target(local)
        old = heads.get(remote_ref)
        if new is None:
            continue
        if old == new:
            planned.append(RefPush(local, remote_ref, old, new, "up-to-date"))
        elif old is None:
            specs.append(f"{local}:{remote_ref}")
            planned.append(RefPush(local, remote_ref, old, new, "created"))
        elif mirror.git.has_object(old) and mirror.git.is_ancestor(old, new):
            specs.append(f"{local}:{remote_ref}")
            planned.append(RefPush(local, remote_ref, old, new, "updated"))
        elif old in superseded:
            specs.append(f"+{local}:{remote_ref}")
            planned.append(RefPush(local, remote_ref, old, new, "forced"))
        else:
            planned.append(
                RefPush(
                    local,
                    remote_ref,
                    old,
                    new,
                    "rejected",
                    f"the backup's {remote_ref} is at {old}, which this mirror neither contains nor"
                    " replaced in a redaction: not overwritten. If the backup is another store's, point"
                    " this store elsewhere; if you want this mirror to win, delete that ref in the backup",
                )
            )
    kept = set(refs.values())
    for remote_ref, old in sorted(heads.items()):
        if remote_ref.startswith(RECORDS_PREFIX) and remote_ref not in kept:
            specs.append(f":{remote_ref}")
            planned.append(RefPush(None, remote_ref, old, None, "deleted"))
    owed = target.display in _prune_owed(mirror)
    if not owed and any(ref.status in ("forced", "deleted") for ref in planned):
        _note_prune(mirror, target.display, owed=True)
        crash_point("backup.prune_noted")
    callbacks = _Callbacks(target)
    if specs:
        try:
            mirror.git.push_refs(target.url, specs, callbacks)
        except pygit2.GitError as exc:
            raise MirrorError(callbacks.refused or f"pushing to {target.display}: {exc}") from None
        crash_point("backup.remote_pushed")  # the remote's refs moved; a forced update not pruned yet
    for ref in planned:
        answer = callbacks.answers.get(ref.remote, None)
        if ref.status not in ("up-to-date", "rejected") and answer is not None:
            ref = RefPush(ref.local, ref.remote, ref.old, ref.new, "rejected", f"{target.display}: {answer}")
        result.refs.append(ref)
    rewritten = owed or any(ref.status in ("forced", "deleted") for ref in result.refs)
    if rewritten and target.path is not None:
        _prune_local(target.path)
        crash_point("backup.remote_pruned")
        result.pruned = True
    elif rewritten:
        result.warnings.append(
            f"{target.display} had refs replaced after a redaction; the host may keep the old objects"
            " (in its reflogs, caches, forks or pull-request refs) until it collects garbage: ask its"
            " administrator to purge them if the redacted content must be gone there too"
        )
    if rewritten:
        _note_prune(mirror, target.display, owed=False)


def _prune_owed(mirror: Mirror) -> set[str]:
    """Targets (by display) whose replaced objects an interrupted push left unpruned: the state's
    ``backup-prune-pending`` intent, because a push killed before its prune leaves refs up to date,
    so only this note tells the next run that the replaced objects are still in the backup."""
    found = mirror.git.state.get("backup-prune-pending")
    return {item for item in found if isinstance(item, str)} if isinstance(found, list) else set()


def _note_prune(mirror: Mirror, display: str, *, owed: bool) -> None:
    owing = _prune_owed(mirror)
    owing = owing | {display} if owed else owing - {display}
    mirror.git.state.put("backup-prune-pending", sorted(owing) or None)


def _remote_heads(mirror: Mirror, target: BackupTarget) -> dict[str, str]:
    """``{ref: commit}`` the target advertises to a pusher (receive-pack's view of its refs)."""
    callbacks = _Callbacks(target)
    try:
        return mirror.git.advertised_refs(target.url, callbacks)
    except pygit2.GitError as exc:
        raise MirrorError(callbacks.refused or f"connecting to {target.display}: {exc}") from None


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
    return True


def _not_a_repository(path: Path) -> str:
    what = "a folder that holds files but no git repository" if path.is_dir() else "not a folder"
    return (
        f"the backup path {path} is {what}: memsync leaves it untouched and backs nothing up there."
        " Point [[backup.remotes]] url at a new or empty path, or move it away and run again"
    )


def _prune_local(path: Path) -> None:
    """Drop what the backup no longer reaches: old reflog entries, then unreachable objects."""
    require_git()
    run_git(
        path,
        ["reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all"],
        action=f"expiring the reflogs of {path}",
    )
    run_git(path, ["gc", "--prune=now", "--quiet"], action=f"pruning {path}")


# --- reading a backup or a mirror back ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportedCommit(ImportedVersion):
    """One imported version as a mirror or backup holds it (its commit's trailers, as
    :class:`ImportedVersion`), and ``blob``: the content it wrote."""

    blob: str | None = None


@dataclass(frozen=True)
class TreeFiles:
    """The memories of one commit: ``{memory path: blob id}``, and tree paths that do not decode."""

    files: dict[str, str]
    problems: dict[str, str]


class BackupRepository:
    """A mirror or a bare backup, read-only. Open with :meth:`open`; use as a context manager.

    It holds its repository (``git``) rather than being one: restore and verify read it through the
    verbs below.
    """

    def __init__(self, path: Path) -> None:
        self.git = GitStore(path, action=f"{path} is not a git repository (a memsync mirror or a backup)")
        self.path = path
        self.kind: Literal["mirror", "backup"] = (
            "mirror" if "memsync.mirrorformat" in self.git.config else "backup"
        )

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
        if found.git.ref_target(found.default_ref) is None:
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
        """The commit the imported history ends at (:attr:`default_ref`), or None."""
        return self.git.ref_target(self.default_ref)

    @property
    def default_ref(self) -> str:
        """The imported history: ``memstore/main`` in a mirror, ``refs/heads/main`` in a backup."""
        return Mirror.MEMSTORE_REF if self.kind == "mirror" else BACKUP_MAIN

    def resolve(self, revision: str | None = None) -> str:
        """The commit ``revision`` names (any git revision: id, ref, ``main~3``); default the tip."""
        wanted = revision or self.default_ref
        found = self.git.revision(wanted)
        if found is None:
            raise MirrorError(f"{self.path} has no commit {wanted!r}")
        return found

    def files(self, commit: str) -> TreeFiles:
        """The memories at ``commit``; tree paths that are no memory path's spelling are problems."""
        raw = self.git.tree_files(commit)
        files: dict[str, str] = {}
        problems: dict[str, str] = {}
        for tree_path, blob in sorted(raw.items()):
            try:
                files[decode_path(tree_path)] = blob
            except PathEncodingError as exc:
                problems[tree_path] = str(exc)
        return TreeFiles(files, problems)

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
                trailers = parse_message(commit.message, commit_id)
                yield _imported(commit_id, trailers, commit.tree)

    def metadata(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """``(store document or None, {memory id: document})`` from the metadata branch's tip."""
        return read_metadata(self.git)


def _imported(commit: str, trailers: Trailers, tree: pygit2.Tree) -> ImportedCommit:
    blob: str | None = None
    if trailers.memory_path is not None and trailers.operation != "deleted" and trailers.skipped is None:
        found = blob_at(tree, trailers.memory_path)
        blob = str(found.id) if found is not None else None
    version = ImportedVersion.from_trailers(commit, trailers)
    return ImportedCommit(**{item.name: getattr(version, item.name) for item in fields(version)}, blob=blob)
