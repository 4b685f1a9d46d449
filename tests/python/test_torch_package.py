"""The layout of the tokpos package: every submodule imports on its own,
the imports between python/tokpos/*.py form no circle, tokpos.torch only
re-exports, and tokpos.torch refuses a torch older than it needs with an
ImportError naming both versions (and the torch test files then skip,
saying why, instead of failing at collection)."""

from __future__ import annotations

import ast
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

from conftest import REPO

PACKAGE = REPO / "python" / "tokpos"
SOURCES = sorted(PACKAGE.glob("*.py"))
# __main__ runs the tool when imported.
COMPILED = {"_core"}  # the nanobind extension (python/CMakeLists.txt)
MODULES = ["tokpos" if p.stem == "__init__" else f"tokpos.{p.stem}" for p in SOURCES if p.stem != "__main__"]


def _torch_usable() -> bool:
    try:
        import tokpos.torch  # noqa: F401
    except ImportError:
        return False
    return True


def _run(code: str, env_extra: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for key, value in (env_extra or {}).items():
        env[key] = os.pathsep.join(filter(None, [value, env.get(key)])) if key == "PYTHONPATH" else value
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def _module_of(path: pathlib.Path) -> str:
    return "tokpos" if path.stem == "__init__" else f"tokpos.{path.stem}"


def _imports(path: pathlib.Path) -> set:
    """The tokpos modules (python/tokpos/*.py) path imports, anywhere in it
    (a function's import counts too). `from . import name` is the submodule
    name.py if there is one, else the package itself (a name its __init__
    defines); the compiled module (_core) is not a .py file and is left out."""
    names = {p.stem for p in SOURCES}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "tokpos":
                    found.add("tokpos" if len(parts) == 1 or parts[1] not in names else f"tokpos.{parts[1]}")
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] != "tokpos":
                    continue
                rel = parts[1:]
            else:
                assert node.level == 1, f"{path.name}: relative import above the package"
                rel = node.module.split(".") if node.module else []
            if rel:
                if rel[0] in names:
                    found.add(f"tokpos.{rel[0]}")
                continue
            for a in node.names:
                if a.name in names:
                    found.add(f"tokpos.{a.name}")
                elif a.name not in COMPILED:
                    found.add("tokpos")
    found.discard(_module_of(path))
    return found


def _cycle(graph: dict):
    """The first import cycle of graph (module -> modules it imports) as a
    list a, b, ..., a, or None."""
    state = {}  # 1: on the current path, 2: done

    def visit(mod, path):
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state:
                found = visit(dep, path + [dep])
                if found:
                    return found
        state[mod] = 2
        return None

    for mod in sorted(graph):
        if mod not in state:
            found = visit(mod, [mod])
            if found:
                return found
    return None


def test_the_cycle_search_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_has_no_cycle():
    graph = {_module_of(p): _imports(p) for p in SOURCES}
    # The split of tokpos.torch, as its docstring describes it.
    assert graph["tokpos.torch"] == {
        "tokpos._torch_ops", "tokpos._torch_modules", "tokpos._torch_rope", "tokpos._parallel",
        "tokpos._torch_embedding",
    }
    assert graph["tokpos._parallel"] & {"tokpos._torch_ops", "tokpos._torch_modules"}
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_torch_module_only_reexports():
    tree = ast.parse((PACKAGE / "torch.py").read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    assert not [n for n in ast.walk(tree) if isinstance(n, kinds)], "tokpos/torch.py defines code"
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):  # the docstring
            continue
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__all__"]:
            continue
        pytest.fail(f"tokpos/torch.py line {node.lineno}: {ast.dump(node)[:80]} is not an import or __all__")


@pytest.mark.parametrize("module", MODULES)
def test_every_submodule_imports_alone(module):
    """Each module in a fresh interpreter, first: no import order is needed
    (a circle shows as a partially initialised module), and the installed
    package ships every file."""
    if module in ("tokpos.torch", "tokpos._parallel") or module.startswith("tokpos._torch"):
        if not _torch_usable():
            pytest.skip("tokpos.torch cannot be imported here (torch missing or too old)")
    proc = _run(f"import {module}")
    assert proc.returncode == 0, proc.stderr


def _fake_torch(tmp_path: pathlib.Path, version: str) -> pathlib.Path:
    """A directory holding a `torch` package that has only __version__ (as
    Debian's python3-torch 1.13 would have no torch.library.custom_op)."""
    root = tmp_path / "site"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    return root


def test_an_old_torch_is_refused_by_version(tmp_path):
    site = _fake_torch(tmp_path, "1.13.1")
    proc = _run(
        "import tokpos, sys\n"
        "try:\n"
        "    import tokpos.torch\n"
        "except ImportError as e:\n"
        "    print(type(e).__name__, e.name, e, sep='|')\n"
        "else:\n"
        "    sys.exit('imported')\n",
        {"PYTHONPATH": str(site)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kind, name, text = proc.stdout.strip().split("|", 2)
    assert kind == "ImportError" and name == "torch"
    assert "tokpos.torch needs torch >= 2.4" in text and "found torch 1.13.1" in text, text
    assert str(site / "torch") in text


def test_a_missing_torch_is_named():
    proc = _run(
        "import sys; sys.modules['torch'] = None\n"
        "try:\n"
        "    import tokpos.torch\n"
        "except ModuleNotFoundError as e:\n"
        "    print(e.name, e, sep='|')\n"
    )
    assert proc.returncode == 0, proc.stderr
    name, text = proc.stdout.strip().split("|", 1)
    assert name == "torch" and "tokpos.torch needs torch >= 2.4, which is not installed" in text, text


def test_the_torch_tests_skip_with_an_old_torch(tmp_path):
    """pytest over the files that need tokpos.torch, with torch 1.13 first on
    the path: every file skips, with tokpos.torch's ImportError as the reason,
    and none fails at collection."""
    site = _fake_torch(tmp_path, "1.13.1")
    files = ["test_torch.py", "test_torch_rope.py", "test_vocab_parallel.py", "test_torch_messages.py"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *files],
        cwd=REPO / "tests" / "python",
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 5, out  # every module skipped: no test ran, none failed or errored
    assert f"{len(files)} skipped" in out and "error" not in out.lower(), out
    # -rs prints the reason, once for the files that share it.
    assert f"SKIPPED [{len(files)}]" in out and "needs torch >= 2.4" in out and "found torch 1.13.1" in out, out


def test_pickles_and_state_dicts_name_the_public_module():
    if not _torch_usable():
        pytest.skip("tokpos.torch cannot be imported here (torch missing or too old)")
    import tokpos.torch as tt

    c = tt.EmbeddingComposer(tt.TokenEmbedding(5, 3, seed=1), tt.LearnedPositionalEmbedding(4, 3, seed=2))
    blob = pickle.dumps(c)
    assert b"tokpos.torch" in blob and b"_torch_modules" not in blob
    back = pickle.loads(blob)
    assert list(back.state_dict()) == ["token.weight", "position.weight"]
    assert all((a == b).all() for a, b in zip(back.state_dict().values(), c.state_dict().values()))
    for cls in (tt.TokenEmbedding, tt.LearnedPositionalEmbedding, tt.SinusoidalPositionalEmbedding,
                tt.EmbeddingComposer, tt.RotaryEmbedding):
        assert cls.__module__ == "tokpos.torch"
