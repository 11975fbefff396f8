"""The author's page in a real browser: Playwright drives Debian's Chromium
(`executable_path`, no browser download) against `carte preview`.

A copy of the shipped catalog in a temp folder is previewed; the test reads
the menu and the examples, calls a tool through its form, reads a resource,
then saves edits (a mistake, a fix, an example that no longer holds) and
sees each reach the page without reloading it. Every input has a label.

Usage: preview.py -- path/to/carte
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_MS = 20_000


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    sys.exit("preview.py: no chromium on PATH (Debian: apt-get install chromium)")


def main() -> None:
    carte = sys.argv[sys.argv.index("--") + 1] if "--" in sys.argv else "target/release/carte"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copytree(ROOT / "catalogs" / "reservo", tmp / "catalogs" / "reservo")
        shutil.copytree(ROOT / "templates", tmp / "templates")
        catalog = tmp / "catalogs" / "reservo.yaml"
        shutil.copy(ROOT / "catalogs" / "reservo.yaml", catalog)
        original = catalog.read_text()
        env = dict(os.environ, RESERVO_DATABASE_URL=f"sqlite:{tmp / 'reservo.db'}")
        server = subprocess.Popen(
            [carte, "preview", str(catalog), "--http", "127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            env=env,
            text=True,
        )
        try:
            url = server.stdout.readline().strip()
            assert url.startswith("http://localhost:"), f"carte preview printed {url!r}"
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
                page = browser.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                drive(page, url, catalog, original)
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=10)
    print("preview: the page shows the menu, tries it, and follows every save")


def drive(page, url: str, catalog: Path, original: str) -> None:
    page.goto(url)
    status = page.locator("#status")
    expect(status).to_contain_text("valid")
    expect(page.locator("#problems")).to_contain_text("No problems")
    expect(page.locator("#examples")).to_contain_text("10 of 10 examples pass")
    for name in ("list_rooms", "get_quote", "book_room", "cancel_booking"):
        expect(page.locator("#tools summary", has_text=name)).to_be_visible()

    # Every form field has a label a screen reader reads.
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('input, select, textarea')].filter(e => e.labels.length === 0).length"
    )
    assert unlabelled == 0, f"{unlabelled} form fields without a label"

    # Try a tool through its form.
    page.locator("#tools summary", has_text="get_quote").click()
    page.get_by_label("room (required)").first.select_option(label="Focus")
    page.get_by_label("tier (required)").first.select_option(label="pro")
    page.get_by_label("hours (required)").first.fill("3")
    page.get_by_role("button", name="Call get_quote").click()
    expect(page.locator("details[data-key='tool:get_quote'] output")).to_contain_text("Focus (pro), 3 h: 11250 cents")

    # Read a resource.
    page.locator("#resources summary", has_text="reservo://rooms").first.click()
    page.get_by_role("button", name="Read reservo://rooms").click()
    expect(page.locator("details[data-key='resource:reservo://rooms'] output")).to_contain_text("Boardroom")

    # A mistake saved reaches the page, placed at its line, without a reload.
    generation = page.evaluate("document.body.dataset.generation")
    catalog.write_text(original.replace("{{ room }} ({{ tier }})", "{{ room } ({{ tier }})"))
    expect(status).to_contain_text("error")
    expect(page.locator("#problems")).to_contain_text("reservo.yaml:")
    assert page.evaluate("document.body.dataset.generation") != generation
    # What the author typed is still there.
    expect(page.get_by_label("hours (required)").first).to_have_value("3")

    # The fix brings the page back.
    catalog.write_text(original)
    expect(status).to_contain_text("valid")
    expect(page.locator("#problems")).to_contain_text("No problems")

    # An example that no longer holds shows as failing, with what came.
    catalog.write_text(original.replace('expect: { text: "Focus (pro), 3 h: 11250 cents" }', 'expect: { text: "Focus (pro), 3 h: 84 cents" }'))
    expect(page.locator("#examples")).to_contain_text("9 of 10 examples pass")
    expect(page.locator("#examples")).to_contain_text("FAIL tool `get_quote`: Focus, pro, three hours")
    expect(page.locator("#examples")).to_contain_text("got:      Focus (pro), 3 h: 11250 cents")


if __name__ == "__main__":
    main()
