"""python -m tokpos demo against the C++ tool's `tokpos demo`, byte for byte."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tokpos
from tokpos import __main__ as main_module

from conftest import REPO


def run_py(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tokpos", *args], capture_output=True, timeout=60, cwd=REPO)


def run_cli(cli, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *args], capture_output=True, timeout=60, cwd=REPO)


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--dim", "32"),
        ("--json",),
        ("--dim", "32", "--json"),
        ("--text", "naïve café ☕", "--seed", "18446744073709551615", "--context", "64"),
        ("--text", "", "--vocab", "300", "--base", "1e4"),
        ("--text", 'tab\there "quoted" \\', "--dim", "7", "--base", "500.5", "--json"),
    ],
)
def test_demo_matches_cli(cli, args):
    py, c = run_py("demo", *args), run_cli(cli, "demo", *args)
    assert c.returncode == 0, c.stderr
    assert py.returncode == 0, py.stderr.decode()
    assert py.stdout == c.stdout
    assert py.stdout  # a report was printed


def test_demo_is_the_core_report():
    report = tokpos._core.demo_report("Hello, transformer!", 260, 64, 128, 0, 10000.0, False)
    py = run_py("demo")
    assert py.returncode == 0 and py.stdout == report.encode()
    assert b"(B, T, D) = (1, 19, 64)" in py.stdout


def test_defaults_are_the_cli_defaults():
    args = main_module._parser().parse_args(["demo"])
    assert (args.text, args.vocab, args.dim, args.context, args.seed, args.base, args.json) == (
        "Hello, transformer!", 260, 64, 128, 0, 10000.0, False)
    demo_h = (REPO / "apps" / "tokpos" / "demo.h").read_text()
    for fragment in ('text = "Hello, transformer!"', "vocab_size = 260", "dim = 64", "max_context = 128",
                     "seed = 0", "base = 10000.0"):
        assert fragment in demo_h, fragment


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--dim", "0"), "--dim"),
        (("--dim", str((1 << 20) + 1)), "--dim"),
        (("--dim", "abc"), "--dim"),
        (("--vocab", "0"), "--vocab"),
        (("--vocab", str((1 << 24) + 1)), "--vocab"),
        (("--context", "0"), "--context"),
        (("--context", str((1 << 20) + 1)), "--context"),
        (("--seed", "-1"), "--seed"),
        (("--seed", str(1 << 64)), "--seed"),
        (("--seed", "1.5"), "--seed"),
        (("--base", "0"), "--base"),
        (("--base", "-3"), "--base"),
        (("--base", "inf"), "--base"),
        (("--base", "nan"), "--base"),
        (("--base", "x"), "--base"),
        (("--bogus",), "--bogus"),
    ],
)
def test_bad_arguments_rejected(args, needle):
    py = run_py("demo", *args)
    assert py.returncode != 0
    assert py.stdout == b""
    assert needle.encode() in py.stderr


@pytest.mark.parametrize("args", [("--dim", "0"), ("--seed", "-1"), ("--base", "inf"), ("--context", "0")])
def test_bad_arguments_rejected_by_cli_too(cli, args):
    assert run_cli(cli, "demo", *args).returncode != 0
    assert run_py("demo", *args).returncode != 0


def test_range_limits_accepted():
    # the largest --seed and the smallest --dim / --vocab are in range
    args = ["--seed", str((1 << 64) - 1), "--dim", "1", "--vocab", "1", "--text", ""]
    parsed = main_module._parser().parse_args(["demo", *args])
    assert parsed.seed == (1 << 64) - 1 and parsed.dim == 1 and parsed.vocab == 1


def test_library_error_exit_code_1(cli):
    # 19 bytes of text do not fit a context of 1: the library's error, status 1
    py, c = run_py("demo", "--context", "1"), run_cli(cli, "demo", "--context", "1")
    assert c.returncode == 1
    assert py.returncode == 1
    assert py.stdout == b""
    assert py.stderr == c.stderr
    assert b"tokpos: error:" in py.stderr and b"max_context" in py.stderr


def test_base_below_one_is_a_library_error():
    py = run_py("demo", "--base", "0.5")
    assert py.returncode == 1
    assert b"tokpos: error:" in py.stderr and b"--base" in py.stderr


def test_no_command_prints_usage():
    py = run_py()
    assert py.returncode != 0
    assert b"usage:" in py.stderr and b"demo" in py.stderr


def test_version():
    py = run_py("--version")
    assert py.returncode == 0
    assert py.stdout.decode().strip() == tokpos.__version__


def test_help_lists_options():
    py = run_py("demo", "--help")
    assert py.returncode == 0
    for opt in (b"--text", b"--dim", b"--vocab", b"--context", b"--seed", b"--base", b"--json"):
        assert opt in py.stdout


def test_cli_version_matches(cli):
    c = run_cli(cli, "--version")
    assert c.stdout.decode().strip() == tokpos.__version__
