"""Browser check of the Dagster UI: start it on localhost, wait for the code
location to load (GraphQL), and take headless Chromium screenshots of the asset
graph and of the evaluation asset's page. With ``--report FILE``, a full-length
screenshot of the HTML report (``difftune report``) instead. Prints the paths of
the PNG files.

    .venv/bin/python bench/ui_screenshots.py [--out bench/out/screenshots] [--port 3123]
    .venv/bin/python bench/ui_screenshots.py --report warehouse/report.html

Uses the project's instance (``DAGSTER_HOME``, default ``.dagster_home``) and
warehouse, so after ``make run`` the evaluation page shows its metadata.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from difftune_pipeline import ui

REPORT_HEIGHT = 12000  # tall enough for one µarch's report, figures included
PAGES = {
    "asset_graph": "/asset-groups",
    "difftune_group": "/locations/difftune_pipeline/asset-groups/difftune",
    "evaluation_asset": "/assets/evaluation",
    "automation": "/automation",
}


def screenshot(browser: str, url: str, path: Path, wait_ms: int, height: int = 1000) -> None:
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size=1600,{height}",
            f"--virtual-time-budget={wait_ms}",
            f"--screenshot={path}",
            url,
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    if not path.exists() or path.stat().st_size < 10_000:
        raise RuntimeError(f"no usable screenshot of {url} at {path}")


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "screenshots")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--wait-ms", type=int, default=20000, help="time the page gets to render")
    parser.add_argument("--report", type=Path, help="screenshot this HTML report instead of the UI")
    parser.add_argument("--height", type=int, default=REPORT_HEIGHT, help="window height for --report (pixels)")
    args = parser.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("chromium is not installed (Debian: apt-get install chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report is not None:
        path = args.out / "report.png"
        screenshot(browser, args.report.resolve().as_uri(), path, args.wait_ms, args.height)
        print(f"report: {path.resolve()}")
        return [path]
    port = args.port or ui.free_port()
    url = f"http://127.0.0.1:{port}"
    with open(args.out / "ui.log", "w") as log:
        process = ui.start(port=port, log=log)
        try:
            status = ui.wait_until_loaded(url, 300, process)
            print(f"code locations loaded: {status}")
            paths = []
            for name, page in PAGES.items():
                path = args.out / f"{name}.png"
                screenshot(browser, url + page, path, args.wait_ms)
                print(f"{name}: {path.resolve()}")
                paths.append(path)
            return paths
        finally:
            ui.stop(process)


if __name__ == "__main__":
    main()
