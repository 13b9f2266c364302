"""The dashboard in a real browser: `streamlit run` on a free port, driven in headless Chromium.

Runs the default scenario (200 requests, preset by the ``?set=`` link), then visits every
page (a request-rate sweep on the throughput page), waits until its Plotly charts are
drawn, checks that no page shows an exception or error, and saves screenshots to ``$KVSIM_ARTIFACTS`` (default
``tests/artifacts``). Needs Debian's ``chromium`` and ``chromium-driver`` (see
``.ci/install-browser.sh``) and selenium (the ``dev`` extra); skipped otherwise.
"""

from __future__ import annotations

import os
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

pytestmark = pytest.mark.browser

if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
    pytest.skip(
        f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): .ci/install-browser.sh",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')")
from selenium.webdriver.common.by import By  # noqa: E402
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
def server() -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
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


def _wait_charts(driver: webdriver.Chrome, count: int, timeout_s: float = 90) -> None:
    """Until ``count`` Plotly charts have drawn their SVG, and the script has stopped running."""
    WebDriverWait(driver, timeout_s).until(
        lambda d: (
            sum(
                1
                for p in d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")
                if p.find_elements(By.CSS_SELECTOR, ".trace")
            )
            >= count
        )
    )
    WebDriverWait(driver, timeout_s).until(
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
    link = WebDriverWait(driver, 30).until(
        ec.element_to_be_clickable((By.CSS_SELECTOR, f"[data-testid='stSidebarNav'] a[href$='/{name}']"))
    )
    link.click()


def test_default_scenario_runs_and_draws_charts(server: str, browser: webdriver.Chrome) -> None:
    try:
        _walk_pages(server, browser, _artifacts())
    except Exception:
        browser.save_screenshot(str(_artifacts() / "failure.png"))
        raise


def _walk_pages(server: str, browser: webdriver.Chrome, out: Path) -> None:
    browser.get(f"{server}/?set=workload.num_requests=200")
    run = WebDriverWait(browser, 60).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Run']]"))
    )
    _assert_no_error(browser, "Scenario (before run)")
    run.click()
    WebDriverWait(browser, 120).until(
        lambda d: any(
            "p99 TTFT" in m.text for m in d.find_elements(By.CSS_SELECTOR, "[data-testid='stMetric']")
        )
    )
    _assert_no_error(browser, "Scenario")
    browser.save_screenshot(str(out / "dashboard_scenario.png"))

    _open_page(browser, "Latency_spikes")
    _wait_charts(browser, 1)
    _assert_no_error(browser, "Latency spikes")
    wanted = {"TTFT (s)", "ITL (ms)", "events (count)", "waiting (requests)"}
    WebDriverWait(browser, 30).until(lambda d: wanted <= _axis_titles(d))
    browser.save_screenshot(str(out / "dashboard_latency_spikes.png"))

    _open_page(browser, "KV_cache")
    _wait_charts(browser, 3)
    _assert_no_error(browser, "KV cache")
    browser.save_screenshot(str(out / "dashboard_kv_cache.png"))

    _open_page(browser, "Throughput_vs_capacity")
    sweep = WebDriverWait(browser, 60).until(
        ec.element_to_be_clickable((By.XPATH, "//button[.//p[normalize-space()='Run sweep']]"))
    )
    sweep.click()
    _wait_charts(browser, 1, timeout_s=180)
    _assert_no_error(browser, "Throughput vs capacity")
    browser.save_screenshot(str(out / "dashboard_throughput.png"))

    _open_page(browser, "Compare")  # the sweep's runs are there to compare
    _wait_charts(browser, 1)
    _assert_no_error(browser, "Compare")
    browser.save_screenshot(str(out / "dashboard_compare.png"))

    _open_page(browser, "Calibration")
    _wait_charts(browser, 1)
    _assert_no_error(browser, "Calibration")
    browser.save_screenshot(str(out / "dashboard_calibration.png"))
