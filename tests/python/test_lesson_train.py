"""tokpos.lesson.train and python -m tokpos train: the lesson's training experiment.

A short run on tiny settings is reproducible bit for bit; the run file reads
back with the safetensors package as docs/lessons.md describes it; the
diagnostics that --json prints equal a numpy computation (written here, in
float64, independent of tokpos.diagnostics) on the saved snapshots; the
command line writes the file and refuses bad settings, naming the value and
its limit, before anything is trained or written.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ref_interleaved

torch = pytest.importorskip("torch")
safetensors_numpy = pytest.importorskip("safetensors.numpy")
from safetensors import safe_open  # noqa: E402

from tokpos import lesson  # noqa: E402

# Tiny settings: a run of a few steps takes well under a second.
TINY = dict(steps=4, every=2, layers=1, heads=2, dim=16, context=72, batch=2, threads=1)  # offsets up to 64 < L
TINY_ARGS = ["--steps", "4", "--every", "2", "--layers", "1", "--heads", "2", "--dim", "16", "--context", "72",
             "--batch", "2", "--threads", "1"]


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    """The command line's run file and --json output for TINY."""
    out = tmp_path_factory.mktemp("run") / "run.safetensors"
    proc = subprocess.run([sys.executable, "-m", "tokpos", "train", *TINY_ARGS, "--json", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout), proc.stderr


# -- reproducible ----------------------------------------------------------


def test_short_run_is_bitwise_reproducible(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    run_a = lesson.train(**TINY, out=a)
    run_b = lesson.train(**TINY, out=b)
    assert a.read_bytes() == b.read_bytes()
    for split in ("train", "heldout"):
        for scheme in ("learned", "sinusoidal"):
            assert run_a.loss[split][scheme].tobytes() == run_b.loss[split][scheme].tobytes()
    assert run_a.beyond == run_b.beyond
    # The training moved the table, and another seed gives other bytes: the comparison can fail.
    assert not np.array_equal(run_a.tables[0], run_a.tables[-1])
    c = tmp_path / "c.safetensors"
    lesson.train(**dict(TINY, seed=1), out=c)
    assert c.read_bytes() != a.read_bytes()


def test_two_threads_are_reproducible_too(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    lesson.train(**dict(TINY, threads=2, steps=2, every=1), out=a)
    lesson.train(**dict(TINY, threads=2, steps=2, every=1), out=b)
    assert a.read_bytes() == b.read_bytes()


def test_a_longer_run_begins_with_the_shorter_one():
    """The batches of step n do not depend on --steps: a longer run's first
    steps are the shorter run's (docs/lessons.md's longer run relies on it)."""
    short = lesson.train(**dict(TINY, steps=2, every=1))
    long = lesson.train(**dict(TINY, steps=4, every=1))
    assert long.steps[:3] == short.steps == [0, 1, 2]
    for s_table, l_table in zip(short.tables, long.tables):
        assert s_table.tobytes() == l_table.tobytes()
    for scheme in ("learned", "sinusoidal"):
        assert long.loss["heldout"][scheme][:3].tobytes() == short.loss["heldout"][scheme].tobytes()
        assert long.loss["train"][scheme][:3].tobytes() == short.loss["train"][scheme].tobytes()


def test_both_schemes_see_the_same_start_and_data(tmp_path):
    """Trained alone, each scheme gives the losses it gives beside the other."""
    both = lesson.train(**TINY)
    alone = lesson.train(**TINY, scheme="sinusoidal")
    assert alone.loss["heldout"]["sinusoidal"].tobytes() == both.loss["heldout"]["sinusoidal"].tobytes()
    assert "learned" not in alone.loss["train"] and alone.tables == []
    with pytest.raises(ValueError, match="this run trained sinusoidal only; the run file needs both schemes"):
        alone.save(tmp_path / "run.safetensors")
    assert not (tmp_path / "run.safetensors").exists()


def test_the_run_restores_the_thread_settings():
    import tokpos

    before = (torch.get_num_threads(), tokpos.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    lesson.train(**dict(TINY, threads=2, steps=1, every=1))
    assert (torch.get_num_threads(), tokpos.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == before


# -- the run file ------------------------------------------------------------


def test_the_run_file_reads_back_with_safetensors(tiny_file):
    path, doc, _ = tiny_file
    L, D, S = 72, 16, [0, 2, 4]
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
        names = set(f.keys())
    assert meta["tokpos.run"] == "1"
    assert json.loads(meta["steps"]) == S
    config = json.loads(meta["config"])
    assert {k: config[k] for k in ("layers", "heads", "dim", "context", "vocab", "seed", "threads", "steps", "every",
                                   "batch")} == dict(layers=1, heads=2, dim=D, context=L, vocab=260, seed=0, threads=1,
                                                     steps=4, every=2, batch=2)
    assert config["text"] == "positions" and config["lr"] == pytest.approx(3e-3)
    tensors = safetensors_numpy.load_file(str(path))
    expected = {f"positions.step_{s}" for s in S} | {"positions.sinusoidal"}
    expected |= {f"loss.{split}.{scheme}" for split in ("train", "heldout") for scheme in ("learned", "sinusoidal")}
    assert names == expected == set(tensors)
    for name, t in tensors.items():
        assert t.dtype == np.float32, name
        assert t.shape == ((L, D) if name.startswith("positions.") else (len(S),)), name
        assert np.isfinite(t).all(), name
    # The sinusoidal table is the formula's (float64 here, rounded to float32 as tokpos stores it).
    np.testing.assert_array_equal(tensors["positions.sinusoidal"], ref_interleaved(L, D).astype(np.float32))
    # Step 0 is the fresh table: N(0, 0.02^2) noise.
    assert 0.01 < tensors["positions.step_0"].std() < 0.03
    # The losses --json prints are the file's.
    for split in ("train", "heldout"):
        for scheme in ("learned", "sinusoidal"):
            np.testing.assert_array_equal(np.float32(doc["loss"][split][scheme]), tensors[f"loss.{split}.{scheme}"])
    # Untrained, the loss starts near ln(V) = ln(260) = 5.56.
    assert abs(tensors["loss.heldout.learned"][0] - np.log(260)) < 0.6


def test_past_L_the_learned_table_refuses_and_the_sinusoidal_one_extends(tiny_file):
    path, doc, _ = tiny_file
    with safe_open(str(path), framework="numpy") as f:
        beyond = json.loads(f.metadata()["beyond"])
    assert beyond == doc["beyond"]
    learned, sinusoidal = beyond["learned"], beyond["sinusoidal"]
    assert learned["policy"] == "error" and learned["loss"] is None
    assert "72 rows" in learned["message"] and "143" in learned["message"]  # the limit L and the last position asked
    assert sinusoidal["policy"] == "extend"
    assert np.isfinite(sinusoidal["loss"]) and np.isfinite(sinusoidal["loss_within"])
    assert sinusoidal["windows"] == learned["windows"] >= 1


# -- the diagnostics against numpy -------------------------------------------


def _cos_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _rotation_fit(P: np.ndarray, k: int) -> tuple[float, float]:
    """The best 2x2 rotation per column pair (2j, 2j + 1) from row p to row p + k
    (least squares: angle atan2(sum u x v, sum u . v)), then the largest
    residual, and that over the largest |entry| of the rows fitted."""
    L, D = P.shape
    worst = largest = 0.0
    for j in range(D // 2):
        u, v = P[: L - k, 2 * j : 2 * j + 2], P[k:, 2 * j : 2 * j + 2]
        dot = (v * u).sum()
        cross = (v[:, 0] * u[:, 1] - v[:, 1] * u[:, 0]).sum()
        phi = np.arctan2(cross, dot)
        c, s = np.cos(phi), np.sin(phi)
        r1 = v[:, 0] - (c * u[:, 0] + s * u[:, 1])
        r2 = v[:, 1] - (c * u[:, 1] - s * u[:, 0])
        worst = max(worst, np.abs(r1).max(), np.abs(r2).max())
        largest = max(largest, np.abs(u).max(), np.abs(v).max())
    return worst / largest, worst


def _numpy_diagnostics(P32: np.ndarray) -> dict:
    P = P32.astype(np.float64)
    L = P.shape[0]
    adj = _cos_rows(P[:-1], P[1:])
    out = {"adjacent_cosine": {"mean": adj.mean(), "std": adj.std(), "min": adj.min(), "max": adj.max()}}
    offsets = [k for k in (1, 2, 4, 8, 16, 32, 64) if k < L]
    out["cosine_by_offset"] = {str(k): _cos_rows(P[: L - k], P[k:]).mean() for k in offsets}
    out["relative_fit"] = {}
    for k in (1, 8):
        relative, worst = _rotation_fit(P, k)
        out["relative_fit"][str(k)] = {"relative": relative, "max_residual": worst}
    return out


def _assert_close(got, want, where: str) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for key in want:
            _assert_close(got[key], want[key], f"{where}.{key}")
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), where


def test_json_diagnostics_equal_numpy_on_the_saved_snapshots(tiny_file):
    path, doc, _ = tiny_file
    tensors = safetensors_numpy.load_file(str(path))
    assert [d["step"] for d in doc["diagnostics"]] == doc["steps"] == [0, 2, 4]
    for d in doc["diagnostics"]:
        want = _numpy_diagnostics(tensors[f"positions.step_{d['step']}"])
        _assert_close({k: d[k] for k in want}, want, f"step {d['step']}")
    _assert_close(doc["sinusoidal_diagnostics"], _numpy_diagnostics(tensors["positions.sinusoidal"]), "sinusoidal")


def test_json_holds_the_config_and_the_wall_time(tiny_file):
    _, doc, stderr = tiny_file
    assert doc["config"]["steps"] == 4 and doc["config"]["schemes"] == ["learned", "sinusoidal"]
    assert doc["wall_s"] > 0
    assert "4/4" in stderr  # the progress bar


# -- the command line -------------------------------------------------------


def test_cli_summary_in_both_languages(capsys):
    from tokpos.__main__ import main

    texts = {}
    for lang in ("en", "zh"):
        assert main(["train", *TINY_ARGS, "--no-progress", "--lang", lang]) == 0
        texts[lang] = capsys.readouterr().out
    assert "refused" in texts["en"] and "拒绝" in texts["zh"]
    # The same numbers in both languages (the first line, with the wall time, aside).
    numbers = {lang: re.findall(r"[-+]?\d+\.\d{3}\b", t.split("\n", 1)[1]) for lang, t in texts.items()}
    assert numbers["en"] == numbers["zh"] and len(numbers["en"]) > 10


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "0"], "steps = 0 must be >= 1"),
        (["--every", "0"], "every = 0 must be >= 1"),
        (["--steps", "3", "--every", "4"], "every = 4 is larger than steps = 3"),
        (["--threads", "0"], "threads = 0 must be >= 1"),
        (["--dim", "18", "--heads", "4"], "dim = 18 is not a multiple of heads = 4"),
        (["--lr", "0"], "lr = 0.0 is outside (0, 1]"),
        (["--steps", "x"], "steps = 'x' is not an integer"),
        (["--scheme", "learned"], "scheme = 'learned' trains one model"),
    ],
)
def test_cli_refuses_bad_settings_and_writes_nothing(tmp_path, capsys, args, message):
    from tokpos.__main__ import main

    out = tmp_path / "run.safetensors"
    out.write_bytes(b"before")
    with pytest.raises(SystemExit) as e:
        main(["train", *args, "--out", str(out)])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert out.read_bytes() == b"before"


def test_cli_refuses_a_missing_folder(tmp_path, capsys):
    from tokpos.__main__ import main

    missing = tmp_path / "no" / "run.safetensors"
    with pytest.raises(SystemExit) as e:
        main(["train", *TINY_ARGS, "--out", str(missing)])
    assert e.value.code == 2
    assert f"the folder {missing.parent} does not exist" in capsys.readouterr().err
    assert not missing.parent.exists()


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(steps=0), "steps = 0 must be >= 1"),
        (dict(steps=5, every=6), "every = 6 is larger than steps = 5"),
        (dict(context=1), "context = 1 must be >= 2"),
        (dict(dim=9, heads=3), "dim = 9 is odd"),
        (dict(context=2000), "the text has 25"),
    ],
)
def test_train_names_the_bad_value_and_its_limit(settings, message):
    with pytest.raises(ValueError) as e:
        lesson.train(**dict(TINY, **settings))
    assert message in str(e.value)


def test_the_text_ships_with_the_package():
    text = lesson.load_text("positions")
    assert len(text.encode("utf-8")) > 20000
    assert "The Order of Things" in text and "句子是一排词" in text
    held = text.encode("utf-8")[-len(text.encode("utf-8")) // 10 :].decode("utf-8", "ignore")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in held) and any("a" <= ch <= "z" for ch in held)
    with pytest.raises(ValueError, match="'nope' is not one of the packaged texts: positions"):
        lesson.load_text("nope")
