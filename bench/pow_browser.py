"""How long the waiting room's proof of work takes a browser, per difficulty.

    .venv/bin/python bench/pow_browser.py [--runs 5] [--difficulties 10000,25000,...]

Chromium (Debian's /usr/bin/chromium, driven by Playwright) solves challenges made
as queue_app/proof.py makes them (ALTCHA v2, SHA-256, cost 1, a server-chosen
counter), with the vendored widget (static/vendor/altcha) used as
static/js/waiting-room.js uses it: an invisible `<altcha-widget>` that starts on
load, timed from handing it the challenge to its `verified` event. Each solution is
checked with the Python `altcha` package, as the server would.

Twice: as this machine (no throttling), and as a phone: a phone-sized, touch
context with the page's CPU slowed 4x through the DevTools protocol
(`Emulation.setCPUThrottlingRate`). Chromium applies that rate to the page only:
the widget's Web Workers, where the hashing happens, are slowed only by the CPU the
throttler takes from them, so the "phone" column is a floor. "4x per core" is this
machine's time times 4: a phone whose every core is 4x slower than this machine's,
running as many workers (navigator.hardwareConcurrency) as here; the cautious figure
to choose a difficulty by.

No server is started: the page and the widget are served by Playwright's request
interception on http://127.0.0.1 (a secure context, which the widget needs).

The counter is the difficulty itself (the server draws it from [d/2, 3d/2], whose
mean is d), so runs of one difficulty do the same work and differ only by noise.
"""

import argparse
import json
import secrets
import statistics
import sys
import time
from pathlib import Path

import altcha

BASE_DIR = Path(__file__).resolve().parent.parent
WIDGET = BASE_DIR / "static" / "vendor" / "altcha" / "altcha.min.js"
CHROMIUM = "/usr/bin/chromium"
ORIGIN = "http://127.0.0.1:9"  # never contacted: every request is answered by the route below
PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<script type="module" src="/altcha.min.js"></script></head>
<body><div id="pow" hidden></div></body></html>"""

# The same widget set-up as static/js/waiting-room.js's solve().
SOLVE = """async (challenge) => {
  await customElements.whenDefined("altcha-widget");
  return await new Promise((resolve, reject) => {
    const widget = document.createElement("altcha-widget");
    widget.setAttribute("display", "invisible");
    widget.setAttribute("auto", "onload");
    widget.setAttribute("challenge", JSON.stringify(challenge));
    widget.setAttribute("configuration", JSON.stringify({
      minDuration: 0, humanInteractionSignature: false, hideFooter: true, hideLogo: true,
    }));
    const started = performance.now();
    widget.addEventListener("verified", (e) =>
      resolve({ ms: performance.now() - started, payload: e.detail.payload }));
    widget.addEventListener("statechange", (e) => {
      if (e.detail.state === "error") reject(new Error("the widget failed"));
    });
    document.getElementById("pow").replaceChildren(widget);
  });
}"""

HMAC_SECRET = secrets.token_bytes(32)
HMAC_KEY_SECRET = secrets.token_bytes(32)


def make_challenge(difficulty: int) -> dict:
    return altcha.create_challenge(
        "SHA-256",
        1,
        counter=difficulty,
        expires_at=int(time.time()) + 300,
        data={"event": "bench"},
        hmac_secret=HMAC_SECRET,
        hmac_key_secret=HMAC_KEY_SECRET,
    ).to_dict()


def solve(page, difficulty: int) -> float:
    """Milliseconds the widget took; fails when the server would refuse the payload."""
    result = page.evaluate(SOLVE, make_challenge(difficulty))
    payload = altcha.Payload.from_base64(result["payload"])
    checked = altcha.verify_solution(payload, HMAC_SECRET, hmac_key_secret=HMAC_KEY_SECRET)
    if not checked.verified or payload.solution.counter != difficulty:
        raise SystemExit(f"the widget's payload does not verify: {checked.__dict__}")
    return result["ms"]


def open_page(browser, *, phone: bool):
    if phone:
        context = browser.new_context(
            viewport={"width": 390, "height": 844}, device_scale_factor=3, is_mobile=True, has_touch=True
        )
    else:
        context = browser.new_context()
    page = context.new_page()
    widget = WIDGET.read_bytes()

    def serve(route):
        if route.request.url.endswith("/altcha.min.js"):
            route.fulfill(body=widget, content_type="text/javascript")
        else:
            route.fulfill(body=PAGE, content_type="text/html")

    page.route(f"{ORIGIN}/**", serve)
    page.goto(f"{ORIGIN}/")
    if phone:
        context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 4})
    return context, page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--difficulties", default="10000,25000,50000,100000,200000")
    parser.add_argument("--chromium", default=CHROMIUM)
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    difficulties = [int(d) for d in args.difficulties.split(",")]

    from playwright.sync_api import sync_playwright

    runs: dict[str, dict[int, list[float]]] = {"desktop": {}, "phone": {}}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=args.chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        for profile in runs:
            context, page = open_page(browser, phone=profile == "phone")
            workers = page.evaluate("navigator.hardwareConcurrency")
            solve(page, difficulties[0])  # warm up: the module, the JIT, the first workers
            for difficulty in difficulties:
                runs[profile][difficulty] = [solve(page, difficulty) for _ in range(args.runs)]
                print(
                    f"{profile:8} {difficulty:>8,}: {[round(ms) for ms in runs[profile][difficulty]]}",
                    file=sys.stderr,
                )
            context.close()
        browser.close()

    print(f"\nMedian solve time over {args.runs} runs, ms ({workers} workers, Chromium {browser.version}):\n")
    print("| difficulty | this machine | phone (page 4x) | 4x per core |")
    print("|---:|---:|---:|---:|")
    for difficulty in difficulties:
        desktop = statistics.median(runs["desktop"][difficulty])
        phone = statistics.median(runs["phone"][difficulty])
        print(f"| {difficulty:,} | {desktop:,.0f} | {phone:,.0f} | {4 * desktop:,.0f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"workers": workers, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
