"""VocabParallelEmbedding.from_safetensors and save_safetensors go through
the C++ reader and atomic writer (tokpos/safetensors.h, src/io/atomic_file.cc):
a FIFO is refused at once on both sides and stays a FIFO, a symbolic link is
followed and stays a link, an existing file keeps its mode and a new one gets
0666 & ~umask, and a rank reads only its own rows. The module calls run in
world_runner's bounded processes (a one-rank gloo group), so a regression
that blocks fails here instead of hanging the suite."""

from __future__ import annotations

import json
import os
import pathlib
import stat

import numpy as np
import pytest

from conftest import tokpos_torch

tokpos_torch()  # or a skip saying why (torch missing or too old)
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from tokpos import _core  # noqa: E402
from world_runner import run  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="torch.distributed with gloo is not available"
)

V, D = 7, 3


def read_st(path: pathlib.Path):
    """(header, float32 table) of a one-tensor file, read here without tokpos."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    return header, np.frombuffer(raw[8 + n :], dtype="<f4").reshape(V, D)


def table(seed: int) -> np.ndarray:
    from tokpos.torch import TokenEmbedding

    return TokenEmbedding(V, D, seed=seed).weight.detach().numpy()


def leftovers(directory: pathlib.Path, *expected: str) -> list:
    """Files in directory besides the expected ones (a temporary file left behind)."""
    return sorted(p.name for p in directory.iterdir() if p.name not in expected)


def test_a_fifo_is_refused_at_once_and_stays_a_fifo(tmp_path):
    """Loading from a FIFO does not wait for a writer (open would block);
    saving onto one does not swap it for a regular file."""
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    [[got]] = run(
        """
        path = DIR / "pipe.safetensors"
        result(load=attempt(lambda: VocabParallelEmbedding.from_safetensors(path, "wte")),
               save=attempt(lambda: VocabParallelEmbedding(7, 3, seed=1).save_safetensors(path, "wte")))
        """,
        tmp_path,
        timeout=60,
    )
    for what in ("load", "save"):
        assert got[what] is not None and got[what][0] == "OSError", got
        assert "pipe.safetensors" in got[what][1] and "FIFO" in got[what][1], got
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
    assert leftovers(tmp_path, "pipe.safetensors") == []


def test_other_paths_that_are_not_regular_files_are_refused(tmp_path):
    (tmp_path / "dir.safetensors").mkdir()
    (tmp_path / "dangling.safetensors").symlink_to("missing.safetensors")
    [[got]] = run(
        """
        load = VocabParallelEmbedding.from_safetensors
        vpe = VocabParallelEmbedding(7, 3, seed=1)
        result(load_dir=attempt(lambda: load(DIR / "dir.safetensors", "wte")),
               load_dev=attempt(lambda: load("/dev/zero", "wte")),
               save_dir=attempt(lambda: vpe.save_safetensors(DIR / "dir.safetensors", "wte")),
               save_dangling=attempt(lambda: vpe.save_safetensors(DIR / "dangling.safetensors", "wte")))
        """,
        tmp_path,
    )
    assert got["load_dir"][0] == "OSError" and "dir.safetensors" in got["load_dir"][1], got
    assert got["load_dev"][0] == "OSError" and "character device" in got["load_dev"][1], got
    assert got["save_dir"][0] == "OSError" and "directory" in got["save_dir"][1], got
    assert got["save_dangling"][0] == "OSError" and "does not exist" in got["save_dangling"][1], got
    assert (tmp_path / "dir.safetensors").is_dir() and not any((tmp_path / "dir.safetensors").iterdir())
    assert (tmp_path / "dangling.safetensors").is_symlink() and not (tmp_path / "missing.safetensors").exists()
    assert leftovers(tmp_path, "dir.safetensors", "dangling.safetensors") == []


def test_save_follows_symlinks_and_keeps_them(tmp_path):
    """The file a link ends in is replaced, in its own directory; the link
    (a relative one, and a chain of two) stays as it was."""
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    for name in ("a.safetensors", "b.safetensors"):
        (elsewhere / name).write_bytes(b"old contents")
    (work / "link.safetensors").symlink_to(os.path.join("..", "elsewhere", "a.safetensors"))
    (work / "second.safetensors").symlink_to(elsewhere / "b.safetensors")
    (work / "chain.safetensors").symlink_to("second.safetensors")
    links = {p.name: os.readlink(p) for p in work.iterdir()}
    run(
        """
        VocabParallelEmbedding(7, 3, seed=2).save_safetensors(DIR / "link.safetensors", "wte")
        VocabParallelEmbedding(7, 3, seed=3).save_safetensors(DIR / "chain.safetensors", "wte")
        """,
        work,
    )
    assert {p.name: os.readlink(p) for p in work.iterdir() if p.is_symlink()} == links, "a link was replaced"
    header, data = read_st(elsewhere / "a.safetensors")
    assert header["wte"]["shape"] == [V, D] and header["wte"]["dtype"] == "F32"
    np.testing.assert_array_equal(data, table(2))
    np.testing.assert_array_equal(read_st(elsewhere / "b.safetensors")[1], table(3))
    assert sorted(p.name for p in elsewhere.iterdir()) == ["a.safetensors", "b.safetensors"]


UMASKS = (0o022, 0o077, 0o002)
MODES = (0o644, 0o640, 0o604)


def test_new_files_get_0666_under_the_umask_and_old_files_keep_their_mode(tmp_path):
    for mode in MODES:
        path = tmp_path / f"old-{mode:o}.safetensors"
        path.write_bytes(b"old")
        os.chmod(path, mode)
    [[got]] = run(
        f"""
        modes = {{}}
        for umask in {UMASKS!r}:
            os.umask(umask)
            path = DIR / f"new-{{umask:o}}.safetensors"
            VocabParallelEmbedding(7, 3, seed=1).save_safetensors(path, "wte")
            modes[path.name] = stat.S_IMODE(os.stat(path).st_mode)
        os.umask(0o077)
        for mode in {MODES!r}:
            VocabParallelEmbedding(7, 3, seed=4).save_safetensors(DIR / f"old-{{mode:o}}.safetensors", "wte")
        result(modes=modes)
        """,
        tmp_path,
    )
    assert got["modes"] == {f"new-{u:o}.safetensors": 0o666 & ~u for u in UMASKS}, got
    for mode in MODES:
        path = tmp_path / f"old-{mode:o}.safetensors"
        assert stat.S_IMODE(os.stat(path).st_mode) == mode, path.name
        np.testing.assert_array_equal(read_st(path)[1], table(4))


def test_load_refuses_what_is_not_a_table(tmp_path):
    raw = np.arange(6, dtype="<f4").tobytes()
    text = json.dumps({"v": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]},
                       "i": {"dtype": "I32", "shape": [2, 3], "data_offsets": [24, 48]}}).encode()
    (tmp_path / "t.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + raw + raw)
    [[got]] = run(
        """
        load = lambda name: (lambda: VocabParallelEmbedding.from_safetensors(DIR / "t.safetensors", name))
        result(vec=attempt(load("v")), i32=attempt(load("i")), absent=attempt(load("w")))
        """,
        tmp_path,
    )
    assert got["vec"][0] == "ValueError" and "[6]" in got["vec"][1], got
    assert got["i32"][0] == "ValueError" and "I32" in got["i32"][1], got
    assert got["absent"][0] == "ValueError" and "'w'" in got["absent"][1], got


# ---- the binding's row read, in this process ---------------------------------


def test_read_rows_reads_only_the_rows_asked_for(tmp_path):
    """A file cut short after it was opened: rows before the cut still read
    (only their bytes are read), rows past it are an OSError naming them,
    never a signal; the output is a given float32 array."""
    path = tmp_path / "t.safetensors"
    full = np.arange(V * D, dtype=np.float32).reshape(V, D) - 5.5
    _core.write_safetensors(str(path), [("wte", full)], {})
    f = _core.SafetensorsFile.open(str(path))
    assert f.info("wte") == ("F32", [V, D])
    out = np.full((3, D), -1.0, np.float32)
    f.read_rows("wte", 2, out)
    np.testing.assert_array_equal(out, full[2:5])
    size = path.stat().st_size
    os.truncate(path, size - 2 * D * 4)  # rows 5 and 6 are gone
    f.read_rows("wte", 1, out)
    np.testing.assert_array_equal(out, full[1:4])
    with pytest.raises(OSError, match=r"truncated while reading.*rows \[4, 7\) of tensor 'wte'"):
        f.read_rows("wte", 4, out)
    with pytest.raises(ValueError, match="3 rows from row 6 of tensor 'wte'"):
        f.read_rows("wte", 6, out)


def test_read_rows_widens_f16_and_bf16_exactly(tmp_path):
    full = torch.randn(V, D, generator=torch.Generator().manual_seed(5))
    path = tmp_path / "h.safetensors"
    _core.write_safetensors(str(path), [("h", full.half()), ("b", full.bfloat16())], {"format": "pt"})
    f = _core.SafetensorsFile.open(str(path))
    for name, t in (("h", full.half()), ("b", full.bfloat16())):
        out = torch.empty((2, D))
        f.read_rows(name, 3, out)
        assert torch.equal(out, t[3:5].float()), name
