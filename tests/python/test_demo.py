"""python -m tokpos demo against the C++ tool's `tokpos demo`, byte for byte."""

from __future__ import annotations

import json
import shutil
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


def test_defaults_are_the_cores_through_both_front_ends(cli):
    # Neither front end copies a default: both report the core's DemoOptions.
    d = tokpos._core.DemoOptions()
    want = {"vocab_size": d.vocab_size, "dim": d.dim, "max_context": d.max_context, "seed": d.seed, "base": d.base}
    py, c = run_py("demo", "--json"), run_cli(cli, "demo", "--json")
    assert py.returncode == 0 and c.returncode == 0, (py.stderr, c.stderr)
    for out in (py.stdout, c.stdout):
        report = json.loads(out)
        assert report["config"] == want
        assert report["text"] == d.text
    args = main_module._parser().parse_args(["demo"])
    assert (args.text, args.vocab, args.dim, args.context, args.seed, args.base, args.json) == (
        d.text, d.vocab_size, d.dim, d.max_context, d.seed, d.base, d.json)


def test_the_extension_holds_no_terminal_or_signal_code():
    # The CLI's progress bar (isatty) and signal deferral (sigaction) live in
    # apps/; the extension, built from python/ext and src/ only, calls neither.
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    listing = subprocess.run([nm, "-D", "--undefined-only", tokpos._core.__file__], capture_output=True,
                             text=True, timeout=60, check=True).stdout
    imported = {line.split()[-1].split("@")[0] for line in listing.splitlines() if line.strip()}
    assert imported, listing
    assert not imported & {"isatty", "sigaction"}, sorted(imported & {"isatty", "sigaction"})


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--dim", "0"), "--dim"),
        (("--dim", str((1 << 20) + 1)), "--dim"),
        (("--dim", "abc"), "--dim"),
        (("--vocab", "0"), "--vocab"),
        (("--vocab", str((1 << 24) + 1)), "--vocab"),
        (("--context", "0"), "--context"),
        (("--context", str((1 << 26) + 1)), "--context"),
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


def test_base_at_or_below_one_is_reported_by_both(cli):
    # The base's rule is the library's, finite and > 0: wavelengths that
    # shrink with the pair are reported as those that grow are.
    for base in ("0.5", "1"):
        py, c = run_py("demo", "--base", base), run_cli(cli, "demo", "--base", base)
        assert c.returncode == 0 and py.returncode == 0, (c.stderr, py.stderr)
        assert py.stdout == c.stdout
        assert f"base = {base}:".encode() in py.stdout


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
