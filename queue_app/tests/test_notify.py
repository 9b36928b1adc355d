"""Notify me: an email address left in the waiting room, mailed once, in the
person's language, when their turn is near or has come, with a signed link back to
their place (queue_app/notify.py). Through the API and the beat's run
(`notify.notify_due`), to a real SMTP server (testsupport/mail.py)."""

import json
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import signing
from django.db import connection
from django.utils import timezone

from queue_app import events, notify, tasks, tokens
from queue_app import services as queue
from queue_app.models import NotifyRequest
from testsupport.booking import book
from testsupport.clients import Api
from testsupport.line import admit_all, unknown_token
from testsupport.mail import Mailbox
from ticketing import store

pytestmark = pytest.mark.django_db(transaction=True)

LINK = re.compile(r"https?://\S+/events/\S+")
NOTIFY = "/api/queue/notify"


@pytest.fixture
def api(client) -> Api:
    """Notify me is on Django's lane only (it writes to Postgres)."""
    client.raise_request_exception = False
    return Api(client)


@pytest.fixture
def smtp(settings, mailbox: Mailbox) -> Mailbox:
    """Django's SMTP backend, delivering to the module's mail server."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", mailbox.controller.port, 5
    settings.NOTIFY_MAIL_PER_SECOND = 0
    mailbox.refuse = 0
    return mailbox


def address() -> str:
    """An address of the test's own: the mail server is the module's."""
    return f"p-{uuid.uuid4().hex[:10]}@example.com"


def mails_to(mailbox: Mailbox, to: str) -> list:
    return [message for recipients, message in mailbox.messages if to in recipients]


def body(message) -> str:
    return message.get_body(("plain",)).get_content()


def ask(api: Api, event_id: str, token: str, email: str, **extra) -> tuple[int, dict]:
    return api.call("post", NOTIFY, {"eventId": event_id, "token": token, "email": email}, **extra)


def warm(event) -> None:
    """One person admitted: the line's observed rate, which estimated waits rest on,
    is 1 a second (as beat's ticks make it in the sale's first seconds; before any
    admission, no wait is estimated and nobody is told it is near)."""
    queue.queue_join(event_id=event.event_id)
    admit_all(event.event_id)


def run_notify() -> int:
    """The beat's task, as a worker runs it."""
    return tasks.notify_near_front()


def test_the_mail_goes_out_once_when_near_the_front(api, event, smtp):
    """Asked twice (the second time another address), run by four workers at once and
    then twice more: one mail, to the address asked for last."""
    warm(event)
    token = api.token(event.event_id)
    first, second = address(), address()
    status, answer = ask(api, event.event_id, token, first)
    assert status == 201, answer
    assert answer["data"] == {
        "eventId": event.event_id,
        "email": first,
        "language": "en",
        "status": "PENDING",
        "aheadSeconds": 180,
    }
    status, answer = ask(api, event.event_id, token, second)
    assert (status, answer["data"]["email"]) == (200, second)
    assert NotifyRequest.objects.filter(event=event).count() == 1

    start = threading.Barrier(4)

    def worker() -> int:
        try:
            start.wait(10)
            return notify.notify_due()
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        sent = [f.result() for f in [pool.submit(worker) for _ in range(4)]]  # a thread's error fails here
    assert sum(sent) == 1
    assert run_notify() == 0 and run_notify() == 0
    assert len(mails_to(smtp, second)) == 1 and not mails_to(smtp, first)
    [message] = mails_to(smtp, second)
    assert message["Subject"] == f"Your turn is near: {event}"
    assert "You are near the front of the line" in body(message)
    row = NotifyRequest.objects.get(event=event)
    assert (row.status, row.token) == ("SENT", "")  # the token is kept no longer than the link needs it
    assert row.sent_at is not None

    # Asked again after the mail: nothing changes, nothing more is sent.
    status, answer = ask(api, event.event_id, token, address())
    assert (status, answer["data"]["status"], answer["data"]["email"]) == (200, "SENT", second)
    assert run_notify() == 0


def test_many_places_raced_by_many_workers_are_each_mailed_once(api, event, smtp):
    warm(event)
    people = [(api.token(event.event_id), address()) for _ in range(20)]
    for token, email in people:
        assert ask(api, event.event_id, token, email)[0] == 201
    start = threading.Barrier(4)

    def worker() -> int:
        try:
            start.wait(10)
            return notify.notify_due()
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        sent = [f.result() for f in [pool.submit(worker) for _ in range(4)]]
    assert sum(sent) == 20
    assert [len(mails_to(smtp, email)) for _, email in people] == [1] * 20
    assert set(NotifyRequest.objects.filter(event=event).values_list("status", flat=True)) == {"SENT"}


def test_a_korean_request_is_mailed_in_korean_with_a_link_back_to_the_place(api, client, make_event, smtp):
    event = make_event(name="KTX 추석 08:00")
    warm(event)
    token = api.token(event.event_id)
    email = address()
    status, answer = ask(api, event.event_id, token, email, HTTP_ACCEPT_LANGUAGE="ko")
    assert (status, answer["data"]["language"]) == (201, "ko")
    assert run_notify() == 1

    [message] = mails_to(smtp, email)
    assert message["Subject"] == "곧 차례입니다: KTX 추석 08:00"
    text = body(message)
    assert "KTX 추석 08:00 대기열의 앞쪽에 거의 다 왔습니다." in text
    assert "대기열의 내 자리로 돌아가기:" in text
    link = urlsplit(LINK.search(text).group(0))
    assert link.netloc == "testserver"  # the site as the person reached it
    assert link.path == f"/events/{event.event_id}/"
    [signed] = parse_qs(link.query)["place"]
    assert notify.place_of_link(event.event_id, signed) == token

    # The page, opened with the link, hands the place back for the browser to keep.
    page = client.get(f"{link.path}?{link.query}", HTTP_ACCEPT_LANGUAGE="ko")
    config = page_config(page)
    assert (config["place"], config["badLink"]) == (token, False)
    assert "no-store" in page["Cache-Control"]  # it carries the token: kept by no cache


CONFIG = re.compile(r'<script id="room-config" type="application/json">(.*?)</script>')


def page_config(page) -> dict:
    """Notify me's part of the waiting room's config."""
    return json.loads(CONFIG.search(page.content.decode()).group(1))["notify"]


def test_a_bad_link_is_said_so_and_hands_nothing_over(client, make_event, api):
    event, other = make_event(), make_event()
    token = api.token(event.event_id)
    good = notify.link_token(event.event_id, token)
    for link in [
        "garbage",
        good[:-2] + ("aa" if not good.endswith("aa") else "bb"),  # tampered
        notify.link_token(other.event_id, token),  # signed, for another event
        notify.link_token(event.event_id, str(uuid.uuid4())),  # signed, not a token of ours
    ]:
        page = client.get(f"/events/{event.event_id}/", {"place": link})
        assert page.status_code == 200
        assert page_config(page) | {"strings": None} == {
            "api": NOTIFY,
            "parameter": "place",
            "place": "",
            "badLink": True,
            "strings": None,
        }
    assert page_config(client.get(f"/events/{event.event_id}/"))["badLink"] is False


class SignedLongAgo(signing.TimestampSigner):
    def timestamp(self) -> str:
        return signing.b62_encode(int(time.time()) - notify.LINK_MAX_AGE - 1)


def test_an_old_link_no_longer_brings_the_place_back(api, event):
    token = api.token(event.event_id)
    old = SignedLongAgo(salt=notify.LINK_SALT).sign_object([event.event_id, token])
    assert notify.place_of_link(event.event_id, old) is None
    assert notify.place_of_link(event.event_id, notify.link_token(event.event_id, token)) == token


def test_nobody_further_back_than_the_notice_is_mailed(api, make_event, smtp, settings):
    """One admitted a second, told 2 s ahead: the fifth in line (4 s away) is not
    mailed; once three ahead leave (1 s away), it is."""
    settings.NOTIFY_AHEAD_SECONDS = 2
    event = make_event()
    warm(event)
    ahead = [api.token(event.event_id) for _ in range(4)]
    token, email = api.token(event.event_id), address()
    assert ask(api, event.event_id, token, email)[0] == 201
    assert run_notify() == 0
    assert not mails_to(smtp, email)
    assert NotifyRequest.objects.get(event=event).status == "PENDING"

    for gone in ahead[:3]:
        assert api.leave(gone, event.event_id)[0] == 200
    assert queue.queue_poll(event_id=event.event_id, token=tokens.parse_token(token)).eta_seconds == 1
    assert run_notify() == 1
    assert len(mails_to(smtp, email)) == 1


def test_a_paused_sale_mails_nobody_waiting_until_it_opens_again(api, event, smtp):
    warm(event)
    token, email = api.token(event.event_id), address()
    event.status = "PAUSED"
    event.save(update_fields=["status", "updated_at"])
    events.event_publish(event)
    assert ask(api, event.event_id, token, email)[0] == 201
    assert run_notify() == 0
    assert not mails_to(smtp, email)
    event.status = "OPEN"
    event.save(update_fields=["status", "updated_at"])
    events.event_publish(event)
    assert run_notify() == 1
    assert len(mails_to(smtp, email)) == 1


def test_an_admitted_place_is_told_its_turn_came(api, event, smtp):
    token, email = api.token(event.event_id), address()
    assert ask(api, event.event_id, token, email)[0] == 201
    admit_all(event.event_id)
    assert run_notify() == 1
    [message] = mails_to(smtp, email)
    assert message["Subject"] == f"It's your turn: {event}"
    assert "Come back within 2 minutes, or your turn passes." in body(message)


@pytest.mark.parametrize("gone", ["left", "booked", "closed"])
def test_a_place_gone_first_is_dropped_not_mailed(api, event, smtp, gone):
    token, email = api.token(event.event_id), address()
    assert ask(api, event.event_id, token, email)[0] == 201
    if gone == "left":
        assert api.leave(token, event.event_id)[0] == 200
    elif gone == "booked":
        admit_all(event.event_id)
        assert book(api, token, event.event_id, 1)[0] == 200
    else:
        event.status = "CLOSED"
        event.save(update_fields=["status", "updated_at"])
        events.event_publish(event)
    assert run_notify() == 0
    assert not mails_to(smtp, email)
    row = NotifyRequest.objects.get(event=event)
    assert (row.status, row.token) == ("DROPPED", "")


def test_a_mail_server_that_turns_the_mail_away_gets_it_again_later(api, event, smtp):
    warm(event)
    token, email = api.token(event.event_id), address()
    assert ask(api, event.event_id, token, email)[0] == 201
    smtp.refuse = 1  # "451 try again later", once
    assert run_notify() == 0
    row = NotifyRequest.objects.get(event=event)
    assert (row.status, row.tries) == ("PENDING", 1) and row.retry_at > timezone.now()
    assert run_notify() == 0  # not before its time
    NotifyRequest.objects.filter(pk=row.pk).update(retry_at=timezone.now() - timedelta(seconds=1))
    assert run_notify() == 1
    assert len(mails_to(smtp, email)) == 1
    assert NotifyRequest.objects.get(pk=row.pk).status == "SENT"


def test_mails_go_out_no_faster_than_the_rate(api, event, smtp, settings, rc):
    warm(event)
    settings.NOTIFY_MAIL_PER_SECOND = 1
    rc.delete(notify.MAIL_RATE_KEY)
    people = [(api.token(event.event_id), address()) for _ in range(3)]
    for token, email in people:
        assert ask(api, event.event_id, token, email)[0] == 201
    assert notify.notify_due(seconds=0.3) == 1  # the next one waits for the next second
    assert notify.notify_due(seconds=3) == 2
    assert [len(mails_to(smtp, email)) for _, email in people] == [1, 1, 1]


# --- Refusals: a clear 4xx, nothing stored -----------------------------------------


@pytest.mark.parametrize(
    ("email", "message"),
    [
        ("not-an-address", "email is not an email address."),
        ("two@@example.com", "email is not an email address."),
        ("", "email is required."),
        (None, "email is required."),
        (123, "email must be text of at most 254 characters."),
        ("a" * 250 + "@example.com", "email must be text of at most 254 characters."),
    ],
)
def test_a_bad_address_is_refused(api, event, email, message):
    token = api.token(event.event_id)
    fields = {"eventId": event.event_id, "token": token} | ({} if email is None else {"email": email})
    status, answer = api.call("post", NOTIFY, fields)
    assert (status, answer["error"]["code"], answer["error"]["message"]) == (400, "VALIDATION_ERROR", message)
    assert not NotifyRequest.objects.exists()


def test_a_place_not_waiting_is_refused(api, event):
    """Unknown to the line (issued, never joined), admitted, or gone: nothing to tell."""
    status, answer = ask(api, event.event_id, unknown_token(event.event_id), address())
    assert (status, answer["error"]["code"]) == (409, "NOT_WAITING")
    token = api.token(event.event_id)
    admit_all(event.event_id)
    status, answer = ask(api, event.event_id, token, address())
    assert (status, answer["error"]["code"]) == (409, "NOT_WAITING")
    assert not NotifyRequest.objects.exists()


def test_a_token_not_ours_or_an_unknown_event_is_refused(api, event):
    assert ask(api, event.event_id, str(uuid.uuid4()), address())[1]["error"]["code"] == "INVALID_TOKEN"
    status, answer = api.call("post", NOTIFY, {"eventId": event.event_id, "email": address()})
    assert (status, answer["error"]["code"]) == (400, "MISSING_TOKEN")
    nowhere = f"t-{uuid.uuid4().hex[:12]}"
    status, answer = ask(api, nowhere, unknown_token(nowhere), address())
    assert (status, answer["error"]["code"]) == (404, "EVENT_NOT_FOUND")
    assert not NotifyRequest.objects.exists()


def test_requests_are_limited_per_client(api, event, settings):
    settings.RATE_LIMIT_NOTIFY = 2
    ip = f"10.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250}"
    token = api.token(event.event_id)
    emails = [address() for _ in range(3)]
    answers = [ask(api, event.event_id, token, email, REMOTE_ADDR=ip)[0] for email in emails]
    assert answers == [201, 200, 429]
    assert api.last["Retry-After"] == "1"
    assert NotifyRequest.objects.get(event=event).email == emails[1]  # the refused one changed nothing
    assert ask(api, event.event_id, token, address())[0] == 200  # another client is not held back


def test_the_sender_asking_about_an_admitted_place_does_not_claim_it(api, make_event, smtp):
    """With a claim time, only the person coming back claims their turn: the sender's
    question (where does the place stand?) is not them."""
    event = make_event(claim_seconds=20)
    token, email = api.token(event.event_id), address()
    assert ask(api, event.event_id, token, email)[0] == 201
    admit_all(event.event_id)
    assert run_notify() == 1
    k = store.EventKeys(event.event_id)
    assert not store.client().getbit(k.claimed, tokens.issued(event.event_id, tokens.parse_token(token)))


def test_with_a_claim_time_the_mails_say_how_long_a_turn_waits(api, make_event, smtp):
    """Near the front: the claim time is said, and to come back now. Admitted: the
    seconds left of it, not the window's minutes."""
    event = make_event(claim_seconds=20)
    warm(event)
    near, email = api.token(event.event_id), address()
    assert ask(api, event.event_id, near, email)[0] == 201
    assert run_notify() == 1
    [message] = mails_to(smtp, email)
    assert "When it comes, you have 20 seconds to be back, or it passes to the next person" in body(message)

    admitted, email = api.token(event.event_id), address()
    assert ask(api, event.event_id, admitted, email)[0] == 201
    admit_all(event.event_id)
    assert run_notify() == 1
    [message] = mails_to(smtp, email)
    said = re.search(r"Come back within (\d+) seconds, or your turn passes.", body(message))
    assert said and 1 <= int(said.group(1)) <= 20, body(message)


def test_a_priority_lane_place_near_the_front_is_mailed_while_the_general_line_is_far(
    api, make_event, smtp, settings
):
    """Numbers count in each line apart (docs/modes.md): a general place further back
    than the notice does not hold back a lane place near the front, though the lane
    place's number is higher."""
    from queue_app import presale
    from testsupport.line import fresh_tick

    settings.NOTIFY_AHEAD_SECONDS = 2
    event = make_event(priority_share=90, admit_per_second=10)
    (code,) = presale.codes_create(event, count=1, uses=100)
    holders = [queue.queue_join(event_id=event.event_id, presale_code=code).token for _ in range(10)]
    general = [api.token(event.event_id) for _ in range(10)]
    assert fresh_tick(event.event_id).admitted == 10  # 9 from the lane, 1 from the general line
    holders += [queue.queue_join(event_id=event.event_id, presale_code=code).token for _ in range(10)]
    far, near = general[5], holders[19]  # general number 6, 4 s away; lane number 20, 1 s away
    for token in (far, near):
        assert tokens.place_of(event.event_id, tokens.parse_token(token).raw)[0] in (6, 20)
    assert queue.queue_poll(event_id=event.event_id, token=tokens.parse_token(far)).eta_seconds == 4
    assert queue.queue_poll(event_id=event.event_id, token=tokens.parse_token(near)).eta_seconds == 1
    far_email, near_email = address(), address()
    assert ask(api, event.event_id, far, far_email)[0] == 201
    assert ask(api, event.event_id, near, near_email)[0] == 201
    assert run_notify() == 1
    assert len(mails_to(smtp, near_email)) == 1
    assert not mails_to(smtp, far_email)
