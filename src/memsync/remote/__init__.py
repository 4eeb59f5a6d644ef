"""``git-remote-memstore``: a memory store as a plain git remote (docs/remote-helper.md).

``git clone memstore::<store URL>`` runs :func:`main` as git's remote helper for that URL. The
store's history is imported as ``memsync pull`` imports it, into a private mirror under the clone's
``.git/memstore/``, and git fetches it from there: a clone and a mirror of one store hold the same
commits.
"""

from memsync.remote.helper import RemoteHelper, main
from memsync.remote.location import StoreLocation, parse_store_url

__all__ = ["RemoteHelper", "StoreLocation", "main", "parse_store_url"]
