"""Configuration: validation names the key and the fix; the token comes from env or a private file."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from memsync.config import load_config, parse_config
from memsync.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def minimal(**api: object) -> dict[str, object]:
    return {
        "api": {"dialect": "forward", "base_url": "http://127.0.0.1:1", "token_env": "T", **api},
        "mirror": {"root": "/tmp/m"},
    }


def test_example_config_is_valid_and_documents_every_section() -> None:
    config = load_config(ROOT / "config.example.toml")
    assert config.api.dialect == "forward"
    assert config.daemon.debounce == 0.25
    assert config.daemon.interval == 300
    text = (ROOT / "config.example.toml").read_text()
    data = tomllib.loads(text)
    for section in ("api", "mirror", "stores", "push", "daemon", "log"):
        assert section in data


def test_missing_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"copy config\.example\.toml"):
        load_config(tmp_path / "nope.toml")


def test_bad_toml_is_reported_with_the_file(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text("[api\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(file)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c["api"].update(dialect="ftp"), "api.dialect"),
        (lambda c: c["api"].update(colour="blue"), "api.colour: unknown key"),
        (lambda c: c["api"].update(base_url="localhost:8765"), "api.base_url: must start with http"),
        (lambda c: c["api"].update(token_file="/x"), "or token_file, not both"),
        (lambda c: c.pop("mirror"), "mirror: required"),
        (lambda c: c.update(daemon={"interval": 5}), "daemon.interval: 5 has no unit"),
        (lambda c: c.update(stores={"system_managed": "some"}), "stores.system_managed"),
        (lambda c: c.update(push={"max_delete_share": 2}), "push.max_delete_share"),
    ],
)
def test_invalid_values_name_the_key(mutate: object, message: str) -> None:
    data = minimal()
    assert callable(mutate)
    mutate(data)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        parse_config(data)


def test_relative_paths_are_relative_to_the_config_file(tmp_path: Path) -> None:
    file = tmp_path / "memsync.toml"
    file.write_text(
        '[api]\ndialect = "cloud"\nbase_url = "http://x/"\ntoken_file = "tok"\n[mirror]\nroot = "mirrors"\n'
    )
    config = load_config(file)
    assert config.mirror.root == tmp_path / "mirrors"
    assert config.api.token_file == tmp_path / "tok"
    assert config.api.base_url == "http://x"


def test_token_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(minimal())
    monkeypatch.setenv("T", "s3cret\n")
    assert config.token() == "s3cret"
    monkeypatch.delenv("T")
    with pytest.raises(ConfigError, match="T is not set") as info:
        config.token()
    assert "s3cret" not in str(info.value)


def test_memsync_token_is_the_default_token_source(monkeypatch: pytest.MonkeyPatch) -> None:
    # A config with neither token_env nor token_file reads MEMSYNC_TOKEN, as the README shows.
    data = minimal()
    del data["api"]["token_env"]  # type: ignore[attr-defined]
    config = parse_config(data)
    assert config.api.token_env == "MEMSYNC_TOKEN" and config.api.token_file is None
    assert config.token_source() == "the environment variable MEMSYNC_TOKEN"
    monkeypatch.setenv("MEMSYNC_TOKEN", "s3cret\n")
    assert config.token() == "s3cret"
    monkeypatch.delenv("MEMSYNC_TOKEN")
    with pytest.raises(ConfigError, match="MEMSYNC_TOKEN is not set") as info:
        config.token()
    assert "token_file" in str(info.value)  # the other way to give it is named too
    both = minimal(token_file="/x")
    with pytest.raises(ConfigError, match="not both"):
        parse_config(both)


def test_token_file_must_be_private_and_outside_mirrors(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o644)
    data = minimal()
    data["api"] = {"dialect": "forward", "base_url": "http://x", "token_file": str(token)}
    data["mirror"] = {"root": str(tmp_path / "mirrors")}
    config = parse_config(data)
    with pytest.raises(ConfigError, match="chmod 600") as info:
        config.token()
    assert "s3cret" not in str(info.value)
    token.chmod(0o600)
    assert config.token() == "s3cret"
    inside = tmp_path / "mirrors" / "store" / "token"
    inside.parent.mkdir(parents=True)
    inside.write_text("s3cret")
    inside.chmod(0o600)
    data["api"] = {"dialect": "forward", "base_url": "http://x", "token_file": str(inside)}
    with pytest.raises(ConfigError, match="inside the mirror root"):
        parse_config(data).token()


def test_store_selection_by_id_or_name_glob() -> None:
    stores = parse_config({**minimal(), "stores": {"include": ["memstore_1", "team-*"]}}).stores
    assert stores.selects("memstore_1", "anything")
    assert stores.selects("memstore_2", "team-a")
    assert not stores.selects("memstore_2", "other")
    assert parse_config(minimal()).stores.selects("x", "y")
