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
    "remote": {"errors", "rules", "config", "api", "mirror", "engine", "sync"},
    "server": {"errors", "rules"},
    "cli": {"errors", "rules", "config", "api", "mirror", "engine", "sync", "daemon", "server", "demo"},
    "demo": {"errors", "rules", "config", "api", "mirror", "engine", "sync", "server"},
    "crashpoints": set(),
    "processes": set(),
    "locations": set(),
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
    "inotify_simple": {"daemon"},
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
                # errors, crashpoints, processes and locations are leaves every package may use.
                leaf = target in ("errors", "crashpoints", "processes", "locations")
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


# --- the git repository has one owner; modules keep to each other's public names ------------------

GIT_STORE = SRC / "mirror" / "gitstore.py"
# Public despite the underscore: namedtuple's methods (the underscore only keeps them off field names).
PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_fields", "_make"}


def _module_name(path: Path, root: Path) -> str:
    name = "memsync." + ".".join(path.relative_to(root).with_suffix("").parts)
    return name.removesuffix(".__init__")


def boundary_violations(root: Path = SRC) -> list[str]:
    """Who touches the pygit2 repository object (only ``mirror/gitstore.py``), and who reads
    another module's private names (``obj._name`` for a name the module does not define itself,
    or ``from memsync.x import _name`` of a name that is not a module)."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        where = path.relative_to(root.parent)
        defined = (
            {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}
            | {
                node.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
            }
            | {
                target.id
                for node in ast.walk(tree)
                if isinstance(node, ast.Assign | ast.AnnAssign)
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Name)
            }
        )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "_repo"
                and path != root / GIT_STORE.relative_to(SRC)
            ):
                problems.append(
                    f"{where}:{node.lineno}: only mirror/gitstore.py touches the repository object"
                )
            elif (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", "os"))
                and node.attr not in defined | PUBLIC_UNDERSCORED
            ):
                problems.append(
                    f"{where}:{node.lineno}: {ast.unparse(node)} reads another module's private name"
                )
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memsync"):
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    submodule = (root.parent / node.module.replace(".", "/") / f"{alias.name}.py").exists()
                    if private and not submodule:
                        problems.append(
                            f"{where}:{node.lineno}: imports {alias.name}, private to {node.module}"
                        )
    return problems


def import_cycles(root: Path = SRC) -> list[list[str]]:
    """Groups of memsync modules that import each other, directly or round a circle (imports made
    only for type checking count too: they are a dependency all the same)."""
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[_module_name(path, root)] = {name for name in found if name.startswith("memsync")}
    # Tarjan's strongly connected components.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in graph:
                continue
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_only_the_git_store_touches_the_repository_and_privates_stay_private() -> None:
    assert boundary_violations() == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert import_cycles() == []


def test_the_boundary_checks_catch_a_breach(tmp_path: Path) -> None:
    fake = tmp_path / "memsync"
    (fake / "mirror").mkdir(parents=True)
    (fake / "mirror" / "gitstore.py").write_text(
        "class GitStore:\n    def f(self):\n        return self._repo\n"
    )
    (fake / "mirror" / "checkout.py").write_text(
        "from memsync.mirror.history import _spelling\nimport memsync.mirror.history\n"
        "def f(mirror):\n    return mirror._repo, mirror._path_map_at(None)\n"
    )
    (fake / "mirror" / "history.py").write_text("import memsync.mirror.checkout\n")
    found = boundary_violations(fake)
    assert any("checkout.py:4: only mirror/gitstore.py touches" in p for p in found)
    assert any("mirror._path_map_at reads another module's private name" in p for p in found)
    assert any("imports _spelling, private to memsync.mirror.history" in p for p in found)
    assert not any("gitstore.py" in p.split(":")[0] for p in found)
    assert import_cycles(fake) == [["memsync.mirror.checkout", "memsync.mirror.history"]]
