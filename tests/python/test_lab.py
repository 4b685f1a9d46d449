"""python -m tokpos lab: the same kit and the same lines as the C++ tool's
`tokpos lab`, through the same C++ code (tokpos._core.write_lab)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tokpos import _core


def _files(root: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _env(**lang: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG")}
    env.update(lang)
    return env


def _python_m(*args: str, cwd: pathlib.Path, **lang: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokpos", *args], cwd=cwd, env=_env(**lang),
                          capture_output=True, timeout=60)


def _tool(cli, *args: str, cwd: pathlib.Path, **lang: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *args], cwd=cwd, env=_env(**lang), capture_output=True, timeout=60)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_python_m_lab_c_writes_the_tool_s_files_and_lines(cli, tmp_path, lang):
    (tmp_path / "py").mkdir()
    py = _python_m("lab", "c", "kit", "--lang", lang, cwd=tmp_path / "py")
    (tmp_path / "cc").mkdir()
    cc = _tool(cli, "lab", "c", "kit", "--lang", lang, cwd=tmp_path / "cc")
    assert py.returncode == 0, py.stderr
    assert cc.returncode == 0, cc.stderr
    assert py.stdout == cc.stdout
    files = _files(tmp_path / "py" / "kit")
    assert files == _files(tmp_path / "cc" / "kit")
    assert sorted(files) == ["Makefile", "TASK.md", "framework/messages.h", "framework/student.c",
                             "framework/student.h", "framework/verify.c", "framework/verify.h"]
    assert b"cd kit && make clean && make test" in py.stdout
    chinese = "\u601d\u8003\u9898".encode()  # 思考题, a heading of the Chinese TASK.md
    assert (chinese in files["TASK.md"]) == (lang == "zh")


def test_without_lang_the_environment_decides(tmp_path):
    zh = _python_m("lab", "c", "zh", cwd=tmp_path, LANG="zh_CN.UTF-8")
    en = _python_m("lab", "c", "en", cwd=tmp_path, LC_ALL="C", LANG="zh_CN.UTF-8")
    assert zh.returncode == 0 and en.returncode == 0, (zh.stderr, en.stderr)
    assert "下一步".encode() in zh.stdout
    assert b"Next:" in en.stdout
    assert "实验".encode() in (tmp_path / "zh" / "TASK.md").read_bytes()
    assert (tmp_path / "en" / "TASK.md").read_text(encoding="utf-8").startswith("# Lab")
    probe = "from tokpos import _core; print(_core.default_lang())"
    for lang, expected in ((dict(LANG="zh_TW"), "zh"), (dict(LC_MESSAGES="", LANG="zh_CN"), "zh"),
                           (dict(LC_ALL="en_US.UTF-8", LANG="zh_CN"), "en"), ({}, "en")):
        out = subprocess.run([sys.executable, "-c", probe], env=_env(**lang), capture_output=True, text=True,
                             timeout=60)
        assert out.stdout.strip() == expected, lang


def test_a_directory_that_is_not_empty_is_refused_and_kept(tmp_path):
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "mine.txt").write_text("mine")
    r = _python_m("lab", "c", "kit", "--lang", "en", cwd=tmp_path)
    assert r.returncode == 1
    assert b"tokpos: error: write_lab: directory 'kit' exists and is not empty" in r.stderr
    assert _files(tmp_path / "kit") == {"mine.txt": b"mine"}
    with pytest.raises(ValueError, match="exists and is not empty"):
        _core.write_lab("c", str(tmp_path / "kit"), "en", False)
    with pytest.raises(ValueError, match="'fr' is not one of en, zh"):
        _core.write_lab("c", str(tmp_path / "other"), "fr", False)
    assert not (tmp_path / "other").exists()


def test_write_lab_returns_the_paths_written(tmp_path):
    written = _core.write_lab("c", str(tmp_path / "k"), "en", False)
    assert written == sorted(written)
    assert {pathlib.Path(p) for p in written} == {p for p in (tmp_path / "k").rglob("*") if p.is_file()}


@pytest.mark.parametrize("exercise", [False, True])
def test_python_m_lab_pytorch_matches_the_tool(cli, tmp_path, exercise):
    if "pytorch" not in _core.lab_kinds():
        pytest.skip("this tree has no lab/pytorch")
    flags = ["--exercise"] if exercise else []
    py = _python_m("lab", "pytorch", str(tmp_path / "py"), "--lang", "en", *flags, cwd=tmp_path)
    cc = _tool(cli, "lab", "pytorch", str(tmp_path / "cc"), "--lang", "en", *flags, cwd=tmp_path)
    assert py.returncode == 0 and cc.returncode == 0, (py.stderr, cc.stderr)
    assert _files(tmp_path / "py") == _files(tmp_path / "cc")
    assert b"python main.py && python -m pytest tests" in py.stdout


