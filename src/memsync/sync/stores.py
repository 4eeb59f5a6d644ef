"""Which stores a command works on: the configured selection, narrowed by names on the command line,
then by this machine's shard (``fleet.shard``: memsync.engine.shards)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memsync.api import Client, Store, open_client
from memsync.engine.shards import owner, owns
from memsync.errors import ConfigError, UsageError
from memsync.mirror import Origin

if TYPE_CHECKING:  # the remote helper selects no stores and reads no config: it does not build its models
    from memsync.config import Config, Shard

# Connections one store's work may hold at once: a content fetch's requests in flight (at most 16,
# memsync.api) and a few besides.
CONNECTIONS_PER_STORE = 20


def client_for(config: Config, **options: object) -> Client:
    """A client for the configured API; the token is read here and handed over, never stored.

    Its connection pool is sized for ``fleet.concurrency`` stores at once, each through its own
    :meth:`Client.share` copy (memsync.sync.fleet).
    """
    options.setdefault("max_connections", CONNECTIONS_PER_STORE * config.fleet.concurrency)
    api = config.api
    options.setdefault("proxy", api.proxy)
    options.setdefault("ca_bundle", api.ca_bundle)
    options.setdefault("allow_plain_http", api.allow_plain_http)
    return open_client(api.dialect, api.base_url, config.token(), timeout=api.timeout, **options)


@dataclass
class Selection:
    stores: list[Store] = field(default_factory=list)
    # Mirrors in the root whose store the API does not list (deleted, or out of this token's sight):
    # each mirror is kept and reported as not found where it was looked for.
    deleted_remotely: list[str] = field(default_factory=list)
    api_base: str = ""
    # How many of the root's mirrors the API does list: the evidence that it is their API at all.
    mirrors_listed: int = 0
    # How many stores the API listed, archived ones and those the config leaves out included.
    listed: int = 0

    def absence(self, store_id: str) -> str:
        """Why ``store_id``'s mirror has no store here, with how far the evidence goes."""
        note = (
            f"not found at {self.api_base}: the API does not list it (deleted, or this token cannot see"
            " it); its mirror is kept"
        )
        if self.mirrors_listed == 0:
            note += (
                "; none of the stores mirrored here is listed there either, so check api.base_url,"
                " api.dialect and the token before taking it for deleted"
            )
        return note

    def nothing_listed(self, config: Config) -> str | None:
        """What to check when the API lists no store at all (a wrong dialect or URL answers so, as
        does an account without stores), or None when it lists some."""
        if self.listed:
            return None
        return (
            f"the API at {self.api_base} lists no store in the {config.api.dialect.value!r} dialect for"
            f" the token from {config.token_source()}: if your stores are there, check api.dialect"
            " (forward, cloud or anthropic), api.base_url and the token"
        )


def select_stores(
    client: Client, config: Config, named: tuple[str, ...] = (), *, include_archived: bool | None = None
) -> Selection:
    """The stores to work on: every listed store the config selects, or those named (id or name glob).

    A store named on the command line is taken even if it is archived; ``include_archived`` overrides
    the config (backups take archived stores regardless). Unknown names are a usage error. With
    ``fleet.shard`` set, only the stores that shard owns are kept, mirrors of deleted stores too; a
    name that only matches stores of other shards is a usage error naming their shards.
    """
    archived_too = config.stores.include_archived if include_archived is None else include_archived
    mirrors = existing_mirrors(config.mirror.root)
    _check_dialect(mirrors, client)
    listed = list(client.list_stores(include_archived=True))
    selection = Selection(api_base=client.base_url, listed=len(listed))
    if named:
        matched: set[str] = set()
        for store in listed:
            hits = [n for n in named if n == store.id or fnmatch.fnmatchcase(store.name, n)]
            if hits:
                matched.update(hits)
                selection.stores.append(store)
        unknown = [n for n in named if n not in matched]
        if unknown:
            raise UsageError(
                f"no store matches {', '.join(unknown)}; `memsync stores` lists the stores this token sees"
            )
    else:
        mode = config.stores.system_managed
        for store in listed:
            if store.archived and not archived_too:
                continue
            if mode == "only" and not store.system_managed:
                continue
            if mode == "exclude" and store.system_managed:
                continue
            if config.stores.selects(store.id, store.name):
                selection.stores.append(store)
    known = {store.id for store in listed}
    selection.deleted_remotely = [mirror.name for mirror in mirrors if mirror.name not in known]
    selection.mirrors_listed = len(mirrors) - len(selection.deleted_remotely)
    if named:
        selection.deleted_remotely = [s for s in selection.deleted_remotely if s in named]
    shard = config.fleet.shard
    if shard is not None:
        if named:
            _check_named_in_shard(selection.stores, named, shard)
        selection.stores = [store for store in selection.stores if owns(shard, store.id)]
        # A deleted store's mirror is reported (and backed up) by its owner alone, like a live one.
        selection.deleted_remotely = [s for s in selection.deleted_remotely if owns(shard, s)]
    return selection


def _check_dialect(mirrors: list[Path], client: Client) -> None:
    """Stop before any listing is believed when the root's mirrors came from another dialect: its
    listing of this server would leave out every store they mirror (docs/mirror.md, "Origin")."""
    others: dict[str, list[str]] = {}
    for mirror in mirrors:
        origin = Origin.read(mirror)
        if origin is not None and origin.dialect != client.dialect.value:
            others.setdefault(origin.dialect, []).append(f"{mirror.name} from {origin.api_base}")
    if not others:
        return
    dialect, made = next(iter(others.items()))
    more = f" and {len(made) - 1} more" if len(made) > 1 else ""
    raise ConfigError(
        f'api.dialect is "{client.dialect.value}", but the mirrors under {mirrors[0].parent} were made'
        f' in the "{dialect}" dialect ({made[0]}{more}): set api.dialect = "{dialect}" in the config,'
        " or give this API its own mirror.root; nothing was changed"
    )


def _check_named_in_shard(stores: list[Store], named: tuple[str, ...], shard: Shard) -> None:
    elsewhere = []
    for name in named:
        hits = [store for store in stores if name == store.id or fnmatch.fnmatchcase(store.name, name)]
        if hits and not any(owns(shard, store.id) for store in hits):
            owners = sorted({owner(store.id, shard.count) for store in hits})
            elsewhere.append(f"{name} (shard {', '.join(f'{i}/{shard.count}' for i in owners)})")
    if elsewhere:
        raise UsageError(
            f"{', '.join(elsewhere)}: not in shard {shard}; run it on its shard, or with --shard 0/1"
            " (one shard owning every store); `memsync stores --shard I/N` shows the assignment"
        )


def existing_mirrors(root: Path) -> list[Path]:
    """Mirror folders under ``root`` (one per store id)."""
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if p.is_dir() and p.name.startswith("memstore_") and (p / ".git").is_dir()
    )
