"""Logging for the daemon: text or JSON lines on stderr, with secrets scrubbed from every record.

docs/design.md §6: the token never lands in a log line. Every record passes :class:`SecretFilter` on the
handler, whoever logged it (memsync, httpx, APScheduler): the message, the arguments, the
formatted exception and any extra string field are scrubbed of the token's value, of ``Authorization``
and ``x-api-key`` header values, and of the userinfo of URLs (``https://user:pass@host``).
Untrusted paths are escaped by the code that logs them (``memsync.mirror.escape_for_terminal``).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from memsync.config import LogConfig

REDACTED = "[redacted]"

# Tokens shorter than this are not scrubbed literally: replacing e.g. "a" everywhere would mangle
# every line while protecting nothing (no real API token is that short).
_MIN_SECRET_LENGTH = 6

# `Authorization: Bearer x`, `authorization=x`, `'x-api-key': 'x'` (a repr of a header mapping) ...
_HEADER = re.compile(
    r"""(?ix)
    (?P<name>\b(?:proxy-)?authorization|\bx-api-key)
    (?P<sep>['"]?\s*[:=,]\s*(?:b?['"])?)
    (?P<scheme>(?:bearer|basic|token|digest)\s+)?+
    (?!\[redacted\])(?P<value>[^\s'",;)}\]]+)
    """
)
# scheme://user:password@host -> scheme://[redacted]@host
_USERINFO = re.compile(r"(?i)\b(?P<scheme>[a-z][a-z0-9+.\-]*://)(?P<userinfo>[^/\s@'\"<>]+)@")

# Extra fields a record may carry (``extra={...}``) that the JSON format writes out.
_EXTRA_FIELDS = ("store", "trigger", "result", "duration_s", "imported", "pushed", "paths", "error")


class SecretFilter(logging.Filter):
    """Scrubs secrets from records in place; attach it to a handler so it sees every logger's records."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets = sorted({s for s in secrets if len(s) >= _MIN_SECRET_LENGTH}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        text = _HEADER.sub(_header_replacement, text)
        return _USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not drop the record
            message = f"{record.msg!r} {record.args!r}"
        record.msg = self.scrub(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self.scrub(record.stack_info)
        for name in _EXTRA_FIELDS:
            value = record.__dict__.get(name)
            if isinstance(value, str):
                record.__dict__[name] = self.scrub(value)
        return True


def _header_replacement(match: re.Match[str]) -> str:
    return f"{match.group('name')}{match.group('sep')}{match.group('scheme') or ''}{REDACTED}"


class TextFormatter(logging.Formatter):
    """``2026-01-02T03:04:05.678Z INFO memsync.daemon: message``."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return _timestamp(record)

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")


class JsonLineFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``logger``, ``message``, extras, ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if name in record.__dict__:
                entry[name] = record.__dict__[name]
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def configure_logging(
    config: LogConfig, *, secrets: Iterable[str] = (), stream: TextIO | None = None
) -> logging.Handler:
    """Send every logger's records to ``stream`` (stderr) in the configured format, secrets scrubbed.

    Replaces the handlers of the root logger (the daemon owns its process). Returns the handler.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLineFormatter() if config.format == "json" else TextFormatter())
    handler.addFilter(SecretFilter(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    level = getattr(logging, config.level.upper())
    root.setLevel(level)
    # Libraries are chatty at info (one line per HTTP request, per scheduler job): only their warnings
    # unless the user asked for debug.
    for noisy in ("httpx", "apscheduler"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if level <= logging.DEBUG else logging.WARNING)
    # Below warnings these trace every socket operation and lock attempt (or the
    # time zone lookup): never useful here, and they would drown the daemon's own lines.
    for tracer in ("httpcore", "filelock", "tzlocal"):
        logging.getLogger(tracer).setLevel(logging.WARNING)
    return handler
