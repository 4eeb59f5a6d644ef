"""The TOML configuration, validated with pydantic, and the token it points at.

Where the file is (docs/design.md §4): ``--config FILE`` on the command line, else ``$MEMSYNC_CONFIG``, else
``memsync.toml`` in the platform's config folder. Every key is documented in ``config.example.toml``.
Errors name the key and the fix; the token itself never appears in one.
"""

from __future__ import annotations

import contextlib
import fnmatch
import ipaddress
import logging
import os
import stat
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from memsync.errors import ConfigError, RuleViolation
from memsync.locations import default_config_path
from memsync.rules import Dialect, parse_duration

log = logging.getLogger("memsync.config")

# Where the token is read from when the config names neither api.token_env nor api.token_file.
DEFAULT_TOKEN_ENV = "MEMSYNC_TOKEN"


def _duration(value: object) -> float:
    try:
        return parse_duration(value, "value")
    except RuleViolation as exc:
        raise ValueError(exc.detail) from None


Seconds = Annotated[float, BeforeValidator(_duration)]


class _Section(BaseModel):
    # A misspelt key is an error, never silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiConfig(_Section):
    dialect: Dialect
    base_url: str
    token_env: str | None = None
    token_file: Path | None = None
    timeout: Seconds = 30.0
    # A proxy URL for the API's requests; "" goes direct (as curl --proxy ""); unset: HTTPS_PROXY /
    # HTTP_PROXY / ALL_PROXY / NO_PROXY.
    proxy: str | None = None
    # A PEM bundle of the certificates to trust (a corporate TLS inspection's root); unset:
    # SSL_CERT_FILE / SSL_CERT_DIR when set, else the bundled certifi roots.
    ca_bundle: Path | None = None
    # Plain http:// to a host other than this machine sends the token in cleartext: refused unless true.
    allow_plain_http: bool = False

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError('must start with http:// or https://, e.g. "http://127.0.0.1:8765"')
        return value.rstrip("/")

    @field_validator("proxy")
    @classmethod
    def _proxy_url(cls, value: str | None) -> str | None:
        # "" is kept, not read as unset: it is how one says "direct" to a machine whose environment
        # names a proxy for everything else.
        if value and not value.startswith(("http://", "https://", "socks5://", "socks5h://")):
            raise ValueError('must be a proxy URL, e.g. "http://proxy.example.com:3128", or "" for none')
        return value

    @field_validator("ca_bundle")
    @classmethod
    def _expand_bundle(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @model_validator(mode="before")
    @classmethod
    def _one_token_source(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("token_env") is not None and data.get("token_file") is not None:
            raise ValueError(
                "set token_env (an environment variable name) or token_file, not both: memsync would"
                " not know which token to send"
            )
        if data.get("token_env") is None and data.get("token_file") is None:
            return {**data, "token_env": DEFAULT_TOKEN_ENV}
        return data


class MirrorConfig(_Section):
    root: Path
    # What memsync creates (mirrors, caches, spool, local backup remotes) is owner-only (0700/0600);
    # true lets the owner's group read it too (0750/0640), for a group that shares the mirrors.
    group_readable: bool = False

    @field_validator("root")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()


class StoresConfig(_Section):
    include: list[str] = Field(default_factory=lambda: ["*"])
    system_managed: Literal["any", "only", "exclude"] = "any"
    include_archived: bool = False

    def selects(self, store_id: str, name: str) -> bool:
        """Whether a store is selected by id or by a glob over its name."""
        return any(pattern == store_id or fnmatch.fnmatchcase(name, pattern) for pattern in self.include)


class PushConfig(_Section):
    # A push deleting at least 3 memories and more than this share of the store needs --force.
    max_delete_share: float = Field(default=0.5, ge=0.0, le=1.0)


class DaemonHttpConfig(_Section):
    # Declared before listen, so that listen's validator sees it. In a container the kubelet's probes
    # and Prometheus reach the pod on its own address, never on its loopback: there, and only where
    # the network is yours, `expose = true` lets listen be any address.
    expose: bool = False
    listen: str | None = None  # "127.0.0.1:9465"; off when unset

    @field_validator("listen")
    @classmethod
    def _loopback(cls, value: str | None, info: ValidationInfo) -> str | None:
        # /metrics names the stores: serve it on loopback only (a proxy can publish it on purpose).
        if value is None:
            return None
        host, sep, port = value.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not sep or not port.isdigit() or int(port) > 65535:
            raise ValueError(f'{value!r} is not host:port, e.g. "127.0.0.1:9465"')
        if info.data.get("expose"):
            return value
        if host != "localhost":
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ValueError(
                    f'{value!r} is not a loopback address; use e.g. "127.0.0.1:9465" or "[::1]:9465"'
                    " (or set daemon.http.expose = true to serve /metrics, which names your stores,"
                    " on a network you control, as in a Kubernetes pod)"
                )
        return value


class DaemonConfig(_Section):
    interval: Seconds = 300.0
    jitter: Seconds = 30.0
    debounce: Seconds = 0.25
    max_wait: Seconds = 5.0
    discovery_interval: Seconds = 900.0
    full_scan_interval: Seconds = 86400.0
    max_failures: int = Field(default=5, ge=1)
    shutdown_deadline: Seconds = 30.0
    # Watch the checkouts for saves. Off: no watcher at all; saves are picked up by the scheduled
    # cycles (backup fleets nobody edits).
    watch: bool = True
    # How: "auto" is inotify on Linux and watchdog (FSEvents, ReadDirectoryChangesW, kqueue)
    # elsewhere; "poll" stats the checkouts every poll_interval seconds where neither can run.
    watcher: Literal["auto", "inotify", "watchdog", "poll"] = "auto"
    poll_interval: Seconds = 2.0
    # At most this many inotify watches (one per folder of each checkout); None: as many as
    # fs.inotify.max_user_watches leaves. Past the limit the daemon does not watch (docs/daemon.md).
    max_watches: int | None = Field(default=None, ge=0)
    http: DaemonHttpConfig = Field(default_factory=DaemonHttpConfig)


class BackupRemote(_Section):
    url: str


class BackupConfig(_Section):
    remotes: list[BackupRemote] = Field(default_factory=list)


class LogConfig(_Section):
    format: Literal["text", "json"] = "text"
    level: Literal["debug", "info", "warning", "error"] = "info"


# A shard count this large is a typo: every listing scores each store once per shard.
MAX_SHARDS = 1024


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (written ``I/N``, 0 ≤ I < N); which stores a shard owns is
    decided by :mod:`memsync.engine.shards`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(value: object) -> Shard:
    """``"I/N"`` as a Shard; ValueError says what is wrong (the caller names where the value came from)."""
    if isinstance(value, Shard):
        return value
    text = value.strip() if isinstance(value, str) else ""
    index, sep, count = text.partition("/")
    if not (sep and index.isascii() and index.isdigit() and count.isascii() and count.isdigit()):
        raise ValueError(f"{value!r} is not I/N (shard I of N shards, 0 ≤ I < N), e.g. 0/4")
    shard = Shard(int(index), int(count))
    if not 1 <= shard.count <= MAX_SHARDS:
        raise ValueError(f"{value!r}: the shard count N must be between 1 and {MAX_SHARDS}")
    if shard.index >= shard.count:
        raise ValueError(
            f"{value!r}: the shard index I must be below the count N (0 ≤ I < N): the shards of"
            f" {shard.count} are 0/{shard.count} to {shard.count - 1}/{shard.count}"
        )
    return shard


def _shard(value: object) -> Shard | None:
    return None if value is None else parse_shard(value)


# Stores worked on at once by default: across a network a store's no-op pull is one round trip
# plus a few milliseconds of CPU, so about 8 in flight keep one core busy (benchmarks/fleet_bench.py).
DEFAULT_CONCURRENCY = 8
MAX_CONCURRENCY = 256


class FleetConfig(_Section):
    """``[fleet]``: how many stores this machine works on at once, and its share of the stores when
    several machines split them."""

    # pull, backup, verify, sync and the daemon's cycles; --jobs N overrides it.
    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=MAX_CONCURRENCY)
    # Set here for a machine with a config of its own; --shard, MEMSYNC_SHARD and a StatefulSet's
    # MEMSYNC_SHARDS take precedence (docs/kubernetes.md).
    shard: Annotated[Shard | None, BeforeValidator(_shard)] = None


class AwarenessConfig(_Section):
    """One ``[[awareness]]`` table, a view the daemon keeps current (docs/awareness.md): an ``identity``
    and ``template`` (Forward), ``stores`` (every dialect) or a ``session`` (Anthropic, Cloud)."""

    identity: str | None = None
    template: str | None = None
    stores: list[str] | None = None
    session: str | None = None

    @field_validator("identity", "template", "session")
    @classmethod
    def _plain_id(cls, value: str | None) -> str | None:
        if value is not None and (value == "" or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value)):
            raise ValueError("must be a non-empty id without control characters, as the API knows it")
        return value

    @model_validator(mode="after")
    def _one_form(self) -> AwarenessConfig:
        pair = self.identity is not None or self.template is not None
        if pair + (self.stores is not None) + (self.session is not None) != 1 or (
            pair and (self.identity is None or self.template is None)
        ):
            raise ValueError(
                "an [[awareness]] table takes identity and template (forward), stores = [...] or"
                ' session = "...": exactly one of them'
            )
        if self.stores is not None and (not self.stores or len(set(self.stores)) != len(self.stores)):
            raise ValueError("stores lists one or more store ids, each once")
        return self

    @property
    def key(self) -> str:
        """The view's name: ``identity/template``, ``stores/<ids>`` or ``sessions/<id>``."""
        if self.stores is not None:
            return "stores/" + ",".join(self.stores)
        if self.session is not None:
            return f"sessions/{self.session}"
        return f"{self.identity}/{self.template}"


class Config(_Section):
    api: ApiConfig
    mirror: MirrorConfig
    stores: StoresConfig = Field(default_factory=StoresConfig)
    push: PushConfig = Field(default_factory=PushConfig)
    daemon: DaemonConfig = Field(default_factory=DaemonConfig)
    backup: BackupConfig = Field(default_factory=BackupConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    awareness: list[AwarenessConfig] = Field(default_factory=list)
    fleet: FleetConfig = Field(default_factory=FleetConfig)
    source: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _awareness_fits_the_dialect(self) -> Config:
        forward = self.api.dialect is Dialect.FORWARD
        for view in self.awareness:
            if view.identity is not None and not forward:
                raise ValueError(
                    f"[[awareness]] with identity and template needs mounts, which only the forward dialect"
                    f' has (api.dialect is {self.api.dialect.value}); use stores = [...] or session = "..."'
                )
            if view.session is not None and forward:
                raise ValueError(
                    "[[awareness]] with a session needs the anthropic or cloud dialect; on forward use"
                    " identity and template, or stores = [...]"
                )
        keys = [view.key for view in self.awareness]
        if len(set(keys)) != len(keys):
            raise ValueError("[[awareness]] names the same view twice; keep one")
        return self

    def with_shard(self, shard: Shard | None) -> Config:
        """This config with ``fleet.shard`` replaced (the command line's or the environment's shard)."""
        return self.model_copy(update={"fleet": self.fleet.model_copy(update={"shard": shard})})

    def with_concurrency(self, concurrency: int | None) -> Config:
        """This config with ``fleet.concurrency`` replaced (``--jobs N``); None keeps it."""
        if concurrency is None:
            return self
        return self.model_copy(update={"fleet": self.fleet.model_copy(update={"concurrency": concurrency})})

    def token_source(self) -> str:
        """Where :meth:`token` reads the token: what a message may name (never the token)."""
        if self.api.token_env is not None:
            return f"the environment variable {self.api.token_env}"
        return f"api.token_file {self.api.token_file}"

    def token(self) -> str:
        """The API token, from ``token_env`` (``MEMSYNC_TOKEN`` unless set) or ``token_file``."""
        if self.api.token_env is not None:
            value = os.environ.get(self.api.token_env, "")
            if not value.strip():
                raise ConfigError(
                    f"api.token_env: the environment variable {self.api.token_env} is not set or empty;"
                    " export it with your API token (or set api.token_file to a file holding it)"
                )
            return value.strip()
        assert self.api.token_file is not None
        return read_token_file(self.api.token_file.expanduser(), self.mirror.root)


def read_token_file(path: Path, mirror_root: Path) -> str:
    """Read a token file that only its owner can read and that lies outside every mirror."""
    resolved = path.resolve()
    root = mirror_root.resolve()
    if resolved == root or root in resolved.parents:
        raise ConfigError(
            f"api.token_file: {path} is inside the mirror root {mirror_root}; a token there could be"
            " committed. Move it elsewhere (e.g. the platform's config folder)"
        )
    try:
        info = resolved.stat()
    except OSError as exc:
        raise ConfigError(f"api.token_file: cannot read {path}: {exc.strerror}") from None
    if sys.platform == "win32":
        # Windows keeps no POSIX mode bits (every file shows 0o666 or 0o444): what keeps a file
        # private there is its folder's ACL, and a profile folder's grants its owner alone.
        home = Path.home().resolve()
        if home not in resolved.parents:
            raise ConfigError(
                f"api.token_file: {path} is outside your profile folder {home}, whose permissions"
                " keep it private; move it there (e.g. the platform's config folder)"
            )
    elif info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        if keeps_modes(resolved.parent) is not False:
            raise ConfigError(f"api.token_file: {path} is readable by group or others; run: chmod 600 {path}")
        # exFAT, FAT, ntfs-3g without "permissions": every file shows the mount's mode and chmod
        # changes nothing, so refusing would leave the token unusable there; who may read it is
        # decided by the mount options (docs/platforms.md).
        log.warning(
            "api.token_file: %s is on a filesystem that keeps no permissions (every file there shows"
            " mode %o, whatever chmod says), so other users of this machine may read the token: keep"
            " it on a drive that keeps them, or mount this one with uid=<your uid> and umask=077"
            " (docs/platforms.md)",
            path,
            stat.S_IMODE(info.st_mode),
        )
    value = resolved.read_text(encoding="utf-8").strip()
    if not value:
        raise ConfigError(f"api.token_file: {path} is empty; put your API token in it")
    return value


def keeps_modes(folder: Path) -> bool | None:
    """Whether a mode set on a file in ``folder`` is the mode it then has: False on a filesystem that
    keeps no mode bits (exFAT, FAT, some NTFS and network mounts), None when no file can be made
    there to find out."""
    try:
        handle, name = tempfile.mkstemp(prefix=".memsync-mode-probe-", dir=folder)
    except OSError:
        return None
    try:
        os.close(handle)
        os.chmod(name, 0o600)
        first = stat.S_IMODE(os.stat(name).st_mode)
        os.chmod(name, 0o640)
        second = stat.S_IMODE(os.stat(name).st_mode)
        return (first, second) == (0o600, 0o640)
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


def load_config(path: str | Path | None = None) -> Config:
    """Load and validate the config file (``None``: the platform default)."""
    file = Path(path).expanduser() if path is not None else default_config_path()
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"no config file at {file}; copy config.example.toml there, or pass --config FILE"
            " (or set MEMSYNC_CONFIG)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {file}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    return parse_config(data, source=file)


def parse_config(data: dict[str, Any], *, source: Path | None = None) -> Config:
    """Validate a config mapping; relative paths are taken relative to the config file's folder."""
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from None
    if source is not None:
        base = source.parent
        updates: dict[str, Any] = {"source": source}
        if not config.mirror.root.is_absolute():
            updates["mirror"] = config.mirror.model_copy(update={"root": base / config.mirror.root})
        api: dict[str, Path] = {}
        if config.api.token_file is not None and not config.api.token_file.expanduser().is_absolute():
            api["token_file"] = base / config.api.token_file
        if config.api.ca_bundle is not None and not config.api.ca_bundle.is_absolute():
            api["ca_bundle"] = base / config.api.ca_bundle
        if api:
            updates["api"] = config.api.model_copy(update=api)
        config = config.model_copy(update=updates)
    return config


def _describe(exc: ValidationError, source: Path | None) -> str:
    where = f"{source}: " if source is not None else ""
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            problems.append(f"{key}: unknown key; see config.example.toml for the valid keys")
        elif error["type"] == "missing":
            problems.append(f"{key}: required; add it to the config")
        else:
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{key}: {message}")
    return where + "; ".join(problems)
