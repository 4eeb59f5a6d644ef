"""Where memsync looks for its config file when none is named (docs/design.md §4).

Apart from :mod:`memsync.config` so that ``memsync --help``, which names the file, does not import
pydantic to do so.
"""

from __future__ import annotations

from pathlib import Path

CONFIG_FILE_NAME = "memsync.toml"


def default_config_path() -> Path:
    from platformdirs import user_config_path

    return user_config_path("memsync") / CONFIG_FILE_NAME
