"""mt-serve's page in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium): type a sentence, press Translate, read the translation, pick an attention head, and
save a screenshot.

    python3 scripts/serve_page.py --checkpoint runs/demo --text "I bought 23 red apples on March 5." \
        --attention --screenshot docs/images/serve_page.png
    python3 scripts/serve_page.py --checkpoint runs/demo --text "I bought 23 red apples on March 5." \
        --view encoder 2 3 --screenshot docs/images/serve_page_heads.png

The browser test imports `chromium`, `open_browser` and `try_page` from here.
"""

from __future__ import annotations

import argparse
import os
import shutil

from serve_process import ServerProcess


def chromium() -> tuple[str, str] | None:
    """(browser, driver) executables, or None where they are not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def open_browser(width: int = 1100, height: int = 900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium()
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium fetch a driver: ours is installed
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    return webdriver.Chrome(options=options, service=Service(executable_path=driver))


def try_page(
    driver, url: str, text: str, attention: bool = False, screenshot: str | None = None, view: tuple | None = None
) -> dict:
    """Use the page as a person would; returns what it shows: the translation, the status line,
    the alignment caption and the heatmap's rows (0 without attention). `view`: (kind, layer,
    head), as the page's menus name them (encoder, decoder or cross; layer from 1; a head from 1,
    or "mean"), chosen before the heatmap is read: its row and column labels and its weights."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(driver, 60)
    driver.get(url)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#target option"))  # the languages arrived
    box = driver.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text)
    if attention or view:
        driver.find_element(By.ID, "show-attention").click()
    driver.find_element(By.ID, "translate").click()
    wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "status"), "done"))
    if view:
        kind, layer, head = view
        for label, value in (("attention", kind), ("layer", str(int(layer) - 1)), ("head", head)):
            menu = driver.find_element(By.CSS_SELECTOR, f'#attention select[aria-label="{label}"]')
            Select(menu).select_by_value(value if value == "mean" or label != "head" else str(int(value) - 1))
    shown = {
        "translation": driver.find_element(By.ID, "translation").get_attribute("value"),
        "status": driver.find_element(By.ID, "status").text,
        "alignment": " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, ".alignment")),
        "heatmap_rows": len(driver.find_elements(By.CSS_SELECTOR, "table.heatmap tbody tr")),
    }
    if view:
        table = driver.find_element(By.CSS_SELECTOR, "table.heatmap")

        def labels(where: str) -> list[str]:
            return [th.get_attribute("textContent") for th in table.find_elements(By.CSS_SELECTOR, where)]

        shown["rows"], shown["columns"] = labels("tbody th"), labels("thead th")[1:]
        shown["weights"] = [
            [float(td.get_attribute("title")) for td in row.find_elements(By.TAG_NAME, "td")]
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
        ]
    if screenshot:
        os.makedirs(os.path.dirname(os.path.abspath(screenshot)), exist_ok=True)
        driver.save_screenshot(screenshot)
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--text", required=True)
    parser.add_argument("--attention", action="store_true", help="tick 'show alignment and attention'")
    parser.add_argument(
        "--view",
        nargs=3,
        metavar=("KIND", "LAYER", "HEAD"),
        help="draw encoder, decoder or cross attention of LAYER (from 1), HEAD (from 1, or mean)",
    )
    parser.add_argument("--screenshot", required=True, help="the PNG to write")
    args = parser.parse_args()
    if chromium() is None:
        raise SystemExit("chromium and chromedriver are needed: apt-get install chromium chromium-driver")
    with ServerProcess(["--checkpoint", args.checkpoint]) as server:
        driver = open_browser()
        try:
            shown = try_page(driver, server.url + "/", args.text, args.attention, args.screenshot, args.view)
            print({key: value for key, value in shown.items() if key != "weights"})
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
