"""The refs of a mirror (docs/mirror.md): what each holds, by name."""

MEMSTORE_REF = "refs/remotes/memstore/main"  # the imported history and nothing else (memsync writes it)
MAIN_REF = "refs/heads/main"  # what the user edits; upstream is memstore/main
BASE_REF = "refs/memsync/base"  # the commit the checkout was last reconciled with
METADATA_REF = "refs/heads/memsync/metadata"  # store and memory metadata snapshots
