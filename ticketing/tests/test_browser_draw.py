"""A scheduled start in headless Chromium (docs/draw.md): the pre-queue's countdown
and receipt, the DRAWING state at the start, the drawn position after the draw and
the public draw page that proves it; later arrivals behind the whole pre-queue; the
same in Korean. Each event starts a few seconds after the test begins. The pages are
served by the production server (test_browser.py)."""

import hashlib
import json
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone, translation
from django.utils.translation import gettext

from queue_app import admission, draw, tokens
from queue_app import services as queue
from queue_app.models import Draw
from testsupport.line import fresh_tick
from ticketing import store
from ticketing.tests.browser import rank_shown, shot

VERIFY = Path(__file__).resolve().parents[2] / "docs" / "verify_draw.py"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# How far ahead each event's start is: room for a page to load, join and be checked
# before it (1.3-2 s on an idle machine, screenshots included; over 4 s on two cores
# shared with other test runs), with a margin for a slow machine.
LEAD = timedelta(seconds=8)
# The countdown right after the join: the whole seconds left, LEAD at most.
STARTS_IN = rf"0:0[1-{LEAD.seconds}]"

# Every poll answer the page gets (a join's first one too): when it was sent and
# answered (ms), and the answer.
RECORD_POLLS = """
window.__polls = [];
const fetched = window.fetch;
window.fetch = async function (url) {
  const sent = Date.now();
  const response = await fetched.apply(this, arguments);
  const asked = String(url);
  const poll = asked.includes("/api/status/poll");
  if (poll || asked.includes("/api/queue/join") || asked.includes("/api/queue/rejoin")) {
    const body = await response.clone().json().catch(() => null);
    const data = body && body.data && (poll ? body.data : body.data.position);
    if (poll || data) window.__polls.push({ sent: sent, answered: Date.now(), data: data });
  }
  return response;
};
"""


@pytest.fixture
def new_page(browser, production_server, console):  # noqa: F811 (the fixtures imported above)
    """Phone-sized pages, each of its own context (cookies, storage), in a locale,
    recording their polls; closed after the test."""
    contexts = []

    def new(locale: str = "en-US"):
        context = browser.new_context(
            locale=locale, viewport={"width": 390, "height": 844}, base_url=production_server
        )
        console.watch(context)
        contexts.append(context)
        context.add_init_script(RECORD_POLLS)
        page = context.new_page()
        page.set_default_timeout(20_000)
        return page

    yield new
    for context in contexts:
        context.close()


def polls(page) -> list[dict]:
    return page.evaluate("window.__polls")


def text(page, selector: str) -> str:
    # Some ICU versions put a narrow no-break space before AM/PM.
    return page.locator(selector).inner_text().replace("\u202f", " ").strip()


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def wait_for_start(event) -> None:
    """Until the start has passed on Redis' clock, the one that tells the pre-queue
    from the line."""
    start = ms(event.opens_at)
    while (now := store.now_ms(event.event_id)) < start:
        time.sleep((start - now) / 1000)


def before_start(event) -> None:
    """The pre-queue part of a test must be done before the start: else LEAD is too short."""
    assert timezone.now() < event.opens_at, f"the start passed while the page joined: raise LEAD ({LEAD})"


def shows(page, state: str, timeout: float = 20_000) -> None:
    """Until the room is in `state` and that state's panel is on screen."""
    page.locator(f'#room[data-state="{state}"] [data-show="{state}"]').wait_for(timeout=timeout)


def token_of(page, event_id: str) -> str:
    return page.evaluate(f"localStorage.getItem('queueToken:{event_id}')")


def receipt_of(event_id: str, token: str) -> str:
    return draw.receipt(event_id, uuid.UUID(token).bytes).hex()


def clock(moment: datetime, lang: str, zone: str) -> str:
    """The start as every page writes a time (static/js/clock.js): date, time and the
    zone's short name ("EST" for America's zones in English, else "GMT+9" or "UTC")."""
    local = moment.astimezone(ZoneInfo(zone))
    minutes = int(local.utcoffset().total_seconds()) // 60
    if minutes == 0 and zone in ("UTC", "Etc/UTC"):
        named = "UTC"
    elif lang == "en" and zone.startswith("America/") and local.tzname().isalpha():
        named = local.tzname()
    else:
        named = f"GMT{'+' if minutes >= 0 else '-'}{abs(minutes) // 60}" + (
            f":{abs(minutes) % 60:02d}" if minutes % 60 else ""
        )
    hour = local.hour % 12 or 12
    if lang == "ko":
        noon = "오전" if local.hour < 12 else "오후"
        return f"{local.year}년 {local.month}월 {local.day}일 {noon} {hour}:{local:%M} {named}"
    noon = "AM" if local.hour < 12 else "PM"
    return f"{local:%b} {local.day}, {local.year}, {hour}:{local:%M} {noon} {named}"


def test_a_join_before_the_start_is_drawn_into_the_line(make_event, new_page, production_server, tmp_path):
    event = make_event(name="KTX Seollal 07:00", opens_at=timezone.now() + LEAD)
    page = new_page()
    page.goto(f"/events/{event.event_id}/")
    shows(page, "prequeue")
    page.wait_for_function("document.getElementById('receipt').textContent.length === 16")
    zone = page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone")
    assert text(page, "#prequeue-message") == (
        f"You are in. The order is drawn at {clock(event.opens_at, 'en', zone)}."
    )
    assert re.fullmatch(f"Starts in {STARTS_IN}", text(page, "#starts-in")), text(page, "#starts-in")
    receipt = text(page, "#receipt")
    token = token_of(page, event.event_id)
    assert receipt == receipt_of(event.event_id, token)  # the receipt names this place
    draw_url = f"/events/{event.event_id}/draw?receipt={receipt}"
    assert [a.get_attribute("href") for a in page.locator(".draw-link").all()] == [draw_url, draw_url]
    # Its target shows the commitment to the seed (the receipt's position comes later).
    scheduled = page.request.get(f"{production_server}{draw_url}")
    assert scheduled.status == 200
    committed = re.search(r'<code id="commitment">([0-9a-f]{64})</code>', scheduled.text()).group(1)
    assert 'data-status="SCHEDULED"' in scheduled.text()
    others = [queue.queue_join(event_id=event.event_id) for _ in range(4)]
    assert all(re.fullmatch(r"[0-9a-f]{16}", o.receipt or "") for o in others)
    # Within draw.LEAD_MS of the start the tick asks for the draw (which reads ahead
    # until the start), and admits nobody.
    tick = admission.event_admit(event.event_id)
    assert (tick.outcome, tick.admitted, tick.active) == ("DRAW_DUE", 0, 0)
    shot(page, "11-pre-queue")
    fits_a_phone(page)
    # The person saves their receipt, signed by the service: proof the draw must include them.
    before = save_receipt(page, '[data-show="prequeue"] .save-receipt', tmp_path / "before.json")
    assert (before["receipt"], before["commitment"], before["position"]) == (receipt, committed, None)
    before_start(event)
    # The countdown runs on.
    first = text(page, "#starts-in")
    page.wait_for_function("(first) => document.getElementById('starts-in').textContent !== first", arg=first)

    # The start: the tick asks for the draw (the one before the start may have been
    # in the same second); the draw is kept back until the page shows that it is drawing.
    wait_for_start(event)
    assert fresh_tick(event.event_id).outcome == "DRAW_DUE"
    shows(page, "drawing", timeout=6_000)
    assert text(page, "#drawing-message") == "Drawing the order of everyone who came before the start…"
    shot(page, "12-drawing")
    # The join's poll told the page to come back 0.5-3 s after the start, and it
    # did not poll in between (timers never fire early; a few ms of clock rounding).
    start = ms(event.opens_at)
    early, *later = polls(page)
    assert early["data"]["status"] == "PRE_QUEUE" and early["data"]["opensAt"] == start
    assert early["data"]["receipt"] == receipt
    assert start + 450 <= early["answered"] + early["data"]["nextPollMs"] <= start + 3_050
    assert start + 450 <= later[0]["sent"] <= start + 3_500, later[0]["sent"] - start
    assert later[0]["data"]["status"] == "DRAWING" and 1_000 <= later[0]["data"]["nextPollMs"] <= 3_000

    outcome = draw.run(event.event_id)
    assert (outcome.outcome, outcome.size) == ("DONE", 5)
    shows(page, "waiting", timeout=6_000)
    page.locator("#drawn").wait_for()  # visible
    rank = rank_shown(page)
    assert 1 <= rank <= 5
    assert text(page, "#position") == f"You are number {rank} in line"
    assert text(page, "#drawn-position") == f"Drawn position {rank}"  # nobody admitted yet
    assert text(page, "#ahead") == str(rank - 1)
    assert text(page, "#behind") == str(5 - rank)
    last = polls(page)[-1]["data"]
    assert (last["receipt"], last["drawPosition"], last["rank"]) == (receipt, rank, rank)
    assert page.locator("#check-draw").get_attribute("href") == draw_url
    shot(page, "13-drawn-position")
    # Saved again after the draw, the receipt also names the position and the list; the
    # check anyone can run confirms both files against what the server publishes.
    after = save_receipt(page, "#drawn .save-receipt", tmp_path / "after.json")
    assert (after["receipt"], after["position"], after["size"]) == (receipt, rank, 5)
    for saved in ("before.json", "after.json"):
        checked = subprocess.run(
            [sys.executable, str(VERIFY), "--url", production_server, "--event", event.event_id,
             "--receipt-file", str(tmp_path / saved)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert checked.returncode == 0, checked.stdout
        assert f"your receipt {receipt}: position {rank} of 5" in checked.stdout

    page.locator("#check-draw").click()
    page.wait_for_url(re.compile(re.escape(draw_url) + "$"))
    page.locator("#found").wait_for()
    seed = text(page, "#seed")
    assert text(page, "#commitment") == committed  # as shown before the start
    assert hashlib.sha256(bytes.fromhex(seed)).hexdigest() == committed
    assert text(page, "#size") == "5"
    assert page.locator("input#receipt").input_value() == receipt
    assert text(page, "#found") == f"Receipt {receipt} was drawn at position {rank} of 5."
    shot(page, "14-draw-page")

    # The receipt the page showed is the one in the published draw, at the same place.
    answer = page.request.get(
        f"{production_server}/api/queue/draw?eventId={event.event_id}&receipt={receipt}"
    )
    assert answer.status == 200, answer.text()
    data = answer.json()["data"]
    assert (data["status"], data["seed"], data["size"]) == ("DRAWN", seed, 5)
    assert (data["receipt"], data["position"]) == (receipt, rank)
    # And everyone else's place in line is their drawn position: 1-5, each once.
    places = {rank}
    for joined in others:
        p = queue.queue_poll(event_id=event.event_id, token=tokens.parse_token(joined.token))
        assert (p.status, p.receipt, p.draw_position) == ("WAITING", joined.receipt, p.rank)
        places.add(p.rank)
    assert places == {1, 2, 3, 4, 5}
    fits_a_phone(page)


def save_receipt(page, selector: str, path: Path) -> dict:
    """Click the page's "Save my signed receipt"; the file it downloads, read."""
    with page.expect_download() as saving:
        page.locator(selector).click()
    saving.value.save_as(path)
    return json.loads(path.read_text())


def fits_a_phone(page) -> None:
    """Nothing wider than the phone's screen (no sideways scrolling)."""
    wide = page.evaluate(
        """[...document.querySelectorAll("main *")]
             .filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
             .map((e) => e.tagName.toLowerCase() + (e.id ? "#" + e.id : ""))"""
    )
    width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1], f"{page.url} is {width[0]} px wide on a {width[1]} px screen: {wide}"


def joins_undrawn(page, event, *, rank: int):
    """A browser that comes after the start: in line at `rank`, with no drawn position."""
    page.goto(f"/events/{event.event_id}/")
    shows(page, "waiting")
    assert rank_shown(page) == rank
    assert page.locator("#drawn").is_hidden()
    return page


def test_a_join_after_the_start_is_behind_the_whole_pre_queue(make_event, new_page):
    event = make_event(opens_at=timezone.now() + timedelta(seconds=1))
    for _ in range(3):
        assert queue.queue_join(event_id=event.event_id).receipt is not None
    wait_for_start(event)

    # After the start, before the draw: already in line, behind the three, not drawn.
    late = joins_undrawn(new_page(), event, rank=4)
    first = polls(late)[-1]["data"]
    assert (first["status"], first["receipt"], first["drawPosition"]) == ("WAITING", None, None)

    assert admission.event_admit(event.event_id).outcome == "DRAW_DUE"
    assert draw.run(event.event_id).outcome == "DONE"
    polled = len(polls(late))
    late.wait_for_function(f"window.__polls.length > {polled}")  # a poll since the draw
    assert rank_shown(late) == 4
    assert late.locator("#drawn").is_hidden()

    # After the draw: behind the late one too.
    later = joins_undrawn(new_page(), event, rank=5)
    data = polls(later)[-1]["data"]
    assert (data["rank"], data["receipt"], data["drawPosition"]) == (5, None, None)
    assert Draw.objects.get(event=event).size == 3


def korean(msgid: str, **values: object) -> str:
    """The Korean catalogue's text for `msgid` (which must be translated), filled in."""
    with translation.override("ko"):
        translated = gettext(msgid)
    assert translated != msgid, f"not translated to Korean: {msgid!r}"
    return translated % values if values else translated


def test_the_pre_queue_and_the_draw_in_korean(make_event, new_page):
    event = make_event(name="KTX 설날 07:00", opens_at=timezone.now() + LEAD)
    page = new_page("ko-KR")
    page.goto(f"/events/{event.event_id}/")
    shows(page, "prequeue")
    page.wait_for_function("document.getElementById('receipt').textContent.length === 16")
    assert page.locator("html").get_attribute("lang") == "ko"
    zone = page.evaluate("Intl.DateTimeFormat().resolvedOptions().timeZone")
    message = korean("You are in. The order is drawn at %(time)s.", time=clock(event.opens_at, "ko", zone))
    assert text(page, "#prequeue-message") == message
    countdown = re.escape(korean("Starts in %(time)s", time="TIME")).replace("TIME", STARTS_IN)
    assert re.fullmatch(countdown, text(page, "#starts-in")), text(page, "#starts-in")
    panel = page.locator('[data-show="prequeue"]')
    assert korean("Your receipt:") in panel.inner_text()
    assert text(page, '[data-show="prequeue"] .draw-link') == korean("How the draw works")
    assert text(page, '[data-show="prequeue"] .save-receipt') == korean("Save my signed receipt")
    receipt = text(page, "#receipt")
    assert receipt == receipt_of(event.event_id, token_of(page, event.event_id))
    shot(page, "15-pre-queue-ko")
    page.reload()  # F5 keeps the place, and its receipt
    shows(page, "prequeue")
    page.wait_for_function("document.getElementById('receipt').textContent.length === 16")
    assert text(page, "#receipt") == receipt
    before_start(event)

    wait_for_start(event)
    shows(page, "drawing", timeout=6_000)
    assert text(page, "#drawing-message") == korean(
        "Drawing the order of everyone who came before the start…"
    )
    assert draw.run(event.event_id).outcome == "DONE"
    shows(page, "waiting", timeout=6_000)
    page.locator("#drawn").wait_for()
    assert text(page, "#position") == korean("You are number %(rank)s in line", rank=1)
    assert text(page, "#drawn-position") == korean("Drawn position %(n)s", n=1)
    assert text(page, "#check-draw") == korean("Check the draw")

    page.locator("#check-draw").click()
    page.locator("#found").wait_for()
    assert page.locator("html").get_attribute("lang") == "ko"
    assert text(page, "h1") == korean("The draw for %(event)s", event=event.name)
    assert korean("Seed") in page.locator("dl.figures").inner_text()
    assert text(page, "#found") == korean(
        "Receipt %(receipt)s was drawn at position %(position)s of %(size)s.",
        receipt=receipt,
        position=1,
        size=1,
    )
    fits_a_phone(page)


@pytest.fixture(params=[("en", 1280, 800), ("ko", 390, 844)], ids=["desktop-en", "phone-ko"])
def view(request, browser, production_server, console):  # noqa: F811 (the fixtures imported above)
    """A page on a desktop in English, or on a phone in Korean, that may use the
    clipboard; and its language."""
    lang, width, height = request.param
    context = browser.new_context(
        locale={"en": "en-US", "ko": "ko-KR"}[lang],
        viewport={"width": width, "height": height},
        base_url=production_server,
    )
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=production_server)
    console.watch(context)
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page, lang
    context.close()


def said(lang: str, msgid: str, **values: object) -> str:
    """`msgid` as a page in `lang` says it."""
    if lang == "ko":
        return korean(msgid, **values)
    return msgid % values if values else msgid


KEEP_IT = (
    "Keep the commitment with your receipt now, before the start (copy both, or save your signed "
    "receipt, which holds both): after the start, the draw page must show a seed whose SHA-256 is "
    "this same commitment. Only a copy you kept shows that it was not changed."
)
MATCH = (
    "The two commitments match: the revealed seed is the one whose commitment this page published "
    "before the start."
)
COMPARE = (
    "This page's copy of the commitment is the service's word. Compare both values with the "
    "commitment you saved from the waiting room before the start (your signed receipt holds it "
    "too): if they differ, this seed is not the one committed to before the start. Keep your receipt."
)


def test_the_pre_queue_shows_the_commitment_the_draw_page_then_publishes(view, make_event):
    """The commitment is shown where people wait before the start, to be kept; the draw
    page then shows the one it published beside the one its seed hashes to, and asks
    for the kept copy in the check's command instead of filling in its own."""
    page, lang = view
    event = make_event(opens_at=timezone.now() + LEAD)
    page.goto(f"/events/{event.event_id}/")
    shows(page, "prequeue")
    page.wait_for_function("document.getElementById('receipt').textContent.length === 16")
    kept = text(page, "#prequeue-commitment")
    assert re.fullmatch(r"[0-9a-f]{64}", kept), kept
    panel = page.locator('[data-show="prequeue"]')
    assert said(lang, "The draw's commitment (SHA-256 of its secret seed):") in panel.inner_text()
    assert said(lang, KEEP_IT) in panel.inner_text().replace("\n", " ")
    page.locator("#copy-commitment").click()
    page.wait_for_function("document.getElementById('copied').textContent !== ''")
    assert text(page, "#copied") == said(lang, "Copied")
    assert page.evaluate("navigator.clipboard.readText()") == kept
    assert text(page, "#copy-commitment") == said(lang, "Copy")
    shot(page, f"16-pre-queue-commitment-{lang}")
    fits_a_phone(page)
    before_start(event)

    wait_for_start(event)
    shows(page, "drawing", timeout=6_000)
    assert draw.run(event.event_id).outcome == "DONE"
    shows(page, "waiting", timeout=6_000)
    page.locator("#check-draw").click()
    page.locator("#found").wait_for()
    figures = page.locator("dl.figures").inner_text()
    assert said(lang, "The commitment published before the start (SHA-256 of the secret seed)") in figures
    assert said(lang, "The commitment the revealed seed hashes to (SHA-256 of the seed below)") in figures
    assert text(page, "#commitment") == kept  # the one shown before the start
    seed = text(page, "#seed")
    assert text(page, "#seed-commitment") == hashlib.sha256(bytes.fromhex(seed)).hexdigest() == kept
    assert page.locator("#commitment-match").get_attribute("data-match") == "yes"
    assert text(page, "#commitment-match") == said(lang, MATCH)
    assert said(lang, COMPARE) in page.locator("#draw").inner_text().replace("\n", " ")
    # The command asks for the person's own copy: the page's would prove nothing.
    command = page.locator("pre code").first.inner_text()
    assert command.endswith(f"--commitment <{said(lang, 'the commitment you saved')}>"), command
    assert kept not in page.locator("pre").all_inner_texts()[0]
    shot(page, f"17-draw-commitments-{lang}")
    fits_a_phone(page)
