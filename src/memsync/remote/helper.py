"""git's remote-helper protocol for ``memstore::`` URLs (gitremote-helpers(7): ``fetch`` and ``push``).

git runs ``git-remote-memstore <remote> <url>`` with ``GIT_DIR`` set, writes commands on stdin and
reads the answers on stdout; anything for the user goes to stderr.

- ``list``: the store is pulled, exactly as ``memsync pull`` does, into a private mirror under
  ``$GIT_DIR/memstore/``; its tip is the remote's ``refs/heads/main``. A pull that finds nothing new
  costs one request, as a no-op ``memsync pull`` of a store does.
- ``fetch``: git's own fetch copies the mirror's history into the clone (the commits ``memsync
  pull`` makes, so a clone and a mirror agree commit for commit).
- ``push``: the pushed commit's files are staged in the private mirror's working tree and one sync
  cycle sends the difference, every write with its ``content_sha256`` precondition. Before anything
  is written, the store must still be where the push builds on (else git says ``rejected (fetch
  first)``), no file may be refused, and the delete and rewind guards must pass (``git push --force``
  lifts them). The store's history is then imported; the user's commit never becomes the store's.

What a push builds on: the store's tip as last fetched, or the commit of the clone's previous push
while the store is still where that push left it (``pushed`` under the private mirror records the
pair), so a second push before a pull is neither refused nor sends the first push's files again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, TextIO

from memsync.api import Client, Store, open_client
from memsync.errors import EXIT_FAILED, EXIT_USAGE, ConfigError, MemsyncError, UsageError
from memsync.mirror import Clone, escape_for_terminal
from memsync.remote.location import (
    StoreLocation,
    git,
    git_config,
    git_config_all,
    parse_store_url,
    read_token,
)
from memsync.sync.cycle import run_cycle
from memsync.sync.pull import PullReport, pull_store
from memsync.sync.push import DEFAULT_MAX_DELETE_SHARE
from memsync.sync.status import mirror_status

MAIN = "refs/heads/main"
DAY = 24 * 3600.0


class RemoteHelper:
    """One ``git-remote-memstore`` run: the store at ``location`` for the repository at ``git_dir``."""

    def __init__(self, location: StoreLocation, git_dir: Path, out: TextIO) -> None:
        self.location = location
        self.git_dir = git_dir
        self.out = out
        key = hashlib.sha256(location.url.encode("utf-8")).hexdigest()[:16]
        # The private mirror: memsync's mirror root layout, so pull and sync work on it unchanged.
        self.root = git_dir / "memstore" / key
        self.mirror = self.root / location.store_id
        self.private_ref = f"refs/memstore/{key}/main"
        self.clone = Clone(git_dir, self.mirror)
        self._client: Client | None = None
        self.verbosity = 1
        self.force = False
        # The store and the tip the last ``list`` pulled: git lists right before it pushes, in the
        # same run, so the push builds on that pull instead of making its own.
        self._pulled: tuple[Store, PullReport] | None = None

    # --- the protocol ------------------------------------------------------------------------------

    def serve(self, commands: TextIO) -> None:
        lines = _lines(commands)
        for line in lines:
            if line == "":
                return
            if line == "capabilities":
                self._answer("fetch", "push", "option", "")
            elif line.startswith("option "):
                self._answer(self._option(line.removeprefix("option ")))
            elif line in ("list", "list for-push"):
                self._answer(*self._list(for_push=line == "list for-push"), "")
            elif line.startswith("fetch "):
                _batch(lines)  # every ref is the tip of the one history the mirror holds
                self._fetch()
                self._answer("")
            elif line.startswith("push "):
                batch = [line, *_batch(lines)]
                self._answer(*self._push(batch), "")
            else:
                raise UsageError(f"git asked the memstore helper for {line!r}, which it does not speak")

    def _answer(self, *lines: str) -> None:
        self.out.write("".join(f"{line}\n" for line in lines))
        self.out.flush()

    def _option(self, option: str) -> str:
        name, _, value = option.partition(" ")
        if name == "verbosity":
            self.verbosity = int(value)
            return "ok"
        if name == "force":
            self.force = value == "true"
            return "ok"
        if name == "progress":
            return "ok"
        return "unsupported"

    def _say(self, message: str) -> None:
        if self.verbosity > 0:
            sys.stderr.write(f"memstore: {message}\n")
            sys.stderr.flush()

    # --- list and fetch ------------------------------------------------------------------------------

    def _list(self, *, for_push: bool) -> list[str]:
        tip = self._pull()
        if tip is None:
            return []
        shown = tip
        if for_push:
            # The store still where this clone's last push left it, and that history not fetched
            # yet: the branch still builds on the pushed commit, so git's fast-forward check must
            # see that one. Once fetched, the branch is rebased onto the store's commits.
            pushed = self._pushed()
            fetched = git(self.git_dir, "rev-parse", "--verify", "--quiet", self.private_ref)
            if pushed is not None and pushed[0] == tip and fetched != tip:
                shown = pushed[1]
        return [f"{shown} {MAIN}", f"@{MAIN} HEAD"]

    def _pull(self) -> str | None:
        """Import what is new in the store into the private mirror; its tip."""
        self.clone.configure()
        if git_config(self.git_dir, "pull.rebase") is None:
            # After a push the store's history replaces the pushed commits (one commit per version,
            # ids from the API): git pull rebases the branch onto it, dropping what is already there.
            git(self.git_dir, "config", "pull.rebase", "true")
        client = self.client()
        self._pulled = None
        if self.mirror.joinpath(".git").is_dir() and not self.mirror.joinpath(".git", "HEAD").exists():
            # Not a repository: what a killed import's git fast-import wrote on its way out (it ends
            # its pack at end of input). The private mirror is the store's copy: made again.
            self._say("warning: the private mirror was left incomplete by a killed run; importing again")
            shutil.rmtree(self.mirror)
        full_scan = self._full_scan_due()
        store = self._store(refresh=full_scan)
        report = pull_store(client, store, self.root, skip_versions=self._skip(), full_scan=full_scan)
        if report.ok and full_scan:
            (self.root / "full-scan").write_text(f"{time.time()!r}\n", encoding="ascii")
        for warning in report.warnings:
            self._say(f"warning: {warning}")
        if report.rewrite is not None:
            self._say(
                "the store's history was rewritten (a redaction or a new path spelling): git reports"
                " a forced update of the remote-tracking branch; rebase your work onto it"
            )
        if report.stopped_at_version is not None:
            version = report.stopped_at_version
            raise MemsyncError(
                f"stopped before version {version}: {report.stopped_because}. Nothing of it was"
                f" written; to import past it: git config --add memstore.skipVersion {version}"
                f" (a first clone: git clone -c memstore.skipVersion={version} …)"
            )
        if not report.ok:
            raise MemsyncError(report.error or "the pull failed")
        if report.imported:
            self._say(f"imported {report.imported} version(s) of {self.location.store_id}")
        self._pulled = (store, report)
        return report.tip

    def _store(self, *, refresh: bool) -> Store:
        """The store's document: read once, then kept beside the private mirror and read again with
        each full scan. A clone holds history only, and the document feeds only the private
        mirror's metadata snapshot, so a no-op fetch costs the one listing of new versions."""
        cached = self.root / "store.json"
        if not refresh:
            try:
                found = Store.model_validate_json(cached.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass
            else:
                if found.id == self.location.store_id:
                    return found
        store = self.client().get_store(self.location.store_id)
        self.root.mkdir(parents=True, exist_ok=True)
        cached.write_text(store.model_dump_json(), encoding="utf-8")
        return store

    def _number(self, key: str, default: float) -> float:
        """A number from git config, or ``default``; :class:`ConfigError` naming the key if not one."""
        value = git_config(self.git_dir, key)
        if value is None:
            return default
        try:
            return float(value)
        except ValueError:
            raise ConfigError(
                f"git config {key} is {value!r}, not a number: git config {key} <number>"
            ) from None

    def _skip(self) -> frozenset[str]:
        return frozenset(git_config_all(self.git_dir, "memstore.skipVersion"))

    def _full_scan_due(self) -> bool:
        """Whether this fetch lists the whole history, as the daemon does every
        ``daemon.full_scan_interval``: late versions and deletes whose tombstone expired are found
        only so. ``memstore.fullScanInterval`` in seconds (default a day; 0: every fetch)."""
        interval = self._number("memstore.fullScanInterval", DAY)
        try:
            last = float((self.root / "full-scan").read_text(encoding="ascii"))
        except (OSError, ValueError):
            # The first import lists everything anyway: its time starts the interval.
            if self.mirror.joinpath(".git").is_dir():
                return True
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "full-scan").write_text(f"{time.time()!r}\n", encoding="ascii")
            return False
        return interval <= 0 or time.time() - last >= interval

    def _fetch(self) -> None:
        self.clone.copy_history(self.private_ref)

    # --- push ----------------------------------------------------------------------------------------

    def _push(self, batch: list[str]) -> list[str]:
        answers = []
        for line in batch:
            spec = line.removeprefix("push ")
            forced = spec.startswith("+") or self.force
            source, _, destination = spec.lstrip("+").partition(":")
            if destination != MAIN:
                answers.append(f"error {destination} a store has one branch: push to main")
            elif not source:
                answers.append(f"error {destination} a store's main cannot be deleted")
            else:
                try:
                    answers.append(self._push_main(source, destination, forced=forced))
                except MemsyncError as exc:
                    # Said per ref, as git expects, rather than ending the helper mid-protocol.
                    answers.append(f"error {destination} {_one_line(str(exc))}")
        return answers

    def _push_main(self, source: str, destination: str, *, forced: bool) -> str:
        commit = self._resolve(source)
        # Not under the store's lock as a whole: the pull and the cycle each take it themselves.
        if self._pulled is None:
            self._pull()
        assert self._pulled is not None
        store, pulled = self._pulled
        tip = pulled.tip
        self._pulled = None  # a second ref of the batch pulls again: the first one moved the store
        client = self.client()
        if not forced and self._builds_on(commit, tip) is None:
            return f"error {destination} fetch first"
        if tip is not None:
            # What a push cut short left (a kill between writes) is the clone's to merge, not ours;
            # the files are the pushed commit's next.
            self.clone.discard_local(files=False)
        problems = self.clone.stage(commit)
        share = self._number("memstore.maxDeleteShare", DEFAULT_MAX_DELETE_SHARE)
        waiting = mirror_status(self.mirror, self.location.dialect, max_delete_share=share)
        refusal = None
        if problems:
            refusal = "not memories, nothing written: " + "; ".join(problems)
        elif waiting.rejected:
            refusal = "refused, nothing written: " + "; ".join(
                f"{r['path']}: {r['reason']}" for r in waiting.rejected
            )
        elif waiting.withheld and not forced:
            refusal = "; ".join(f"{r['path']}: {r['reason']}" for r in waiting.withheld)
            # The guards --force lifts say so; the store's memory limit holds whatever the flag.
            if any("--force" in r["reason"] for r in waiting.withheld):
                refusal += " (git push --force sends it)"
        if refusal is not None:
            # The private checkout back at the store's tip: a later fetch finds it clean.
            self.clone.discard_local()
            return f"error {destination} {_one_line(refusal)}"
        # The cycle builds on list for-push's pull (the one listing of a push): the writes'
        # preconditions catch a store that moved since.
        done = run_cycle(
            client,
            store,
            self.root,
            force=forced,
            max_delete_share=share,
            skip_versions=self._skip(),
            pulled=pulled,
        )
        # Said whether or not the cycle went through: a push that fails half way says what it wrote.
        for entry in done.push.pushed if done.push is not None else []:
            moved = f" to {escape_for_terminal(entry['to'])}" if "to" in entry else ""
            self._say(f"written: {entry['action']} {escape_for_terminal(entry['path'])}{moved}")
        if not done.ok or done.conflicts or done.rejected:
            what = done.error or "; ".join(
                [f"conflict at {path}" for path in done.conflicts]
                + [f"{r['path']}: {r['reason']}" for r in done.rejected]
            )
            # A conflict (the store moved since git listed it) is the clone's to merge: the
            # private mirror keeps none that would refuse every later push.
            self.clone.discard_local()
            return f"error {destination} {_one_line(what)}"
        if done.pull.tip is not None:
            self._record_push(done.pull.tip, commit)
        return f"ok {destination}"

    def _builds_on(self, commit: str, tip: str | None) -> str | None:
        """The commit of the store's history (or of this clone's last push) ``commit`` builds on."""
        if tip is None:
            return commit
        pushed = self._pushed()
        candidates = [tip] + ([pushed[1]] if pushed is not None and pushed[0] == tip else [])
        for candidate in candidates:
            if self._is_ancestor(candidate, commit):
                return candidate
        return None

    def _resolve(self, source: str) -> str:
        found = git(self.git_dir, "rev-parse", "--verify", f"{source}^{{commit}}")
        if found is None:
            raise UsageError(f"{source} names no commit in this repository")
        return found

    def _is_ancestor(self, ancestor: str, commit: str) -> bool:
        return git(self.git_dir, "merge-base", "--is-ancestor", ancestor, commit) is not None

    def _pushed(self) -> tuple[str, str] | None:
        try:
            record = json.loads((self.root / "pushed.json").read_text(encoding="utf-8"))
            return str(record["store_tip"]), str(record["commit"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _record_push(self, store_tip: str, commit: str) -> None:
        target = self.root / "pushed.json"
        target.write_text(json.dumps({"store_tip": store_tip, "commit": commit}), encoding="utf-8")

    # --- the API ---------------------------------------------------------------------------------

    def client(self) -> Client:
        if self._client is None:
            ca = git_config(self.git_dir, "http.sslCAInfo")
            self._client = open_client(
                self.location.dialect,
                self.location.base_url,
                read_token(self.location, self.git_dir),
                proxy=git_config(self.git_dir, "http.proxy"),
                ca_bundle=Path(ca) if ca else None,
                allow_plain_http=git_config(self.git_dir, "memstore.allowPlainHttp") == "true",
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def _lines(stream: TextIO) -> Iterator[str]:
    for line in stream:
        yield line.rstrip("\n")


def _batch(lines: Iterator[str]) -> list[str]:
    """The rest of a batch of ``fetch`` or ``push`` lines, up to the blank line that ends it."""
    batch = []
    for line in lines:
        if line == "":
            break
        batch.append(line)
    return batch


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> NoReturn:
    """``git-remote-memstore REMOTE URL``, run by git for ``memstore::URL``."""
    # As memsync.cli.main does: httpx's own command line (rich, pygments) is never run here.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or "GIT_DIR" not in os.environ:
        sys.stderr.write(
            "git-remote-memstore is run by git: git clone memstore::<store URL> (docs/remote-helper.md)\n"
        )
        sys.exit(EXIT_USAGE)
    code = 0
    helper: RemoteHelper | None = None
    try:
        helper = RemoteHelper(parse_store_url(args[1]), Path(os.environ["GIT_DIR"]).absolute(), sys.stdout)
        helper.serve(sys.stdin)
    except MemsyncError as exc:
        sys.stderr.write(f"memstore: error: {exc}\n")
        code = exc.exit_code
    except BrokenPipeError:
        code = EXIT_FAILED
    finally:
        if helper is not None:
            with contextlib.suppress(MemsyncError):
                helper.close()
    sys.exit(code)
