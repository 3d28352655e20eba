"""The layout contract: docs/architecture.md lists exactly the modules in src/iofeed, and no
module of iofeed imports itself back through others (every import counts, lazy ones too)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "iofeed"
DOC = ROOT / "docs" / "architecture.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


def documented_modules() -> list[str]:
    """The first cells of the rows of every `| module | one concept |` table in the document."""
    rows, in_table = [], False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.replace(" ", "") == "|module|oneconcept|":
            in_table = True
        elif in_table and not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            match = ROW.match(line)
            assert match, f"docs/architecture.md: a module row must be | `path.py` | concept |: {line!r}"
            assert match.group(2).strip(), f"docs/architecture.md: {match.group(1)} has no concept"
            rows.append(match.group(1))
    return rows


def tree_modules() -> set[str]:
    """Every .py file under src/iofeed except the __init__.py files, by its path from there."""
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"}


def test_module_tables_list_exactly_the_tree():
    listed = documented_modules()
    tree = tree_modules()
    duplicates = sorted({m for m in listed if listed.count(m) > 1})
    assert not duplicates, f"listed more than once in docs/architecture.md: {duplicates}"
    assert not tree - set(listed), f"modules missing from docs/architecture.md: {sorted(tree - set(listed))}"
    assert not set(listed) - tree, f"docs/architecture.md lists modules not in the tree: {sorted(set(listed) - tree)}"


def module_names(package: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted name of every module and subpackage of `package` → (file, whether it is a package)."""
    names = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        names[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return names


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module → the modules of `package` it imports, from every import statement in its file (at
    the top, inside functions, under TYPE_CHECKING). `from p import a` counts as importing p.a
    when that is a module, else p."""
    names = module_names(package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in names.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                for alias in node.names:
                    submodule = f"{module}.{alias.name}"
                    targets.add(submodule if submodule in names else module)
        graph[name] = {t for t in targets if t in names and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            successor = next(successors, None)
            if successor is not None:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                elif successor in on_stack:
                    low[node] = min(low[node], index[successor])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_sees_a_cycle_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_import_graph_sees_every_kind_of_import(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from .a import f\n",
        "a.py": "def f():\n    from .sub import c\n    return c\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n",
        "sub/__init__.py": "",
        "sub/c.py": "from .. import b\nimport pkg.a\nfrom ..sub import d\nimport os\n",
        "sub/d.py": "from . import helper_name\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    assert import_graph(package) == {
        "pkg": {"pkg.a"}, "pkg.a": {"pkg.sub.c"}, "pkg.b": {"pkg.sub.c"}, "pkg.sub": set(),
        "pkg.sub.c": {"pkg.b", "pkg.a", "pkg.sub.d"}, "pkg.sub.d": {"pkg.sub"},
    }
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_no_import_cycles():
    found = cycles(import_graph(PACKAGE))
    assert not found, "import cycles in iofeed: " + "; ".join(" ↔ ".join(c) for c in found)


# The packages of src/iofeed from the call down: a module may import from its own package or from one
# below it, never from one above (docs/architecture.md, "Packages"). `__init__.py` is the door and
# may import anything.
LAYERS = ("cli", "prepare", "loading", "adapters", "engines", "options", "sources", "augment", "format", "image",
          "runtime", "errors")
MOST_ENTRIES = 12


def upward_imports(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """Every import from a package to one above it in `layers`, as "importer -> imported"."""
    rank = {layer: position for position, layer in enumerate(layers)}

    def layer(module: str) -> str | None:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else None

    found = []
    for importer, imported in sorted(graph.items()):
        for target in sorted(imported):
            source_layer, target_layer = layer(importer), layer(target)
            if source_layer is None or target_layer is None or source_layer == target_layer:
                continue
            assert source_layer in rank, f"{importer}: package {source_layer!r} is not in LAYERS"
            assert target_layer in rank, f"{target}: package {target_layer!r} is not in LAYERS"
            if rank[target_layer] < rank[source_layer]:
                found.append(f"{importer} -> {target}")
    return found


def test_upward_import_finder_sees_an_import_from_above():
    graph = {"pkg.low.a": {"pkg.high.b"}, "pkg.high.b": {"pkg.low.a"}, "pkg": {"pkg.low.a"}}
    assert upward_imports(graph, ("high", "low")) == ["pkg.low.a -> pkg.high.b"]


def test_imports_run_from_the_call_down():
    found = upward_imports(import_graph(PACKAGE), LAYERS)
    assert not found, "imports from a package above (see LAYERS): " + "; ".join(found)


def test_the_top_level_reads_as_the_flow():
    entries = sorted(p.name.removesuffix(".py") for p in PACKAGE.iterdir()
                     if p.name not in ("__init__.py", "py.typed", "__pycache__"))
    assert len(entries) <= MOST_ENTRIES, f"src/iofeed holds {len(entries)} entries: {entries}"
    assert sorted(entries) == sorted(LAYERS), f"every entry is a layer and every layer an entry: {entries}"
