"""The README's pictures of ``agenttrace view``: ``docs/images/viewer.png`` (the episodes page
of a demo run) and ``docs/images/viewer-episode.png`` (one of its episodes), 1280x800.

Made the way tests/test_view_browser.py drives the page: a real ``agenttrace demo`` run, the
real viewer server on it, Debian's headless chromium (``/usr/bin/chromium``) driven by
Playwright, requests beyond 127.0.0.1 refused.

    python3 scripts/viewer_screenshots.py [--out docs/images] [--seed 6]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from browser import VIEWPORT, block_other_hosts, launch, missing  # noqa: E402

from agenttrace.reading import load_trajectories  # noqa: E402
from agenttrace.view.server import ViewServer  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images")
    parser.add_argument("--seed", default="6", help="the demo's seed (6: some errored episodes)")
    args = parser.parse_args()
    why = missing()
    if why:
        print(f"viewer_screenshots: {why}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # the page shows the source as given: agenttrace_runs
        environ = {
            k: v for k, v in os.environ.items() if not k.startswith(("AGENTTRACE_", "OTEL_"))
        }
        subprocess.run(
            [sys.executable, "-m", "agenttrace", "demo", "--out", "agenttrace_runs",
             "--seed", args.seed],
            env=environ, check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        (trajectories,) = Path("agenttrace_runs").glob("*/trajectories.jsonl")
        truth = load_trajectories(trajectories)
        # A completed episode of several steps: a chart with something in it.
        shown = max(
            (t for t in truth if t.status == "completed"),
            key=lambda t: (min(len(t.steps), 7), t.return_),
        )
        server = ViewServer(["agenttrace_runs"], port=0).start()
        try:
            server.index.wait_idle(60)
            with launch() as browser:
                context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
                block_other_hosts(context)
                page = context.new_page()
                page.goto(server.url)
                page.wait_for_selector('[data-testid=episodes-table][data-state="ready"]')
                page.wait_for_selector("[data-testid=return-histogram] canvas")
                page.mouse.move(0, 0)
                page.screenshot(path=str(args.out / "viewer.png"))
                page.click(f'[data-testid=episode-row][data-episode-id="{shown.episode_id}"]')
                page.wait_for_selector('[data-testid=page-episode][data-state="ready"]')
                page.wait_for_selector("[data-testid=step-chart] canvas")
                page.screenshot(path=str(args.out / "viewer-episode.png"))
                context.close()
        finally:
            server.stop()
    for name in ("viewer.png", "viewer-episode.png"):
        print(args.out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
