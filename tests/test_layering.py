"""The package layering of docs/design.md §3, enforced on the import statements of every module.

An import that breaks a rule below fails this test with the module, the line and the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "memsync"

# Which memsync packages each package may import (itself always allowed).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "rules": {"errors"},
    "config": {"errors", "rules"},
    "api": {"errors", "rules", "config"},
    "mirror": {"errors", "rules"},
    "engine": {"errors", "rules", "config"},
    "sync": {"errors", "rules", "config", "api", "mirror", "engine"},
    "daemon": {"errors", "rules", "config", "api", "mirror", "engine", "sync"},
    "server": {"errors", "rules"},
    "cli": {"errors", "rules", "config", "api", "mirror", "engine", "sync", "daemon", "server", "demo"},
    "demo": {"errors", "rules", "config", "api", "mirror", "engine", "sync", "server"},
    "crashpoints": set(),
    "__init__": set(),
    "__main__": {"cli"},
}

# Third-party packages that only one memsync package may import.
OWNED: dict[str, set[str]] = {
    "httpx": {"api"},
    "pygit2": {"mirror"},
    "fastapi": {"server"},
    "starlette": {"server"},
    "uvicorn": {"server"},
    # The server's database, and the mirror's content index (a cache under .git/memsync/).
    "sqlite3": {"server", "mirror"},
    "apscheduler": {"daemon"},
}


def _package_of(path: Path, root: Path = SRC) -> str:
    rel = path.relative_to(root)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # A relative import stays inside its own package by construction.
                continue
            if node.module == "memsync":
                # `from memsync import config` imports the submodule memsync.config.
                found.extend((node.lineno, f"memsync.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, node.module or ""))
    return found


def violations(root: Path = SRC) -> list[str]:
    problems = []
    for path in sorted(root.rglob("*.py")):
        package = _package_of(path, root)
        for line, module in _imports(path):
            top = module.split(".")[0]
            where = f"{path.relative_to(root.parent)}:{line}"
            if top == "memsync":
                parts = module.split(".")
                target = parts[1] if len(parts) > 1 else "__init__"
                # errors and crashpoints are leaves every package may use.
                leaf = target in ("errors", "crashpoints")
                if target != package and not leaf and target not in ALLOWED.get(package, set()):
                    problems.append(f"{where}: memsync.{package} may not import memsync.{target}")
            elif top in OWNED and package not in OWNED[top]:
                owners = ", ".join(sorted(OWNED[top]))
                problems.append(f"{where}: only memsync.{owners} may import {top}")
    return problems


def test_every_package_is_known() -> None:
    unknown = {_package_of(p) for p in SRC.rglob("*.py")} - set(ALLOWED)
    assert not unknown, f"add these packages to the layering rules: {sorted(unknown)}"


def test_layering_holds() -> None:
    assert violations() == []


def test_layering_check_catches_a_bad_import(tmp_path: Path) -> None:
    fake = tmp_path / "memsync"
    (fake / "api").mkdir(parents=True)
    (fake / "api" / "client.py").write_text("import pygit2\nfrom memsync.mirror import repo\n")
    (fake / "server").mkdir()
    (fake / "server" / "app.py").write_text("from memsync import config\n")
    found = violations(fake)
    assert any("only memsync.mirror may import pygit2" in p for p in found)
    assert any("memsync.api may not import memsync.mirror" in p for p in found)
    assert any("memsync.server may not import memsync.config" in p for p in found)


@pytest.mark.parametrize("module", ["memsync.errors", "memsync.rules", "memsync.cli"])
def test_core_modules_import(module: str) -> None:
    __import__(module)
