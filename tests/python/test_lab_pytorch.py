"""The PyTorch lesson kit (lab/pytorch): its tests pass, its exercise fails
until written, main.py prints what it claims, and English and Chinese are
the same program.

The kit is materialised by `materialise` below, this test's own model of
the naming rule of lab kits (docs/lessons.md); `test_write_lab_*` checks
the tokpos binding against that model."""

from __future__ import annotations

import ast
import math
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
KIT = REPO / "lab" / "pytorch"
LANGS = ("en", "zh")
MODULES = ("TokenEmbedding", "LearnedPositionalEmbedding",
           "SinusoidalPositionalEmbedding", "EmbeddingComposer")
TIMEOUT_S = 300  # one pytest or demo run of the kit; a hang fails instead of blocking

# The demo's settings (main.py's demo() defaults), restated here to check its output.
VOCAB, CONTEXT, BATCH, SEQ = 1000, 128, 2, 16


# ---- the test's model of the naming rule --------------------------------

def kit_sources() -> list[pathlib.Path]:
    return sorted(p.relative_to(KIT) for p in KIT.rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def split_name(rel: pathlib.Path) -> tuple[pathlib.Path, bool, str | None]:
    """NAME[.exercise][.LANG].EXT -> (NAME.EXT, is the exercise variant, LANG or None)."""
    parts = rel.name.split(".")
    lang = None
    exercise = False
    if len(parts) >= 3 and parts[-2] in LANGS:
        lang = parts.pop(-2)
    if len(parts) >= 3 and parts[-2] == "exercise":
        exercise = True
        parts.pop(-2)
    return rel.with_name(".".join(parts)), exercise, lang


def kit_files(lang: str, exercise: bool) -> dict[pathlib.Path, pathlib.Path]:
    """What the kit writes for (lang, exercise): written path -> source path, both relative."""
    chosen: dict[pathlib.Path, pathlib.Path] = {}
    overridden: set[pathlib.Path] = set()
    for rel in kit_sources():
        target, is_exercise, file_lang = split_name(rel)
        if file_lang not in (None, lang) or (is_exercise and not exercise):
            continue
        if is_exercise:
            chosen[target] = rel
            overridden.add(target)
        elif target not in overridden:
            chosen[target] = rel
    return chosen


def materialise(dest: pathlib.Path, lang: str, exercise: bool = False) -> pathlib.Path:
    for target, source in kit_files(lang, exercise).items():
        (dest / target).parent.mkdir(parents=True, exist_ok=True)
        (dest / target).write_bytes((KIT / source).read_bytes())
    return dest


# ---- running the kit -----------------------------------------------------

@pytest.fixture(scope="module")
def python_with_torch() -> str:
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                           text=True, timeout=TIMEOUT_S)
    if probe.returncode != 0:
        pytest.skip("torch is not importable by this Python; the kit needs it "
                    "(docs/python.md: pip install torch)")
    return sys.executable


def run(python: str, args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def run_kit_tests(python: str, kit: pathlib.Path) -> subprocess.CompletedProcess:
    return run(python, ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"], kit)


def test_every_language_file_has_its_pair():
    sources = set(kit_sources())
    tagged = [rel for rel in sources if split_name(rel)[2] is not None]
    assert tagged, "the kit has no .en/.zh files"
    for rel in tagged:
        base, _, lang = split_name(rel)
        for other in LANGS:
            name = rel.name.replace(f".{lang}.", f".{other}.")
            assert rel.with_name(name) in sources, f"{rel} has no {other} counterpart"
    for lang in LANGS:
        written = set(kit_files(lang, False))
        assert {pathlib.Path("main.py"), pathlib.Path("README.md"),
                pathlib.Path("tests/test_embeddings.py")} <= written, written
        assert set(kit_files(lang, True)) == written


@pytest.mark.parametrize("lang", LANGS)
def test_the_kit_tests_pass(lang, tmp_path, python_with_torch):
    kit = materialise(tmp_path / "kit", lang)
    result = run_kit_tests(python_with_torch, kit)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b\d+ passed\b", result.stdout), result.stdout
    # tokpos is importable here, so the comparison with tokpos.sinusoidal_table runs too.
    assert "skipped" not in result.stdout, result.stdout


def test_the_kit_needs_no_tokpos(tmp_path, python_with_torch):
    for path in KIT.rglob("main*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                    for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                     if isinstance(n, ast.ImportFrom) and n.module}
        assert imported <= {"math", "torch"}, (path.name, imported)
    # Without tokpos only the comparison with it is skipped, and it says why.
    blocker = tmp_path / "no_tokpos" / "tokpos"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("tokpos hidden for this test")\n')
    kit = materialise(tmp_path / "kit", "en")
    env_path = os.pathsep.join(filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH")]))
    result = subprocess.run([python_with_torch, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                             "tests"], cwd=kit, capture_output=True, text=True, timeout=TIMEOUT_S,
                            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=env_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b1 skipped\b", result.stdout), result.stdout
    assert "tokpos is not importable (tokpos hidden for this test)" in result.stdout, result.stdout


@pytest.mark.parametrize("lang", LANGS)
def test_the_exercise_fails_until_the_modules_are_written(lang, tmp_path, python_with_torch):
    kit = materialise(tmp_path / "kit", lang, exercise=True)
    result = run_kit_tests(python_with_torch, kit)
    assert result.returncode != 0, result.stdout
    assert "NotImplementedError" in result.stdout, result.stdout
    assert not re.search(r"\b\d+ passed\b", result.stdout), result.stdout
    # Writing the four modules (here: the full main.py) makes every test pass.
    (kit / "main.py").write_bytes((KIT / f"main.{lang}.py").read_bytes())
    result = run_kit_tests(python_with_torch, kit)
    assert result.returncode == 0, result.stdout + result.stderr


def numbers(text: str) -> list[str]:
    return re.findall(r"-?\d+(?:\.\d+)?", text)


def sinusoidal_adjacent_cosine(dim: int) -> float:
    """cos(PE(p), PE(p+1)) = (2/D) * sum_k cos(w_k) for even D: each pair has norm 1."""
    return sum(math.cos(10000.0 ** (-2 * k / dim)) for k in range(dim // 2)) / (dim // 2)


def bands(dim: int) -> list[tuple[int, int]]:
    counts: dict[int, int] = {}
    for k in range(dim // 2):
        decade = int(math.floor(math.log10(2 * math.pi) + 4 * 2 * k / dim))
        counts[decade] = counts.get(decade, 0) + 1
    return sorted(counts.items())


def test_main_prints_what_it_claims_and_both_languages_print_the_same_numbers(
        tmp_path, python_with_torch):
    out = {}
    for lang in LANGS:
        kit = materialise(tmp_path / lang, lang)
        result = run(python_with_torch, ["main.py"], kit)
        assert result.returncode == 0, result.stderr
        out[lang] = result.stdout
    assert numbers(out["en"]) == numbers(out["zh"])
    assert out["en"] != out["zh"]

    sections = out["en"].split("== D = ")[1:]
    assert [int(s.split()[0]) for s in sections] == [64, 32]
    for dim, text in zip((64, 32), sections):
        shape = f"({BATCH}, {SEQ}, {dim})"
        assert f"ids ({BATCH}, {SEQ}) -> learned {shape}, sinusoidal {shape}" in text, text
        assert (f"parameters: token table {VOCAB * dim}, learned positions {CONTEXT * dim}, "
                f"sinusoidal positions 0") in text, text
        assert (f"in total: learned {VOCAB * dim + CONTEXT * dim}, "
                f"sinusoidal {VOCAB * dim}") in text, text
        m = re.search(r"adjacent-position cosine: learned (-?[\d.]+), sinusoidal (-?[\d.]+)", text)
        assert m, text
        learned, sinusoidal = float(m.group(1)), float(m.group(2))
        # Independent rows of a fresh table: the mean over 127 pairs is near 0.
        assert abs(learned) < 0.1, text
        assert abs(sinusoidal - sinusoidal_adjacent_cosine(dim)) <= 1e-4, text
        expected = ", ".join(f"10^{d}: {n}" for d, n in bands(dim))
        assert f"pairs per wavelength decade: {expected}" in text, text
    # The exercise's point: halving D halves the pairs in each full decade.
    assert [n for _, n in bands(64)][1:4] == [8, 8, 8]
    assert [n for _, n in bands(32)][1:4] == [4, 4, 4]


class _Skeleton(ast.NodeTransformer):
    """Drops what may differ between languages: string constants (docstrings,
    messages, labels) and the literal parts of f-strings. Comments are not in
    the ast at all."""

    def visit_Constant(self, node):
        return ast.Constant(value="") if isinstance(node.value, str) else node

    def visit_FormattedValue(self, node):
        # The format spec (":.4f") decides the digits printed: it stays.
        return ast.FormattedValue(value=self.visit(node.value), conversion=node.conversion,
                                  format_spec=node.format_spec)

    def visit_JoinedStr(self, node):
        values = [self.visit(v) for v in node.values if isinstance(v, ast.FormattedValue)]
        return ast.JoinedStr(values=values)


def skeleton(path: pathlib.Path) -> str:
    return ast.dump(_Skeleton().visit(ast.parse(path.read_text(encoding="utf-8"))))


@pytest.mark.parametrize("stem", ["main", "main.exercise"])
def test_english_and_chinese_differ_only_in_comments_and_strings(stem):
    en, zh = KIT / f"{stem}.en.py", KIT / f"{stem}.zh.py"
    assert skeleton(en) == skeleton(zh)
    assert en.read_text(encoding="utf-8") != zh.read_text(encoding="utf-8")
    assert re.search(r"[\u4e00-\u9fff]", zh.read_text(encoding="utf-8"))


@pytest.mark.parametrize("lang", LANGS)
def test_the_exercise_is_the_full_program_with_the_four_modules_emptied(lang):
    full = ast.parse((KIT / f"main.{lang}.py").read_text(encoding="utf-8"))
    exercise = ast.parse((KIT / f"main.exercise.{lang}.py").read_text(encoding="utf-8"))
    assert [type(n).__name__ + getattr(n, "name", "") for n in full.body] == \
           [type(n).__name__ + getattr(n, "name", "") for n in exercise.body]
    for a, b in zip(full.body, exercise.body):
        if isinstance(a, ast.ClassDef) and a.name in MODULES:
            methods = [n for n in b.body if isinstance(n, ast.FunctionDef)]
            assert [m.name for m in methods] == \
                   [m.name for m in a.body if isinstance(m, ast.FunctionDef)]
            for m in methods:
                assert len(m.body) == 1 and isinstance(m.body[0], ast.Raise), (a.name, m.name)
                assert ast.unparse(m.body[0].exc).startswith("NotImplementedError("), m.name
        elif not isinstance(a, ast.Expr):  # the module docstrings differ
            assert ast.dump(_Skeleton().visit(a)) == ast.dump(_Skeleton().visit(b))


# ---- the binding that writes the kit --------------------------------------

def _write_lab():
    import tokpos

    fn = getattr(tokpos._core, "write_lab", None)
    if fn is None:
        pytest.skip("tokpos._core has no write_lab in this build (the lab writer is not built in)")
    return fn


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("exercise", [False, True])
def test_write_lab_writes_what_the_naming_rule_says(lang, exercise, tmp_path):
    write_lab = _write_lab()
    dest = tmp_path / "kit"
    written = write_lab("pytorch", str(dest), lang, exercise)
    expected = kit_files(lang, exercise)
    on_disk = sorted(p.relative_to(dest) for p in dest.rglob("*") if p.is_file())
    assert on_disk == sorted(expected)
    assert sorted(pathlib.Path(p) if pathlib.Path(p).is_absolute() else dest / p
                  for p in written) == sorted(dest / p for p in expected)
    for target, source in expected.items():
        assert (dest / target).read_bytes() == (KIT / source).read_bytes(), target


def test_write_lab_kit_passes_and_its_exercise_fails(tmp_path, python_with_torch):
    write_lab = _write_lab()
    full = tmp_path / "full"
    write_lab("pytorch", str(full), "en", False)
    result = run_kit_tests(python_with_torch, full)
    assert result.returncode == 0, result.stdout + result.stderr
    exercise = tmp_path / "exercise"
    write_lab("pytorch", str(exercise), "zh", True)
    result = run_kit_tests(python_with_torch, exercise)
    assert result.returncode != 0 and "NotImplementedError" in result.stdout, result.stdout
