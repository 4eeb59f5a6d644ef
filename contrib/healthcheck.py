#!/usr/bin/env python3
"""Ask a running ``memsync daemon`` for its ``/healthz`` (docs/kubernetes.md).

The container image installs this as ``memsync-healthcheck``: its HEALTHCHECK runs it as is, the
Kubernetes manifests run ``memsync-healthcheck --alive`` as the liveness probe.

- exit 0 when /healthz answers 200 ("ok"): every store cycles, nothing is paused;
- with ``--alive``, exit 0 on any HTTP answer, 503 "starting" or "paused" included. A restart does not
  help a paused store (its error needs a person) and kills a first import still under way, so the
  liveness probe only asks whether the daemon answers; readiness and the memsync_store_paused metric
  report the rest;
- exit 1 otherwise, with the reason on stderr.

Standard library only, so that it runs in the image without importing memsync.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:9465/healthz"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memsync-healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("MEMSYNC_HEALTHZ_URL", DEFAULT_URL),
        help=f"the daemon's /healthz (default: $MEMSYNC_HEALTHZ_URL, else {DEFAULT_URL})",
    )
    parser.add_argument("--alive", action="store_true", help="any HTTP answer will do (503 too)")
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds to wait for the answer")
    options = parser.parse_args(argv)
    # Never through a proxy from the environment (HTTP_PROXY): the daemon is on this host.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(options.url, timeout=options.timeout) as answer:
            status = answer.status
            body = answer.read(2000).decode("utf-8", "replace").strip()
    except urllib.error.HTTPError as exc:
        status = exc.code
        body = exc.read(2000).decode("utf-8", "replace").strip()
    except (OSError, ValueError) as exc:
        print(f"memsync-healthcheck: no answer from {options.url}: {exc}", file=sys.stderr)
        return 1
    if status == 200 or options.alive:
        return 0
    print(f"memsync-healthcheck: {options.url} answered {status}: {body}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
