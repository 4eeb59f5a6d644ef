"""The client's mount calls against the reference server (Forward), and their refusal elsewhere."""

from __future__ import annotations

import pytest

from memsync.api import Conflict, NotFound, open_client
from memsync.errors import UsageError
from memsync.rules import Dialect
from tests.awareness.conftest import Pair
from tests.support.server import ServerProcess


def test_mount_list_and_unmount(pair: Pair) -> None:
    store = pair.store({"a.md": "a\n"})
    mounted = pair.client.mount_store(pair.identity, pair.template, store.id)
    assert (mounted.store_id, mounted.access, mounted.system_managed) == (store.id, "read_only", False)
    assert mounted.identity_id == pair.identity and mounted.template_id == pair.template and mounted.active
    listed = pair.client.list_mounts(pair.identity, pair.template)
    assert [m.store_id for m in listed] == [pair.default.id, store.id]
    assert listed[0].system_managed and listed[0].access == "read_write"
    assert listed[0].created_at <= listed[1].created_at

    with pytest.raises(Conflict, match="already mounted"):
        pair.client.mount_store(pair.identity, pair.template, store.id)
    pair.client.unmount_store(pair.identity, pair.template, store.id)
    with pytest.raises(NotFound):
        pair.client.unmount_store(pair.identity, pair.template, store.id)
    with pytest.raises(NotFound, match="does not exist or this token cannot see it"):
        pair.client.mount_store(pair.identity, pair.template, "memstore_absent")


def test_ids_are_quoted_whole(pair: Pair) -> None:
    # Identity and template ids are opaque: a space or a '?' is part of the id, not of the URL.
    store = pair.store({"a.md": "a\n"})
    pair.client.mount_store("idn with space", "tmpl?x=1&y", store.id)
    (mount,) = pair.client.list_mounts("idn with space", "tmpl?x=1&y")
    assert (mount.identity_id, mount.template_id) == ("idn with space", "tmpl?x=1&y")


@pytest.mark.parametrize("dialect", [Dialect.CLOUD, Dialect.ANTHROPIC])
def test_other_dialects_have_no_mounts(server: ServerProcess, dialect: Dialect) -> None:
    with open_client(dialect, server.base_url, server.token) as client:
        with pytest.raises(UsageError, match="Forward dialect only"):
            client.list_mounts("i", "t")
        assert client.request_count == 0
