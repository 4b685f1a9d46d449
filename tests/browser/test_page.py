#!/usr/bin/python3
"""The page of `tokpos serve` in headless Chromium, driven through Selenium.

Starts `tokpos serve --port 0` (the binary in $TOKPOS_CLI, else
build/bin/tokpos), opens the page and checks that
  - typing "Hi" shows the byte-token ids 76 and 109 as chips,
  - moving D from 64 to 32 with the keyboard halves the sin/cos pairs shown
    (32 -> 16) and the D/2 panel follows (16 -> 8),
  - hovering a heatmap cell, or moving over it with the arrow keys, shows
    its row, column and value,
  - every control has a label,
  - a bad request shows the server's own message in the error area,
  - the browser console holds no errors (SEVERE entries),
  - the bytes of a Chinese character sit under it (你 above 0xe4 0xbd 0xa0),
    invalid UTF-8 stays one chip per byte, repeated ids light up together,
    the sum's tooltip reads token + position = sum, the notes follow the
    positions shown and the shared colour scale says why token rows look faint,
  - the 中文 switch leaves no English sentence of the catalogue visible, shows
    the same numbers, is remembered, and ?lang= wins (screenshot serve-zh.png),
  - serve --weights adds the trained choice, with its own notes,
  - serve --weights RUN.safetensors (a training run) shows the run's panel:
    moving its slider with the keyboard changes the step shown, the table
    drawn and the adjacent cosine, which is the snapshot's (computed here),
    and the trained view's panels follow the step.
It prints the page's update times (input event to the end of drawing) for
D <= 512 and T <= 256 without judging them, saves screenshots under
build/browser/ (or --out) and stops the server with SIGTERM, also on failure.

Run with Debian's python3 (python3-selenium, chromium, chromium-driver):
    make test-browser
    TOKPOS_CLI=build/bin/tokpos /usr/bin/python3 tests/browser/test_page.py
"""

import argparse
import json
import os
import signal
import statistics
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import ServeProcess  # noqa: E402

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTH, HEIGHT = 1280, 900


class Failure(AssertionError):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)
    print(f"ok: {message}")


def find_binary(names):
    for name in names:
        for folder in ("/usr/bin", "/usr/lib/chromium"):
            path = os.path.join(folder, name)
            if os.access(path, os.X_OK):
                return path
    return None


def start_chromium():
    options = webdriver.ChromeOptions()
    binary = os.environ.get("CHROMIUM") or find_binary(["chromium", "chromium-browser"])
    if binary:
        options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},{HEIGHT}",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver_path = os.environ.get("CHROMEDRIVER") or find_binary(["chromedriver"])
    service = Service(driver_path) if driver_path else Service()
    driver = webdriver.Chrome(service=service, options=options)
    # The viewport, not the window, is what the screenshots show.
    inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    driver.set_window_size(WIDTH + WIDTH - inner[0], HEIGHT + HEIGHT - inner[1])
    return driver


def renders(driver):
    return driver.execute_script("return window.tokpos ? window.tokpos.renders : 0")


def settle(driver, before, timeout=20):
    """Waits until an update newer than `before` has been drawn and none is pending."""
    WebDriverWait(driver, timeout, poll_frequency=0.01).until(
        lambda d: d.execute_script(
            "return !!window.tokpos && !window.tokpos.pending && window.tokpos.renders > arguments[0]", before
        ),
        f"the page did not finish an update within {timeout} s",
    )
    return driver.execute_script("return window.tokpos.lastUpdateMs")


def set_value(driver, element_id, value):
    """Sets a control's value and fires the input event, as a user's edit does."""
    driver.execute_script(
        "const e = document.getElementById(arguments[0]);"
        "e.value = arguments[1];"
        "e.dispatchEvent(new Event('input', {bubbles: true}));",
        element_id,
        str(value),
    )


def choose_positions(driver, value):
    driver.execute_script(
        "const e = document.querySelector(`input[name=positions][value=${arguments[0]}]`);"
        "e.checked = true;"
        "e.dispatchEvent(new Event('input', {bubbles: true}));",
        value,
    )


def text_of(driver, css):
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def screenshot(driver, out, name):
    path = os.path.join(out, name)
    driver.save_screenshot(path)
    print(f"screenshot: {os.path.relpath(path, ROOT)}")
    return path


def full_page_screenshot(driver, out, name):
    import base64

    size = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1},
        },
    )
    path = os.path.join(out, name)
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot["data"]))
    print(f"screenshot: {os.path.relpath(path, ROOT)} ({size[0]} x {size[1]})")


def console_entries(driver):
    return driver.get_log("browser")


def run(url, out):
    driver = start_chromium()
    try:
        driver.get(url)
        settle(driver, 0)
        check(driver.title.startswith("tokpos"), f"the page loads from {url} (title {driver.title!r})")
        check(not driver.find_element(By.ID, "error").is_displayed(), "no error is shown after loading")
        screenshot(driver, out, "page-start.png")

        # Every control has a label.
        unlabelled = driver.execute_script(
            "return [...document.querySelectorAll('#controls input, #controls select, #controls textarea')]"
            ".filter(e => e.labels.length === 0).map(e => e.id || e.name)"
        )
        check(unlabelled == [], f"every control has a <label> (unlabelled: {unlabelled})")

        # Type "Hi": bytes 72 and 105, ids byte + 4.
        box = driver.find_element(By.ID, "text")
        before = renders(driver)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.BACKSPACE)
        box.send_keys("Hi")
        settle(driver, before)
        chips = text_of(driver, "#chips .chip .chip-id")
        check(chips == ["76", "109"], f'typing "Hi" shows the chips 76 and 109 (shown: {chips})')
        shape = driver.find_element(By.ID, "shape").text
        check(shape == "(1, 2, 64)", f"the shape reads (1, 2, 64) (shown: {shape})")
        screenshot(driver, out, "page-hi.png")

        # Hovering a heatmap cell shows row, column and value.
        canvas = driver.find_element(By.ID, "heat-position")
        ActionChains(driver).move_to_element_with_offset(canvas, 5, 5).perform()
        tip = driver.find_element(By.ID, "tooltip")
        tip_text = tip.text
        check(
            tip.is_displayed() and "position" in tip_text and "d = " in tip_text and "value = " in tip_text,
            f"hovering the position heatmap shows row, column and value ({tip_text!r})",
        )
        ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()
        check(not tip.is_displayed(), "the tooltip hides when the pointer leaves")

        # The heatmaps read out from the keyboard too: focus, then arrow keys.
        canvas = driver.find_element(By.ID, "heat-token")
        canvas.send_keys(Keys.ARROW_DOWN)
        canvas.send_keys(Keys.ARROW_DOWN, Keys.ARROW_RIGHT, Keys.ARROW_RIGHT)
        tip_text = tip.text
        check(
            tip.is_displayed() and tip_text.startswith("t = 1 ('i', id 109)") and "d = 2" in tip_text,
            f"arrow keys on the focused token heatmap read out row 1, column 2 ({tip_text!r})",
        )
        driver.execute_script("document.activeElement.blur()")

        # D from 64 to 32 with the keyboard: four steps of 8 down.
        pairs_before = driver.find_element(By.ID, "pairs-d").text
        half_before = driver.find_element(By.ID, "pairs-half").text
        check(pairs_before == "32 pairs", f"D = 64 shows 32 pairs (shown: {pairs_before!r})")
        check(half_before == "16 pairs", f"its D/2 panel shows 16 pairs (shown: {half_before!r})")
        dim = driver.find_element(By.ID, "dim")
        before = renders(driver)
        dim.send_keys(Keys.ARROW_LEFT * 4)
        settle(driver, before)
        check(dim.get_attribute("value") == "32", f"the D slider moves to 32 from the keyboard (value {dim.get_attribute('value')})")
        pairs_after = driver.find_element(By.ID, "pairs-d").text
        half_after = driver.find_element(By.ID, "pairs-half").text
        check(pairs_after == "16 pairs", f"D = 32 halves the pairs: 32 -> 16 (shown: {pairs_after!r})")
        check(half_after == "8 pairs", f"the D/2 panel halves too: 16 -> 8 (shown: {half_after!r})")
        check(
            driver.find_element(By.ID, "shape").text == "(1, 2, 32)",
            "the shape follows D: (1, 2, 32)",
        )
        screenshot(driver, out, "page-d32.png")

        # The console is clean after the normal use above.
        entries = console_entries(driver)
        severe = [e for e in entries if e.get("level") == "SEVERE"]
        check(severe == [], f"the browser console holds no errors ({len(entries)} entries, SEVERE: {severe})")

        times = measure_updates(driver)
        full_page_screenshot(driver, out, "page-full.png")
        edge_cases(driver)
        learners(driver, url, out)

        # A bad request: the error area shows the server's own message.
        long_text = "a" * 5000
        api = urllib.parse.urljoin(
            url,
            "api/embed?"
            + urllib.parse.urlencode(
                {"text": long_text, "dim": 64, "context": 128, "base": 10000, "layout": "interleaved",
                 "positions": "sinusoidal", "seed": 0}
            ),
        )
        try:
            urllib.request.urlopen(api, timeout=10)
            status, expected = 200, None
        except urllib.error.HTTPError as e:
            status, expected = e.code, json.loads(e.read().decode()).get("error")
        check(status == 400 and bool(expected), f"the API answers 5000 bytes of text with 400 and a message ({expected!r})")
        set_value(driver, "dim", 64)
        before = renders(driver)
        set_value(driver, "text", long_text)
        settle(driver, before)
        error = driver.find_element(By.ID, "error")
        check(
            error.is_displayed() and expected in error.text and error.get_attribute("role") == "alert",
            f"the error area (role=alert) shows the server's message ({error.text!r})",
        )
        screenshot(driver, out, "page-error.png")
        before = renders(driver)
        set_value(driver, "text", "Hi")
        settle(driver, before)
        check(not error.is_displayed(), "the error area clears on the next good answer")
        entries = console_entries(driver)
        unexpected = [
            e for e in entries
            if e.get("level") == "SEVERE" and "status of 400" not in e.get("message", "")
        ]
        check(unexpected == [], f"the console holds nothing but the failed request's 400 ({unexpected})")
        return times
    finally:
        driver.quit()


def edge_cases(driver):
    """Empty text, every layout, learned positions and a context past the matrix's limit draw without errors."""
    def apply(element, value):
        before = renders(driver)
        if element == "positions":
            choose_positions(driver, value)
        else:
            set_value(driver, element, value)
        settle(driver, before)
        error = driver.find_element(By.ID, "error")
        if error.is_displayed():
            raise Failure(f"{element} = {value!r} shows an error: {error.text}")

    apply("text", "")
    chips = text_of(driver, "#chips .chip")
    shape = driver.find_element(By.ID, "shape").text
    check(chips == [] and shape == "(1, 0, 64)", f"empty text draws no chips and the shape (1, 0, 64) (shown: {shape})")
    apply("text", "Hi")
    for layout in ("halves", "fairseq", "t2t", "ggml", "interleaved"):
        apply("layout", layout)
    check(True, "every column layout draws without an error")
    apply("positions", "learned")
    params = driver.find_element(By.ID, "params-position").text
    check(params == "8,192 parameters", f"learned positions at L = 128, D = 64 count L*D = 8,192 parameters ({params!r})")
    apply("positions", "sinusoidal")
    apply("context", 1024)
    missing = driver.find_element(By.ID, "matrix-missing")
    check(
        missing.is_displayed() and not driver.find_element(By.ID, "matrix").is_displayed(),
        f"L = 1024 replaces the matrix with the server's note ({missing.text!r})",
    )
    apply("context", 128)
    check(driver.find_element(By.ID, "matrix").is_displayed(), "L = 128 draws the matrix again")


def visible_text(driver):
    return driver.execute_script("return document.body.innerText")


def numbers_in(texts):
    import re

    return [re.findall(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?", t) for t in texts]


def english_left(driver):
    """The English catalogue's sentences (the parts between placeholders) still visible."""
    import re

    messages = driver.execute_script("return window.tokpos.messages")
    shown = visible_text(driver) + "\n" + driver.find_element(By.ID, "tooltip").get_attribute("textContent")
    left = []
    for key, text in messages["en"].items():
        if text == messages["zh"][key]:
            continue
        for part in re.split(r"\{\w+\}", text):
            words = re.findall(r"[A-Za-z]{2,}", part)
            if len(words) >= 2 and part.strip() in shown:
                left.append((key, part.strip()))
    return left


def learners(driver, url, out):
    """UTF-8 groups, repeated ids, the sum's tooltip, the notes, the colour scale, and the 中文 switch."""
    def apply(element, value):
        before = renders(driver)
        if element == "positions":
            choose_positions(driver, value)
        elif element == "scale":
            driver.find_element(By.CSS_SELECTOR, f"input[name=scale][value={value}]").click()
            return
        else:
            set_value(driver, element, value)
        settle(driver, before)

    apply("text", "你好你")
    chars = text_of(driver, "#chips .char-group .group-char")
    first = text_of(driver, "#chips .char-group:first-child .chip .chip-char")
    check(chars == ["你", "好", "你"] and first == ["0xe4", "0xbd", "0xa0"],
          f"each Chinese character stands above its three byte chips ({chars}, {first})")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#chips .chip")) == 9, "the nine bytes are nine chips")
    groups = driver.execute_script(
        "return [[0xe4, 0xbd], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0x48, 0xe4, 0xbd, 0xa0]]"
        ".map(b => window.tokpos.utf8Groups(b).map(g => g.char === null ? g.count : g.char))")
    check(groups == [[1, 1], [1, 1], [1, 1, 1], [1, "你"]],
          f"invalid UTF-8 (cut short, overlong, a surrogate) stays one chip per byte ({groups})")

    # 0xbd is in 你 (e4 bd a0) and in 好 (e5 a5 bd): pointing at one lights up all three.
    ActionChains(driver).move_to_element(driver.find_elements(By.CSS_SELECTOR, "#chips .chip")[1]).perform()
    hot = [int(e.get_attribute("data-t")) for e in driver.find_elements(By.CSS_SELECTOR, "#chips .chip.hot")]
    check(hot == [1, 5, 7], f"pointing at the byte 0xbd lights up every token with its id (t = {hot})")
    ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()

    canvas = driver.find_element(By.ID, "heat-sum")
    ActionChains(driver).move_to_element_with_offset(canvas, 5, 5).perform()
    tip = driver.find_element(By.ID, "tooltip").text
    import re

    m = re.search(r"token (\S+) \+ position (\S+) = sum (\S+)", tip)
    check(m is not None and abs(float(m[1]) + float(m[2]) - float(m[3])) < 1e-3,
          f"the sum's tooltip shows token value + position value = sum ({tip!r})")
    ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()

    note = driver.find_element(By.ID, "matrix-note").text
    check("bright diagonal bands" in note, f"the sinusoidal matrix note names its bands ({note!r})")
    apply("positions", "learned")
    note = driver.find_element(By.ID, "matrix-note").text
    check("bands" not in note and "random" in note, f"the learned note does not promise bands ({note!r})")
    apply("positions", "sinusoidal")

    apply("scale", "shared")
    legends = [text_of(driver, f"#legend-{n} span") for n in ("token", "position", "sum")]
    scale_note = driver.find_element(By.ID, "scale-note").text
    check(legends[0] == legends[1] == legends[2] and "look faint" in scale_note,
          f"one shared scale: three equal legends and a sentence on the faint token rows ({scale_note!r})")

    ids = ["shape", "params-token", "params-position", "adjacent", "pairs-d", "bands-d-list", "scale-note",
           "lookup-dims", "dim-value", "context-value"]
    english = [driver.find_element(By.ID, i).text for i in ids]
    driver.find_element(By.ID, "lang-zh").click()
    time.sleep(0.2)
    check(driver.execute_script("return document.documentElement.lang") == "zh-CN", "中文 switches the page to Chinese")
    ActionChains(driver).move_to_element_with_offset(driver.find_element(By.ID, "heat-sum"), 5, 5).perform()
    tip = driver.find_element(By.ID, "tooltip").text
    check("和" in tip and "位置" in tip, f"the tooltip speaks Chinese too ({tip!r})")
    left = english_left(driver)
    check(left == [], f"no English sentence of the catalogue is left visible in Chinese ({left})")
    chinese = [driver.find_element(By.ID, i).text for i in ids]
    check(numbers_in(chinese) == numbers_in(english) and chinese != english,
          f"the Chinese page shows the same numbers as the English one ({chinese})")
    screenshot(driver, out, "serve-zh.png")
    ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()

    # Remembered across loads; an explicit ?lang= wins.
    driver.get(url)
    settle(driver, 0)
    check(driver.find_element(By.ID, "ids-title").text == "词元 id", "the choice of Chinese is remembered on reload")
    driver.get(url + "?lang=en")
    settle(driver, 0)
    check(driver.find_element(By.ID, "ids-title").text == "Token ids", "?lang=en wins over the remembered choice")
    driver.get(url + "?lang=zh")
    settle(driver, 0)
    check(driver.find_element(By.ID, "lang-zh").get_attribute("aria-pressed") == "true", "/?lang=zh opens in Chinese")
    driver.find_element(By.ID, "lang-en").click()
    check(driver.find_element(By.ID, "ids-title").text == "Token ids" and "lang=en" in driver.current_url,
          "English again, and the address follows the switch")
    check(not driver.find_element(By.ID, "trained-choice").is_displayed(), "no trained choice without --weights")


def write_checkpoint(path, L=64, D=32, V=8):
    """A GPT-2 style .safetensors file (wte, wpe), f32: a smooth, rippled position table."""
    import math
    import struct

    wte = [0.001 * (i % 97) for i in range(V * D)]
    wpe = [math.cos(p / (d + 2)) + 0.01 * ((7 * p + d) % 5) for p in range(L) for d in range(D)]
    a, b = 4 * len(wte), 4 * len(wpe)
    header = json.dumps({"wte.weight": {"dtype": "F32", "shape": [V, D], "data_offsets": [0, a]},
                         "wpe.weight": {"dtype": "F32", "shape": [L, D], "data_offsets": [a, a + b]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.write(struct.pack(f"<{len(wte)}f", *wte) + struct.pack(f"<{len(wpe)}f", *wpe))


def trained_page(cli, out):
    """serve --weights: the trained choice, its shape, its notes, in both languages."""
    path = os.path.join(out, "trained-test.safetensors")
    write_checkpoint(path)
    server = ServeProcess(cli, args=("serve", "--port", "0", "--weights", path, "--preset", "gpt2"))
    try:
        url = server.start()
        driver = start_chromium()
        try:
            driver.get(url + "?lang=en")
            settle(driver, 0)
            label = driver.find_element(By.ID, "trained-label").text
            check(label == "trained (trained-test.safetensors)", f"--weights adds the choice {label!r}")
            before = renders(driver)
            choose_positions(driver, "trained")
            settle(driver, before)
            error = driver.find_element(By.ID, "error")
            check(not error.is_displayed(), f"the trained table draws without an error ({error.text!r})")
            shape = driver.find_element(By.ID, "shape").text
            check(shape.endswith(", 32)") and driver.find_element(By.ID, "context-value").text == "64",
                  f"its L and D are the file's, 64 and 32 ({shape})")
            check(driver.find_element(By.ID, "dim").get_attribute("disabled") is not None,
                  "the D slider rests while the trained table is shown")
            params = driver.find_element(By.ID, "params-position").text
            check(params == "2,048 parameters", f"the trained table counts L*D = 2,048 parameters ({params!r})")
            note = driver.find_element(By.ID, "offset-note").text
            check("trained table" in note, f"the offset note speaks of the trained table ({note!r})")
            driver.find_element(By.ID, "lang-zh").click()
            label = driver.find_element(By.ID, "trained-label").text
            check("训练" in label and "trained-test.safetensors" in label, f"its label in Chinese ({label!r})")
            left = english_left(driver)
            check(left == [], f"no English sentence left in the trained view in Chinese ({left})")
            screenshot(driver, out, "serve-trained-zh.png")
            driver.find_element(By.ID, "lang-en").click()
        finally:
            driver.quit()
    finally:
        server.stop()
        os.remove(path)


def write_run(path, L=16, D=8, steps=(0, 5, 10)):
    """A training run file (tokpos.run metadata; docs/lessons.md), f32, written with struct and json.

    Snapshot s blends fixed noise into a smooth table as s goes from the
    first step to the last. Returns {step: table as a list of rows}.
    """
    import math
    import struct

    def snapshot(s):
        a = s / steps[-1]
        return [[(1 - a) * 0.02 * noise(p * D + d + 1) + a * math.cos(p / (d + 2)) for d in range(D)]
                for p in range(L)]

    def noise(i):  # a hash of the cell in [-1, 1]: neighbouring rows unrelated
        h = (i * 2654435761) & 0xFFFFFFFF
        h ^= h >> 15
        h = (h * 2246822519) & 0xFFFFFFFF
        h ^= h >> 13
        return h / 4294967296.0 * 2 - 1

    tables = {s: snapshot(s) for s in steps}
    sinus = [[math.sin(p * 10000 ** (-(d // 2 * 2) / D)) if d % 2 == 0 else math.cos(p * 10000 ** (-(d // 2 * 2) / D))
              for d in range(D)] for p in range(L)]
    S = len(steps)
    tensors = {f"positions.step_{s}": ([L, D], [v for row in tables[s] for v in row]) for s in steps}
    tensors["positions.sinusoidal"] = ([L, D], [v for row in sinus for v in row])
    for i, name in enumerate(("loss.train.learned", "loss.heldout.learned", "loss.train.sinusoidal",
                              "loss.heldout.sinusoidal")):
        tensors[name] = ([S], [5.5 - 3 * k / max(1, S - 1) + 0.1 * i for k in range(S)])
    header, data, offset = {}, b"", 0
    for name in sorted(tensors):
        shape, values = tensors[name]
        blob = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        data += blob
        offset += len(blob)
    header["__metadata__"] = {
        "tokpos.run": "1",
        "steps": json.dumps(list(steps)),
        "config": json.dumps({"layers": 2, "heads": 4, "dim": D, "context": L, "steps": steps[-1]}),
        "beyond": json.dumps({"learned": {"policy": "error", "message": "past L", "loss": None},
                              "sinusoidal": {"loss": 2.5, "loss_within": 2.0}}),
    }
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return tables


def mean_adjacent_cosine(table):
    import math

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    return sum(cos(table[p], table[p + 1]) for p in range(len(table) - 1)) / (len(table) - 1)


def first_number_after(text, marker):
    import re

    m = re.search(re.escape(marker) + r"\D*?(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)", text)
    return float(m[1]) if m else None


def run_page(cli, out):
    """serve --weights RUN.safetensors: the run's slider moves the step, the table and the cosine."""
    path = os.path.join(out, "run-test.safetensors")
    tables = write_run(path)
    server = ServeProcess(cli, args=("serve", "--port", "0", "--weights", path))
    try:
        url = server.start()
        driver = start_chromium()
        try:
            driver.get(url + "?lang=en")
            settle(driver, 0)
            panel = driver.find_element(By.ID, "run-panel")
            check(panel.is_displayed(), "a training run shows the run's panel")
            step = driver.find_element(By.ID, "run-step-value")
            slider = driver.find_element(By.ID, "run-step")
            check(step.text == "10" and slider.get_attribute("max") == "2",
                  f"the slider starts at the last of the 3 steps, step 10 (shown: {step.text!r})")
            adjacent = driver.find_element(By.ID, "run-adjacent").text
            got = first_number_after(adjacent, "mean adjacent cosine")
            want = mean_adjacent_cosine(tables[10])
            check(got is not None and abs(got - want) < 6e-4,
                  f"step 10's mean adjacent cosine is the snapshot's, {want:.4f} ({adjacent!r})")
            image = driver.execute_script("return document.getElementById('run-table').toDataURL()")

            driver.execute_script("arguments[0].focus()", slider)
            before = renders(driver)
            slider.send_keys(Keys.ARROW_LEFT, Keys.ARROW_LEFT)
            settle(driver, before)
            WebDriverWait(driver, 10, poll_frequency=0.05).until(
                lambda d: d.find_element(By.ID, "run-adjacent").text.startswith("step 0:"),
                "the run's caption did not reach step 0")
            check(step.text == "0", f"two arrow keys move the slider to step 0 (shown: {step.text!r})")
            adjacent0 = driver.find_element(By.ID, "run-adjacent").text
            got0 = first_number_after(adjacent0, "mean adjacent cosine")
            want0 = mean_adjacent_cosine(tables[0])
            check(got0 is not None and abs(got0 - want0) < 6e-4 and adjacent0 != adjacent,
                  f"step 0's mean adjacent cosine is its snapshot's, {want0:.4f} ({adjacent0!r})")
            image0 = driver.execute_script("return document.getElementById('run-table').toDataURL()")
            check(image0 != image, "the table drawn changes with the step")
            loss = driver.find_element(By.ID, "run-loss").text
            check(loss.startswith("step 0:") and "5.5" in loss, f"the losses shown are step 0's ({loss!r})")

            before = renders(driver)
            choose_positions(driver, "trained")
            settle(driver, before)
            shown = first_number_after(driver.find_element(By.ID, "adjacent").text, "mean cos")
            check(shown is not None and abs(shown - want0) < 6e-4,
                  f"the trained view's cosine panel shows the slider's step too ({shown} against {want0:.4f})")
            error = driver.find_element(By.ID, "error")
            check(not error.is_displayed(), f"the run's views draw without an error ({error.text!r})")
            screenshot(driver, out, "serve-run.png")

            driver.find_element(By.ID, "lang-zh").click()
            time.sleep(0.2)
            text = driver.find_element(By.ID, "run-adjacent").text
            check(text.startswith("第 0 步"), f"the run's caption in Chinese ({text!r})")
            left = english_left(driver)
            check(left == [], f"no English sentence left in the run's view in Chinese ({left})")
            screenshot(driver, out, "serve-run-zh.png")
            driver.find_element(By.ID, "lang-en").click()
            severe = [e for e in console_entries(driver) if e.get("level") == "SEVERE"]
            check(severe == [], f"the console holds no errors with a run ({severe})")
        finally:
            driver.quit()
    finally:
        server.stop()
        os.remove(path)


def measure_updates(driver):
    """Changes one control at a time (D <= 512, T <= 256) and prints each update's time."""
    texts = {
        16: "tokens, position",
        64: "The quick brown fox jumps over the lazy dog; then it counts bytes.",
        256: ("Token ids become rows of a V x D table; positions add rows of an L x D table. " * 4)[:256],
    }
    steps = [
        ("text", "text", texts[16]),
        ("D", "dim", 64),
        ("text", "text", texts[64]),
        ("D", "dim", 128),
        ("base", "base", 3.5),
        ("layout", "layout", "halves"),
        ("L", "context", 256),
        ("text", "text", texts[256]),
        ("D", "dim", 256),
        ("D", "dim", 512),
        ("positions", "positions", "learned"),
        ("seed", "seed", 7),
        ("positions", "positions", "sinusoidal"),
        ("layout", "layout", "interleaved"),
        ("base", "base", 4),
        ("D", "dim", 384),
        ("D", "dim", 192),
        ("text", "text", texts[64]),
        ("L", "context", 128),
        ("D", "dim", 64),
    ]
    rows = []
    for what, element, value in steps:
        before = renders(driver)
        if element == "positions":
            choose_positions(driver, value)
        else:
            set_value(driver, element, value)
        ms = settle(driver, before)
        phases = driver.execute_script("return window.tokpos.lastPhasesMs")
        T, D = driver.execute_script(
            "return [document.querySelectorAll('#chips .chip').length, Number(document.getElementById('dim').value)]"
        )
        error = driver.find_element(By.ID, "error")
        if error.is_displayed():
            raise Failure(f"changing {what} to {value!r} shows an error: {error.text}")
        rows.append((what, value, T, D, ms, phases))
    print("update times (input event to the end of drawing), one control changed at a time:")
    for what, value, T, D, ms, phases in rows:
        shown = value if not isinstance(value, str) or len(value) <= 12 else f"{len(value)} bytes"
        print(
            f"  {what:<9} -> {str(shown):<12} T = {T:<3} D = {D:<3} {ms:7.1f} ms"
            f"  (answers {phases['wait']:6.1f} ms, drawing {phases['draw']:5.1f} ms)"
        )
    ms = [r[4] for r in rows]
    print(f"update times over {len(ms)} changes: median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms")
    return ms


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", default=os.environ.get("TOKPOS_CLI", os.path.join(ROOT, "build", "bin", "tokpos")))
    parser.add_argument("--out", default=os.path.join(ROOT, "build", "browser"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    # SIGTERM from make or CI unwinds like an exception, so the server stops too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    server = ServeProcess(os.path.abspath(args.cli))
    status = 1
    try:
        url = server.start()
        print(f"tokpos serve: {url}")
        run(url, args.out)
        trained_page(os.path.abspath(args.cli), args.out)
        run_page(os.path.abspath(args.cli), args.out)
        status = 0
    except Failure as e:
        print(f"FAIL: {e}")
    except Exception as e:  # a crash of the harness itself is a failure too
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"FAIL: {type(e).__name__}: {first}")
    finally:
        code = server.stop()
        if server.proc is not None:
            print(f"tokpos serve stopped (exit status {code})")
        if status != 0 and server.output:
            print("server output:\n" + server.log())
    print("browser test: " + ("passed" if status == 0 else "FAILED"))
    return status


if __name__ == "__main__":
    sys.exit(main())
