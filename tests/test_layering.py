"""The import graph keeps its layers: the core never names the trainer, and the trainer has no import circle.

Read from the source with `ast` (every import, at module level or inside a function), so a lazy
import counts as much as a top-level one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: installed name -> folder (setup.py maps the top-level folders under the agentgym namespace)
FOLDERS = {"agentgym": ROOT / "agentgym", "agentgym.envs": ROOT / "envs", "agentgym.trainer": ROOT / "trainer",
           "agentgym.sandboxes": ROOT / "sandboxes"}


def module_name(package: str, path: Path) -> str:
    parts = list(path.relative_to(FOLDERS[package]).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def imports(package: str, path: Path) -> set[str]:
    """Every module `path` imports (absolute names; `from X import y` also yields X.y, which may be a module)."""
    name = module_name(package, path)
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def modules(package: str) -> dict[str, Path]:
    return {module_name(package, p): p for p in sorted(FOLDERS[package].rglob("*.py"))}


def test_core_envs_and_sandboxes_never_import_the_trainer():
    offenders = []
    for package in ("agentgym", "agentgym.envs", "agentgym.sandboxes"):
        for path in modules(package).values():
            bad = sorted(m for m in imports(package, path)
                         if m == "agentgym.trainer" or m.startswith("agentgym.trainer."))
            if bad:
                offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(bad)}")
    assert not offenders, "the core must not import the trainer (use a plugin point):\n" + "\n".join(offenders)


def test_the_core_finds_envs_only_through_the_registry_and_sandboxes_stand_alone():
    offenders = []
    for package, forbidden in (("agentgym", ("agentgym.envs",)),
                               ("agentgym.sandboxes", ("agentgym.envs", "agentgym.trainer"))):
        for path in modules(package).values():
            bad = sorted(m for m in imports(package, path) if any(m == f or m.startswith(f + ".") for f in forbidden))
            if bad:
                offenders.append(f"{path.relative_to(ROOT)} imports {', '.join(bad)}")
    sandbox_core = [f"{p.relative_to(ROOT)} imports {m}" for p in modules("agentgym.sandboxes").values()
                    for m in imports("agentgym.sandboxes", p)
                    if m.startswith("agentgym.") and not m.startswith("agentgym.sandboxes")]
    assert not offenders + sandbox_core, "layer rule broken (docs/architecture.md):\n" + "\n".join(
        offenders + sandbox_core)


def test_trainer_has_no_import_cycle():
    mods = modules("agentgym.trainer")
    graph = {name: sorted(m for m in imports("agentgym.trainer", path) if m in mods and m != name)
             for name, path in mods.items()}
    # a package's __init__ re-exporting its submodules is not a circle through the package
    for name in graph:
        graph[name] = [m for m in graph[name] if not name.startswith(m + ".")]
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in graph:
        if node not in state:
            cycle = visit(node)
            assert cycle is None, "import circle in trainer/: " + " -> ".join(cycle)


def test_import_agentgym_stays_free_of_heavy_packages():
    # the CLI loads its plugins (agentgym.trainer.cli registers `agentgym train`), which must stay light too
    code = ("import sys, agentgym, agentgym.cli, agentgym.config, agentgym.credit; "
            "print(sorted(m for m in ('torch', 'transformers', 'docker') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
