"""The dashboard in a real browser: `streamlit run` on a free port, driven in headless Chromium.

1. Runs the default scenario (200 requests, preset by the ``?set=`` link), then visits every
   page (a request-rate sweep on the throughput page), waits until its Plotly charts are
   drawn, checks that no page shows an exception or error and that no text of a chart
   (axis and tick labels, titles, annotations, legend) overlaps another, at two window
   sizes, and saves screenshots to ``$KVSIM_ARTIFACTS`` (default ``tests/artifacts``).
2. Types settings on three pages, navigates away and back, and finds them kept.
3. Answers the capacity question of issue 13 on the Capacity page (the Azure conversation
   trace, how many H100s at p99 TTFT < 2 s, at the trace's rate and at 8x), opened from the
   link docs/dashboard.md gives, and gets the answer line ``kvsim capacity`` prints for the
   same question, as docs/questions.md quotes it (tests/test_questions.py runs those two
   commands and checks the quoted output).
4. What a person meets (issue 19): a link with a knob value no widget takes shows the
   scenario's error, not a crash; running from another page leaves only the results; a
   sweep folder from a link is drawn on the page; the Capacity page says which overrides
   it applies and the share served in percent; the summary names the model and the GPU,
   says which throughput is which and why achieved can exceed offered; count axes tick at
   whole numbers and no chart label sits on a line (both checked on every page).

Needs Debian's ``chromium`` and ``chromium-driver`` (see ``.ci/install-browser.sh``) and
selenium (the ``dev`` extra); skipped otherwise.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,2000",
)
#: The two window sizes the charts are checked at (width, height).
WINDOW_SIZES = ((1400, 2000), (1024, 1300))
#: The capacity question, as the CLI asks it (the dashboard gets the same through its inputs).
AZURE = REPO_ROOT / "scenarios" / "azure_conversation.yaml"
CAPACITY_ARGS = ["--knob", "replicas.0.count", "--range", "1:4", "--slo", "ttft_p99_s=2", "--set",
                 "router.kind=least_loaded"]  # fmt: skip

pytestmark = pytest.mark.browser

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip(
        f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): .ci/install-browser.sh",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _artifacts() -> Path:
    out = Path(os.environ.get("KVSIM_ARTIFACTS", REPO_ROOT / "tests" / "artifacts"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the server allows (``KVSIM_DASHBOARD_ALLOW``), holding a small sweep, ``sweep/``."""
    from kvsim.planning.sweep import run_sweep, summary_only

    folder = tmp_path_factory.mktemp("allowed")
    spec = folder / "sweep.yaml"
    spec.write_text(
        f"name: rates\nbase: {REPO_ROOT / 'scenarios' / 'default.yaml'}\n"
        "overrides: {workload.num_requests: 80}\ngrid: {workload.arrival.rate_per_s: [2, 4]}\n"
    )
    run_sweep(spec, folder / "sweep", jobs=1, runner=summary_only)  # the table only: no result folders
    return folder


@pytest.fixture(scope="module")
def server(allowed: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
           "KVSIM_DASHBOARD_ALLOW": str(allowed)}  # fmt: skip
    log = (_artifacts() / "streamlit.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "streamlit", "run", "dashboard/app.py",
            "--server.port", str(port), "--server.headless", "true", "--server.address", "127.0.0.1",
            "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
        ],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start; see {log.name}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(options=opts, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: webdriver.Chrome, timeout_s: float) -> WebDriverWait:
    # Streamlit redraws elements as the script reruns: a found element can go stale.
    return WebDriverWait(driver, timeout_s, ignored_exceptions=(StaleElementReferenceException,))


def _wait_charts(driver: webdriver.Chrome, count: int, timeout_s: float = 90) -> None:
    """Until ``count`` Plotly charts have drawn their traces, and the script has stopped running."""
    script = (
        "return [...document.querySelectorAll('.js-plotly-plot')]"
        ".filter(p => p.querySelector('.trace') || p.querySelector('.gl-container canvas')).length;"
    )
    _wait(driver, timeout_s).until(lambda d: d.execute_script(script) >= count)
    _wait(driver, timeout_s).until(
        lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-testid='stStatusWidget']")
    )


def _axis_titles(driver: webdriver.Chrome) -> set[str]:
    """Texts of the axis titles drawn by Plotly (SVG ``text`` elements of class xtitle, y2title, ...)."""
    script = (
        "return [...document.querySelectorAll('.js-plotly-plot text')]"
        ".filter(t => /^[xy][0-9]*title$/.test(t.getAttribute('class'))).map(t => t.textContent);"
    )
    return set(driver.execute_script(script))


def _assert_no_error(driver: webdriver.Chrome, page: str) -> None:
    errors = driver.find_elements(
        By.CSS_SELECTOR, "[data-testid='stException'], [data-testid='stAlertContentError']"
    )
    assert not errors, f"{page}: {errors[0].text}"


def _open_page(driver: webdriver.Chrome, name: str) -> None:
    """Follow the sidebar link (a new URL would start a new session, without the run)."""
    title = name.replace("_", " ")  # the page's title in the sidebar (the Scenario page's URL is /)
    link = _wait(driver, 30).until(
        ec.element_to_be_clickable(
            (By.XPATH, f"//*[@data-testid='stSidebarNav']//a[.//span[normalize-space()='{title}']]")
        )
    )
    link.click()


def _overlaps(driver: webdriver.Chrome) -> list[str]:
    """Pairs of chart texts whose boxes overlap on screen (axis/tick labels, titles, annotations, legend)."""
    script = """
    const out = [];
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
      const texts = [...plot.querySelectorAll(
        'text.gtitle, text[class$="title"], .xtick text, .ytick text, [class*="tick"] > text, ' +
        'text.annotation-text, text.legendtext')]
        .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0
                && getComputedStyle(t).opacity !== '0' && getComputedStyle(t).display !== 'none');
      const boxes = [...new Set(texts)].map(t => [t.textContent.trim(), t.getBoundingClientRect()]);
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const [a, r] = boxes[i], [b, s] = boxes[j];
        const w = Math.min(r.right, s.right) - Math.max(r.left, s.left);
        const h = Math.min(r.bottom, s.bottom) - Math.max(r.top, s.top);
        if (w > 1 && h > 1) out.push(a + ' | ' + b);
      }
    }
    return out;"""
    return list(driver.execute_script(script))


def _labels_on_lines(driver: webdriver.Chrome) -> list[str]:
    """Chart annotations (labels inside a plot) that a drawn line passes through, sampled along each line."""
    script = """
    const out = [];
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
      const labels = [...plot.querySelectorAll('text.annotation-text')]
        .filter(t => t.textContent.trim() && t.getBoundingClientRect().width > 0)
        .map(t => [t.textContent.trim(), t.getBoundingClientRect()]);
      if (!labels.length) continue;
      const points = [];
      for (const line of plot.querySelectorAll('path.js-line')) {
        const length = line.getTotalLength(), m = line.getScreenCTM();
        if (!length || !m) continue;
        for (let i = 0; i <= 400; i++) {
          const p = line.getPointAtLength(length * i / 400);
          points.push([m.a * p.x + m.c * p.y + m.e, m.b * p.x + m.d * p.y + m.f]);
        }
      }
      for (const [text, r] of labels)
        if (points.some(([x, y]) => x > r.left && x < r.right && y > r.top && y < r.bottom)) out.push(text);
    }
    return out;"""
    return list(driver.execute_script(script))


#: Axis titles of whole-number quantities (requests, KV blocks, replicas): never a tick at 0.5.
COUNT_AXES = ("requests", "running (requests)", "waiting (requests)", "KV blocks (count)",
              "Number of replicas in this group")  # fmt: skip


def _count_ticks(driver: webdriver.Chrome) -> dict[str, list[str]]:
    """Tick labels of the axes titled as in `COUNT_AXES`, by title."""
    script = """
    const out = {};
    for (const plot of document.querySelectorAll('.js-plotly-plot')) {
      const layout = plot._fullLayout || {};
      for (const [name, axis] of Object.entries(layout)) {
        if (!/^[xy]axis[0-9]*$/.test(name) || !axis.title || !arguments[0].includes(axis.title.text)) continue;
        const ticks = [...plot.querySelectorAll('g.' + axis._id + 'tick text')].map(t => t.textContent);
        out[axis.title.text] = (out[axis.title.text] || []).concat(ticks);
      }
    }
    return out;"""
    return dict(driver.execute_script(script, list(COUNT_AXES)))


def _check_page(driver: webdriver.Chrome, name: str, charts: int, out: Path) -> None:
    """Charts drawn, no error, no overlapping label, at both window sizes; a screenshot of each.

    Also: no label inside a chart has a line running through it, and the axes of counts
    (`COUNT_AXES`) are ticked at whole numbers only.
    """
    for width, height in WINDOW_SIZES:
        driver.set_window_size(width, height)
        _wait_charts(driver, charts)
        time.sleep(1.0)  # Plotly redraws on resize
        _assert_no_error(driver, name)
        overlaps = _overlaps(driver)
        assert not overlaps, f"{name} at {width}x{height}: overlapping labels: {overlaps[:5]}"
        on_lines = _labels_on_lines(driver)
        assert not on_lines, f"{name} at {width}x{height}: a line runs through the labels {on_lines}"
        for title, ticks in _count_ticks(driver).items():
            halves = [t for t in ticks if not re.fullmatch(r"[0-9][0-9,]*k?", t.strip())]
            assert not halves, f"{name} at {width}x{height}: axis {title!r} ticked at {halves}"
        driver.save_screenshot(str(out / f"dashboard_{name}_{width}.png"))
    driver.set_window_size(*WINDOW_SIZES[0])


def _set_text(driver: webdriver.Chrome, label: str, text: str, *, area: bool = False) -> None:
    """Type into the text input (or area) labelled ``label`` and commit it as a user would."""
    tag = "textarea" if area else "input"
    box = _wait(driver, 30).until(
        ec.element_to_be_clickable((By.CSS_SELECTOR, f"{tag}[aria-label='{label}']"))
    )
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(text)
    box.send_keys(Keys.CONTROL, Keys.ENTER) if area else box.send_keys(Keys.ENTER)
    time.sleep(1.0)
    _wait(driver, 60).until(lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-testid='stStatusWidget']"))


def _input_value(driver: webdriver.Chrome, label: str, tag: str = "input") -> str:
    box = _wait(driver, 30).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, f"{tag}[aria-label='{label}']"))
    )
    return box.get_attribute("value")


def test_default_scenario_runs_and_draws_charts(server: str, browser: webdriver.Chrome) -> None:
    try:
        _walk_pages(server, browser, _artifacts())
    except Exception:
        browser.save_screenshot(str(_artifacts() / "failure.png"))
        raise


def _walk_pages(server: str, browser: webdriver.Chrome, out: Path) -> None:
    browser.get(f"{server}/?set=workload.num_requests=200")
    run = _wait(browser, 60).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Run']]"))
    )
    # Above the fold: the Run button is within the first screen.
    assert run.location["y"] + run.size["height"] < browser.get_window_size()["height"] * 0.6
    _assert_no_error(browser, "Scenario (before run)")
    run.click()
    _wait(browser, 120).until(
        lambda d: any(
            "p99 TTFT" in m.text for m in d.find_elements(By.CSS_SELECTOR, "[data-testid='stMetric']")
        )
    )
    _assert_no_error(browser, "Scenario")
    browser.save_screenshot(str(out / "dashboard_scenario.png"))

    _open_page(browser, "Latency_spikes")
    _wait_charts(browser, 1)
    wanted = {"TTFT (s)", "ITL (ms)", "events", "requests", "simulated time (s)"}
    _wait(browser, 30).until(lambda d: wanted <= _axis_titles(d))
    _check_page(browser, "latency_spikes", 1, out)

    _open_page(browser, "KV_cache")
    _check_page(browser, "kv_cache", 3, out)

    _open_page(browser, "Throughput_vs_capacity")
    sweep = _wait(browser, 60).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Run sweep']]"))
    )
    sweep.click()
    _wait_charts(browser, 1, timeout_s=180)
    _check_page(browser, "throughput", 1, out)

    _open_page(browser, "Requests")
    _check_page(browser, "requests", 3, out)

    _open_page(browser, "Compare")  # the sweep's runs are there to compare, once a baseline is chosen
    _wait(browser, 60).until(lambda d: "Choose the baseline" in d.page_source)
    _assert_no_error(browser, "Compare")
    box = _wait(browser, 30).until(
        ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid='stSelectbox'] input"))
    )
    box.click()
    box.send_keys(Keys.ENTER)  # the first run
    _check_page(browser, "compare", 1, out)

    _open_page(browser, "Calibration")
    _check_page(browser, "calibration", 1, out)


def test_settings_survive_navigation(server: str, browser: webdriver.Chrome) -> None:
    browser.get(f"{server}/?source=catalogue&file=chunked_prefill.yaml")
    _wait(browser, 60).until(lambda d: "Scenario: chunked-prefill" in d.page_source)
    _set_text(browser, "Number of prompts sent", "150")
    _open_page(browser, "Throughput_vs_capacity")
    _set_text(browser, "Values of Mean arrival rate, requests per second (comma-separated)", "3, 6")
    _open_page(browser, "Capacity")
    _set_text(browser, "SLO", "ttft_p99_s=1.5")
    _open_page(browser, "KV_cache")
    _open_page(browser, "Scenario")
    _wait(browser, 60).until(lambda d: "Scenario: chunked-prefill" in d.page_source)
    assert _input_value(browser, "Number of prompts sent") == "150"
    _open_page(browser, "Throughput_vs_capacity")
    label = "Values of Mean arrival rate, requests per second (comma-separated)"
    assert _input_value(browser, label) == "3, 6"
    _open_page(browser, "Capacity")
    assert _input_value(browser, "SLO") == "ttft_p99_s=1.5"
    # The address bar carries it all: a new tab on that link shows the same inputs.
    _wait(browser, 60).until(lambda d: "cap.slo=ttft_p99_s%3D1.5" in d.current_url)  # set as the page ends
    url = browser.current_url
    browser.get(url.replace("/Capacity", "/Throughput_vs_capacity"))
    assert _input_value(browser, label) == "3, 6"


def _success(driver: webdriver.Chrome, start: str):
    alerts = driver.find_elements(By.CSS_SELECTOR, "[data-testid='stAlertContentSuccess']")
    return next((a for a in alerts if a.text.strip().startswith(start)), None)


def _cli_answers() -> dict[str, str]:
    """The answer lines `kvsim capacity` prints for the question, as docs/questions.md quotes them
    (tests/test_questions.py runs those commands and checks the page against their output)."""
    text = (REPO_ROOT / "docs" / "questions.md").read_text()
    blocks = re.findall(r"```text\n\$ (kvsim capacity [^\n]+)\n(.*?)```", text, re.S)
    out = {}
    for command, body in blocks:
        args = shlex.split(command)
        for part in CAPACITY_ARGS:  # the question the page is asked below, with 2 runs at once
            assert part in args, command
        assert args[2] == str(AZURE.relative_to(REPO_ROOT)) and args[args.index("--jobs") + 1] == "2"
        line = next(x for x in body.splitlines() if x.startswith("Smallest"))
        out["8x" if "time_scale" in command else "real"] = line
    return out


def test_capacity_page_answers_the_h100_question_as_the_cli(
    server: str, browser: webdriver.Chrome, traces_dir: Path
) -> None:
    try:
        _capacity_question(server, browser, _cli_answers())
    except Exception:
        browser.save_screenshot(str(_artifacts() / "failure_capacity.png"))
        raise


def _docs_capacity_link() -> str:
    """The Capacity link docs/dashboard.md gives as its example, without its host."""
    text = (REPO_ROOT / "docs" / "dashboard.md").read_text()
    link = re.search(r"`http://localhost:8501(/Capacity\?[^`]+)`", text)
    assert link, "docs/dashboard.md gives no Capacity link"
    return link.group(1)


def _capacity_question(server: str, browser: webdriver.Chrome, cli: dict[str, str]) -> None:
    assert cli["real"].endswith(": 1 (3 runs)") and cli["8x"].endswith(": 3 (2 runs)")
    # The question through the link docs/dashboard.md gives (the page's inputs preset, the
    # least-loaded router the question is about included), then at 8x through the page's own input.
    browser.get(f"{server}{_docs_capacity_link()}")
    label = "Overrides for every point, one dotted.key=value per line (as --set)"
    assert _input_value(browser, label, "textarea") == "router.kind=least_loaded"
    answers = {}
    for rate, overrides in (("real", None), ("8x", "router.kind=least_loaded\nworkload.time_scale=8")):
        if overrides is not None:
            _set_text(browser, label, overrides, area=True)
        button = _wait(browser, 60).until(
            ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Find capacity']]"))
        )
        button.click()
        alert = _wait(browser, 400).until(lambda d: _success(d, "Smallest replicas.0.count"))
        answers[rate] = alert.text.strip()
        _assert_no_error(browser, f"Capacity ({rate})")
        _wait_charts(browser, 1)
        browser.save_screenshot(str(_artifacts() / f"dashboard_capacity_{rate}.png"))
    assert answers == cli


# --- issue 19: what a person meets ----------------------------------------------------------


def _errors(driver: webdriver.Chrome) -> list[str]:
    """Texts of the error alerts and exception boxes on the page."""
    found = driver.find_elements(
        By.CSS_SELECTOR, "[data-testid='stException'], [data-testid='stAlertContentError']"
    )
    return [e.text for e in found]


def _shown(driver: webdriver.Chrome, element: WebElement) -> bool:
    """Whether an element is drawn where a person sees it: displayed (WebDriver's rule, which
    counts a closed expander and an ancestor clipped to nothing) and, with its centre, the
    topmost element there or inside it."""
    if not element.is_displayed():
        return False
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    script = """const r = arguments[0].getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0) return false;
    const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return top !== null && (arguments[0] === top || arguments[0].contains(top));"""
    return bool(driver.execute_script(script, element))


def _table_cells(driver: webdriver.Chrome, index: int = 0) -> list[list[str]]:
    """Rows of the ``index``-th table (st.dataframe), header first, as drawn.

    The grid draws on a canvas and keeps an accessible copy of the cells in view only;
    the table is scrolled through, both ways, to read them all.
    """
    grid = driver.find_elements(By.CSS_SELECTOR, "[data-testid='stDataFrame']")[index]
    scroller = grid.find_element(By.CSS_SELECTOR, ".dvn-scroller")
    size = "const s = arguments[0]; return [s.scrollWidth, s.scrollHeight, s.clientWidth, s.clientHeight];"
    width, height, view_w, view_h = driver.execute_script(size, scroller)
    collect = """return [...arguments[0].querySelectorAll('tr')].flatMap(tr => [...tr.children].map(
        c => [+tr.getAttribute('aria-rowindex'), +c.getAttribute('aria-colindex'), c.textContent.trim()]));"""
    cells: dict[tuple[int, int], str] = {}
    for top in range(0, max(height - view_h, 0) + view_h, max(view_h // 2, 1)):
        for left in range(0, max(width - view_w, 0) + view_w, max(view_w // 2, 1)):
            driver.execute_script("arguments[0].scrollTo(arguments[1], arguments[2]);", scroller, left, top)
            time.sleep(0.15)  # the grid redraws on the next frame
            for row, col, text in driver.execute_script(collect, grid):
                cells[(row, col)] = text
    driver.execute_script("arguments[0].scrollTo(0, 0);", scroller)
    num_rows = max((r for r, _ in cells), default=0)
    num_cols = max((c for _, c in cells), default=0)
    return [[cells.get((r, c), "") for c in range(1, num_cols + 1)] for r in range(1, num_rows + 1)]


@pytest.mark.parametrize(
    ("setting", "field", "rule"),
    [
        ("replicas.0.tp=0", "replicas.0.tp", "greater than or equal to 1"),
        ("workload.num_requests=-5", "num_requests", "greater than or equal to 1"),
        ("seed=abc", "seed", "valid integer"),
        ("replicas.0.engine.block_size=1e300", "block_size", "valid integer"),
        ("router.kind=no_such_router", "router.kind", "unknown router"),
        ("replicas.0.engine.enable_prefix_caching=maybe", "enable_prefix_caching", "boolean: true or false"),
    ],
)
def test_a_link_with_a_knob_value_no_widget_takes_shows_the_error(
    server: str, browser: webdriver.Chrome, setting: str, field: str, rule: str
) -> None:
    browser.get(f"{server}/?set={setting}")
    _wait(browser, 60).until(lambda d: _errors(d))
    errors = _errors(browser)
    assert len(errors) == 1 and "invalid scenario" in errors[0], errors  # the page's error, no crash
    assert field in errors[0] and rule in errors[0], errors[0]
    assert f"Set by the link: {setting}" in browser.find_element(By.TAG_NAME, "body").text
    assert not browser.find_elements(By.XPATH, "//button[.//p[normalize-space()='Run']]")


def test_running_from_another_page_leaves_only_the_results(server: str, browser: webdriver.Chrome) -> None:
    browser.get(f"{server}/Latency_spikes?set=workload.num_requests=150")  # a new session: no run yet
    run = _wait(browser, 60).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Run default']]"))
    )
    assert "has not been run yet" in browser.page_source
    run.click()
    _wait_charts(browser, 1, timeout_s=120)
    _assert_no_error(browser, "Latency spikes after Run")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "has not been run yet" not in body
    assert not browser.find_elements(By.XPATH, "//button[.//p[normalize-space()='Run default']]")


def test_a_sweep_folder_opened_from_a_link_is_drawn_on_the_page(
    server: str, browser: webdriver.Chrome, allowed: Path
) -> None:
    browser.get(
        f"{server}/Throughput_vs_capacity?set=workload.num_requests=80&sweep.folder={allowed / 'sweep'}"
    )
    _wait_charts(browser, 1)
    _assert_no_error(browser, "Throughput (sweep folder)")
    chart = browser.find_element(By.CSS_SELECTOR, ".js-plotly-plot")
    assert _shown(browser, chart), "the sweep's chart is hidden (in a collapsed expander?)"
    assert _shown(browser, browser.find_element(By.CSS_SELECTOR, "[data-testid='stDataFrame']"))
    assert _input_value(browser, "Sweep folder") == str(allowed / "sweep")
    browser.save_screenshot(str(_artifacts() / "dashboard_sweep_folder.png"))


def test_capacity_page_says_what_it_applies_and_the_share_served_in_percent(
    server: str, browser: webdriver.Chrome
) -> None:
    browser.get(
        f"{server}/Capacity?set=workload.num_requests=60&cap.knob=replicas&cap.values.replicas=1:2&cap.jobs=1"
    )
    label = "Overrides for every point, one dotted.key=value per line (as --set)"
    box = _wait(browser, 30).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, f"textarea[aria-label='{label}']"))
    )
    assert box.get_attribute("value") == ""
    assert "=" not in (box.get_attribute("placeholder") or ""), "the placeholder looks like applied overrides"
    assert "No overrides" in browser.find_element(By.TAG_NAME, "body").text
    _wait(browser, 60).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Find capacity']]"))
    ).click()
    _wait(browser, 120).until(lambda d: _success(d, "Smallest replicas.0.count"))
    _check_page(browser, "capacity_small", 1, _artifacts())  # the replicas axis: 1 and 2, never 1.5
    header, *rows = _table_cells(browser)
    assert "served (%)" in header and "served" not in header, header
    assert {row[header.index("served (%)")] for row in rows} == {"100"}


def test_the_summary_names_model_and_gpu_and_says_which_throughput_is_which(
    server: str, browser: webdriver.Chrome
) -> None:
    # Seed 2 with 200 requests: 9.1 req/s achieved against 8.35 offered.
    browser.get(f"{server}/?set=workload.num_requests=200&set=seed=2")
    _wait(browser, 60).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Run']]"))
    ).click()
    _wait(browser, 120).until(
        lambda d: any(
            "p99 TTFT" in m.text for m in d.find_elements(By.CSS_SELECTOR, "[data-testid='stMetric']")
        )
    )
    heading = browser.find_element(By.XPATH, "//h3[contains(., 'Scenario: default')]")
    below = heading.find_element(By.XPATH, "following::div[@data-testid='stMarkdownContainer'][1]").text
    assert "llama-3-8b" in below and "1 × h100-sxm" in below, below
    body = browser.find_element(By.TAG_NAME, "body").text
    assert "is above offered" in body and "second half of the arrival window" in body
    # The full summary says which throughput is which.
    browser.find_element(By.XPATH, "//summary[.//p[normalize-space()='Full summary']]").click()
    _wait(browser, 30).until(lambda d: len(_table_cells(d)) > 10)
    header, *rows = _table_cells(browser)
    meaning = {row[header.index("metric")]: row[header.index("meaning")] for row in rows}
    assert meaning["throughput_tokens_per_s"] == "output tokens per simulated second"
    assert meaning["throughput_requests_per_s"] == "finished requests per simulated second"
    assert meaning["achieved_requests_per_s"].startswith(
        "requests finished per second during the second half"
    )
    browser.save_screenshot(str(_artifacts() / "dashboard_summary.png"))
