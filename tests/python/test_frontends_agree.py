"""One rule per parameter: the same bad value gets the same message from the
CLI (`tokpos demo --dim 0`: its exit status and stderr), from
`python -m tokpos demo --dim 0` (stderr) and from `tokpos serve`
(`/api/embed?dim=0`: a 400 whose JSON names the parameter)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest

import tokpos

from conftest import REPO, cli_path

sys.path.insert(0, str(REPO / "tests" / "browser"))
from serve_process import ServeProcess  # noqa: E402

TIMEOUT = 60


@pytest.fixture(scope="module")
def server():
    cli = cli_path()
    if cli is None:
        pytest.skip("the C++ tool is not built: set TOKPOS_CLI or run `make build` (build/bin/tokpos)")
    proc = ServeProcess(str(cli))
    url = proc.start()
    try:
        yield url
    finally:
        proc.stop()


def api(url: str, path: str, **params) -> tuple[int, dict]:
    """GET url/path?params: the status and the JSON body."""
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url}{path}?{query}", timeout=TIMEOUT) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)


# parameter, bad value, the one message
DEMO_CASES = [
    ("dim", "0", "dim = '0' is outside [1, 1048576]"),
    ("dim", "1048577", "dim = '1048577' is outside [1, 1048576]"),
    ("dim", "abc", "dim = 'abc' is not an integer in [1, 1048576]"),
    ("context", "0", "context = '0' is outside [1, 67108864]"),
    ("context", "2.5", "context = '2.5' is not an integer in [1, 67108864]"),
    ("vocab", "16777217", "vocab = '16777217' is outside [1, 16777216]"),
    ("seed", "-1", "seed = '-1' is not an integer in [0, 2^64 - 1 = 18446744073709551615]"),
    ("base", "0", "base = '0' must be finite and > 0"),
    ("base", "-3", "base = '-3' must be finite and > 0"),
    ("base", "inf", "base = 'inf' must be finite and > 0"),
    ("base", "abc", "base = 'abc' is not a number (it must be finite and > 0)"),
]


@pytest.mark.parametrize("name,value,message", DEMO_CASES)
def test_demo_options_and_api_parameters_share_one_message(cli, server, name, value, message):
    c = run([str(cli), "demo", f"--{name}", value])
    assert c.returncode != 0 and c.stdout == ""
    assert f"--{name}: {message}\n" in c.stderr, c.stderr

    py = run([sys.executable, "-m", "tokpos", "demo", f"--{name}", value])
    assert py.returncode == 2 and py.stdout == ""
    assert f"argument --{name}: {message}\n" in py.stderr, py.stderr

    status, body = api(server, "api/embed", text="a", **{name: value})
    assert status == 400
    assert body == {"error": message, "parameter": name}


@pytest.mark.parametrize("value", ["sideways", "Interleaved", ""])
def test_layout_has_one_list_and_one_message(cli, server, tmp_path, value):
    names = ", ".join(tokpos._core.layout_names())
    assert tokpos.LAYOUTS == tuple(tokpos._core.layout_names())
    message = f"layout = '{value}' is not one of {names}"
    out = tmp_path / "t.npy"
    for command in (["table", "--dim", "4", "--context", "4", "--out", str(out)], ["plot", "--out", str(tmp_path)]):
        c = run([str(cli), *command, "--layout", value])
        assert c.returncode != 0
        assert f"--layout: {message}\n" in c.stderr, c.stderr
    assert not out.exists()

    with pytest.raises(ValueError) as e:
        tokpos.sinusoidal_table(4, 4, layout=value)
    assert str(e.value) == message

    for path in ("api/embed", "api/similarity"):
        status, body = api(server, path, text="a", layout=value)
        assert status == 400
        assert body == {"error": message, "parameter": "layout"}


def test_every_layout_is_accepted_by_every_front_end(cli, server, tmp_path):
    for name in tokpos._core.layout_names():
        assert run([str(cli), "table", "--layout", name, "--dim", "4", "--context", "4",
                    "--out", str(tmp_path / f"{name}.npy")]).returncode == 0
        assert tokpos.sinusoidal_table(4, 4, layout=name).shape == (4, 4)
        status, body = api(server, "api/similarity", dim="4", context="4", layout=name)
        assert status == 200 and body["config"]["layout"] == name


def test_help_texts_state_the_rules(cli):
    c = run([str(cli), "demo", "--help"])
    py = run([sys.executable, "-m", "tokpos", "demo", "--help"])
    for name in ("dim", "context", "vocab", "seed", "base"):
        rule = tokpos._core.describe_param(name)
        assert rule in c.stdout, (name, c.stdout)
        assert rule in " ".join(py.stdout.split()), (name, py.stdout)


def test_the_page_offers_the_cores_layouts():
    """The page's layout menu carries a description per option; its values
    are the core's layout names, every one, in the core's order."""
    import html.parser

    class Options(html.parser.HTMLParser):
        def __init__(self):
            super().__init__()
            self.values, self.inside = [], False

        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if tag == "select":
                self.inside = attrs.get("id") == "layout"
            elif tag == "option" and self.inside:
                self.values.append(attrs["value"])

        def handle_endtag(self, tag):
            if tag == "select":
                self.inside = False

    page = Options()
    page.feed((REPO / "apps/tokpos/serve/assets/index.html").read_text(encoding="utf-8"))
    assert tuple(page.values) == tokpos.LAYOUTS
