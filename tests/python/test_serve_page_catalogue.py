"""The words of the `tokpos serve` page: one catalogue per language in
apps/tokpos/serve/assets/app.js, read here as the JSON it is written in.

Every key is in both languages with the same {placeholders} (the numbers come
in through them, so both languages show the same digits); every key the page
names (data-i18n in index.html, t("...") in app.js) is in the catalogue and
every text of it is shown; and each text writes the same numbers in both.
"""

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASSETS = os.path.join(ROOT, "apps", "tokpos", "serve", "assets")


def read(name):
    with open(os.path.join(ASSETS, name), encoding="utf-8") as f:
        return f.read()


def catalogue():
    js = read("app.js")
    begin = js.index("// catalogue: begin")
    end = js.index("// catalogue: end")
    block = js[begin:end]
    body = block[block.index("{"):block.rindex("}") + 1]
    return json.loads(body)


def placeholders(text):
    return sorted(set(re.findall(r"\{(\w+)\}", text)))


def test_both_languages_have_the_same_keys():
    messages = catalogue()
    assert sorted(messages) == ["en", "zh"]
    only_en = sorted(set(messages["en"]) - set(messages["zh"]))
    only_zh = sorted(set(messages["zh"]) - set(messages["en"]))
    assert only_en == [] and only_zh == [], f"only in en: {only_en}; only in zh: {only_zh}"


def test_each_text_has_the_same_placeholders_in_both():
    messages = catalogue()
    differ = {k: (placeholders(v), placeholders(messages["zh"].get(k, "")))
              for k, v in messages["en"].items() if placeholders(v) != placeholders(messages["zh"].get(k, ""))}
    assert differ == {}


def test_every_key_the_page_names_is_in_the_catalogue():
    messages = catalogue()
    html = read("index.html")
    js = read("app.js")
    used = set(re.findall(r'data-i18n(?:-aria)?="([^"]+)"', html))
    used |= set(re.findall(r'\bt\("([^"]+)"', js))
    # Keys built from the positions shown: offset.note.${mode}, matrix.note.${mode}.
    for prefix in re.findall(r'\bt\(`([\w.]+)\.\$\{mode\}`', js):
        used |= {f"{prefix}.{mode}" for mode in ("sinusoidal", "learned", "trained")}
    missing = sorted(k for k in used if k not in messages["en"])
    assert used and missing == [], f"named by the page but not in the catalogue: {missing}"
    unused = sorted(set(messages["en"]) - used)
    assert unused == [], f"in the catalogue but never shown: {unused}"


def test_each_text_writes_the_same_numbers_in_both():
    # Numbers of notation (D/2, 2π, ids 0–3, 10 to 100000) appear in both
    # languages alike; measured numbers come in through placeholders.
    messages = catalogue()
    digits = lambda text: sorted(re.findall(r"\d+", re.sub(r"\{\w+\}", "", text)))
    differ = {k: (v, messages["zh"][k]) for k, v in messages["en"].items() if digits(v) != digits(messages["zh"][k])}
    assert differ == {}


# What a Chinese text may write in Latin letters: the symbols and names that
# stay as they are in both languages (shapes, formulas, units, layouts' and
# formats' names). An English word in the Chinese catalogue fails here.
SYMBOLS = {"B", "T", "D", "L", "N", "k", "p", "t", "id", "cos", "sin", "base", "ms", "HTTP", "UTF-8",
           "tokpos", "interleaved", "halves", "t2t", "tensor2tensor"}


def test_every_chinese_text_is_chinese():
    english = {}
    for key, text in catalogue()["zh"].items():
        words = set(re.findall(r"[A-Za-z][A-Za-z0-9_-]*", re.sub(r"\{\w+\}", "", text))) - SYMBOLS
        if words:
            english[key] = sorted(words)
    assert english == {}, f"English words in the Chinese texts: {english}"
