"""The package's shape: imports point one way (no cycles, none up a layer), the registry is the
one list of operation kinds, and `pip install .` gives one import package whose commands work
from any folder."""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from helpers import FAST, ROOT

PACKAGE = "iree_dispatch_profiler"
# Lowest first: a module may import its own layer and those before it.
LAYERS = ("core", "ops", "iree", "measure", "store", "sweep", "tuning", "report", "cli")
# Shipped to Dask workers by value: the standard library, and what a worker has installed.
JOB_MODULE = f"{PACKAGE}.iree.iree_jobs"
JOB_IMPORTS_ALLOWED = set(sys.stdlib_module_names) | {"distributed", "iree"}


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package by its __init__)."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The names `name` imports anywhere in its file (inside functions too), relative imports
    resolved; `from package.x import y` counts as importing module x.y when that exists."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in modules else base)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = module_names(root, package)
    return {name: {m for m in imported(name, path, modules) if m in modules and m != name}
            for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer(module: str, package: str, layers: tuple[str, ...]) -> int | None:
    parts = module.split(".")
    return layers.index(parts[1]) if len(parts) > 1 and parts[1] in layers else None


def upward_imports(graph: dict[str, set[str]], package: str,
                   layers: tuple[str, ...]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a module imports a higher layer; a module outside the
    layers (the package's own __init__) is in none and may import nothing of ours."""
    bad = []
    for module, targets in graph.items():
        own = layer(module, package, layers)
        for target in sorted(targets):
            theirs = layer(target, package, layers)
            if own is None or theirs is None or theirs > own:
                bad.append((module, target))
    return sorted(bad)


def test_the_package_has_no_import_cycle_and_no_import_up_a_layer():
    graph = import_graph(ROOT, PACKAGE)
    assert len(graph) > 30 and all(layer(m, PACKAGE, LAYERS) is not None for m in graph
                                   if m != PACKAGE), sorted(graph)
    assert cycles(graph) == []
    assert upward_imports(graph, PACKAGE, LAYERS) == []


def test_the_layout_checks_catch_a_cycle_and_an_upward_import(tmp_path):
    """The checks above on a package made to break both rules: they can fail."""
    files = {
        "pkg/__init__.py": "",
        "pkg/core/__init__.py": "",
        "pkg/core/a.py": "def f():\n    from pkg.cli import b  # up a layer, inside a function\n",
        "pkg/ops/__init__.py": "",
        "pkg/ops/x.py": "from . import y\n",
        "pkg/ops/y.py": "from pkg.ops.x import something\n",
        "pkg/cli/__init__.py": "",
        "pkg/cli/b.py": "from ..ops import y\nimport pkg.core\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.cli.b"] == {"pkg.core", "pkg.ops.y"}
    assert cycles(graph) == [["pkg.ops.x", "pkg.ops.y"]]
    assert upward_imports(graph, "pkg", ("core", "ops", "cli")) == [("pkg.core.a", "pkg.cli.b")]


def test_the_job_module_shipped_to_workers_imports_only_the_standard_library():
    path = module_names(ROOT, PACKAGE)[JOB_MODULE]
    roots = {name.split(".")[0] for name in imported(JOB_MODULE, path, {})}
    assert roots and roots <= JOB_IMPORTS_ALLOWED, roots - JOB_IMPORTS_ALLOWED


# Loaded where first used: each costs a script's start a quarter to a whole second.
HEAVY = ("scipy", "pandas", "matplotlib", "sqlalchemy")


def loaded_at_start(module: str) -> set[str]:
    """The HEAVY libraries that importing `module` loads, in a fresh interpreter."""
    probe = (f"import sys, {module}\n"
             f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def test_generator_and_compile_start_without_the_heavy_libraries():
    for script in ("generator", "compile"):
        assert loaded_at_start(f"{PACKAGE}.cli.{script}") == set(), script
    # the probe sees a heavy library where one is loaded
    assert loaded_at_start(f"{PACKAGE}.cli.profiler") >= {"pandas", "sqlalchemy"}


def test_each_registered_kind_generates_its_own_operations_and_reads_them_back():
    """The registry is the one list of kinds: every kind's family makes operations of that
    kind from the generator's default options, and the manifest reader rebuilds them."""
    from iree_dispatch_profiler.cli import generator
    from iree_dispatch_profiler.core.library import Device
    from iree_dispatch_profiler.ops import registry

    args = generator.parser().parse_args(["--operation-kind=all"])
    assert args.operation_kind == list(registry.KINDS)
    data_types = generator.parse_data_types(None, Device.LLVMCPU)
    for kind, family in registry.KINDS.items():
        operations = family.operations(args, kind, data_types)
        assert operations and {op.kind for op in operations} == {kind}
        for op in operations:
            assert registry.operation_from_json(op.to_json()) == op


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with the project installed by a plain `pip install .` (from a copy
    of the sources: pip builds in the tree it installs). Its dependencies come from this
    environment (a .pth line) rather than the index: what is checked is what the project
    itself installs."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / PACKAGE, source / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    before = {p.name for p in site.iterdir()}
    result = subprocess.run([python, "-m", "pip", "install", "--quiet", "."], cwd=source,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    added = {p.name for p in site.iterdir()} - before - {"__pycache__"}
    assert {n for n in added if not n.endswith(".dist-info")} == {PACKAGE}
    record = next(site.glob("iree_dispatch_profiler-*.dist-info")) / "RECORD"
    tops = {line.split("/")[0] for line in record.read_text().splitlines()
            if not line.startswith("..") and ".dist-info/" not in line.split(",")[0]}
    assert tops == {PACKAGE}
    return env


@pytest.mark.iree
def test_installed_commands_run_from_any_folder_through_to_a_verified_row(installed, tmp_path):
    bin_dir = installed / "bin"
    where = subprocess.run([bin_dir / "python", "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert Path(where).is_relative_to(installed), where  # the installed copy, not this checkout

    def command(name: str, *args) -> subprocess.CompletedProcess:
        return subprocess.run([bin_dir / name, *map(str, args)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)

    help_text = command("iree-dispatch-generate", "--help")
    assert help_text.returncode == 0 and "--problem-m" in help_text.stdout
    bad = command("iree-dispatch-generate", "--problem-m=0", "--problem-n=8", "--problem-k=8")
    assert bad.returncode == 2 and bad.stderr.startswith("iree-dispatch-generate: error:")
    generated = command("iree-dispatch-generate", "--generated-dir", "gen", "--problem-m=64",
                        "--problem-n=64", "--problem-k=64", "--data-types=f32",
                        "--dispatches=_default$")
    assert generated.returncode == 0, generated.stderr
    compiled = command("iree-dispatch-compile", "--generated-dir", "gen")
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    profiled = command("iree-dispatch-profile", "--generated-dir", "gen", "--output", "data.csv",
                       *FAST)
    assert profiled.returncode == 0, profiled.stdout + profiled.stderr
    row = (tmp_path / "data.csv").read_text().splitlines()[1].split(",")
    assert row[0] == "matmul_64x64x64_f32t_f32t_f32t_default" and "SUCCESS" in row
