"""The operator's admin in Korean (Accept-Language ko): the event list, its actions'
messages, the live page as the server renders it and the reservation list speak
Korean, with no English label left; English stays the source."""

import json
import re
import uuid
from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import User
from django.test import Client

from queue_app import events
from queue_app.models import Event
from testsupport.booking import book
from testsupport.clients import Api
from testsupport.line import admit_all

KO = {"HTTP_ACCEPT_LANGUAGE": "ko"}

# The English an operator used to meet on these pages; none may be left in Korean.
ENGLISH = [
    "Waiting room",
    "Bookings",
    "Events",
    "Reservations",
    "event id",
    "waiting",
    "active",
    "seats left",
    "seats sold",
    "admitted",
    "joins refused",
    "protections",
    "bookings",
    "admit per second",
    "active window",
    "max active users",
    "total seats",
    "status",
    "Open",
    "Paused",
    "Confirmed",
    "Hot sale",
    "Protections off",
    "Pause",
    "Close",
    "Cancel the selected",
    "By status",
    "live",
    "forged token",
    "proof of work",
    "places/address",
    "seats/buyer",
    "reservation id",
    "seat count",
    "buyer",
    "created at",
    "published at",
    "Admitted per second",
    "The last 30 minutes",
    "refreshed",
    "Updated",
    "last 30 minutes",
]


class _Visible(HTMLParser):
    """The text a person meets on a page: text outside scripts and styles, and the
    labels read aloud (aria-label, title)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("script", "style"):
            self._hidden += 1
        self.parts.extend(value for name, value in attrs if name in ("aria-label", "title") and value)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden and data.strip():
            self.parts.append(data.strip())


def visible(html: bytes) -> str:
    parser = _Visible()
    parser.feed(html.decode())
    return "\n".join(parser.parts)


def english_left(text: str) -> list[str]:
    return [word for word in ENGLISH if re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE)]


@pytest.fixture
def operator(client, db) -> Client:
    client.force_login(User.objects.create_superuser("op-ko", "op@example.com", "pw-for-tests"))
    return client


@pytest.fixture
def busy_event(make_event) -> Event:
    """An event with every column filled: people waiting and active, a booking, a
    refused join and the hot-sale protections."""
    event = make_event(name="KTX 추석 07:00", event_id=f"ktx-{uuid.uuid4().hex[:8]}", total_seats=10)
    api = Api(Client(raise_request_exception=False))  # one lane: the admin is the subject here
    tokens = [api.token(event.event_id) for _ in range(4)]
    admit_all(event.event_id)
    book(api, tokens[0], event.event_id, 2)
    api.token(event.event_id)
    assert api.rejoin(str(uuid.uuid4()), event.event_id)[1]["error"]["code"] == "INVALID_TOKEN"
    Event.objects.filter(pk=event.pk).update(
        proof_of_work=50_000, max_places_per_address=2, max_seats_per_buyer=4
    )
    event.refresh_from_db()
    events.event_publish(event)
    return event


def test_the_event_list_speaks_korean(operator, busy_event):
    page = operator.get("/admin/queue_app/event/", **KO)
    assert page.status_code == 200
    text = visible(page.content)
    for korean in (
        "대기실",  # the app
        "변경할 행사 선택",  # the model, in Django's own sentence
        # column headings
        "행사 ID",
        "대기",
        "예매 중",
        "잔여 좌석",
        "최근 1분 입장",
        "거부된 참여",
        "보호 설정",
        "예매 수",
        "초당 입장",
        "예매 시간(초)",
        "최대 동시 예매 인원",
        "전체 좌석",
        "상태 (으)로",  # the filter
        "진행 중",  # a status value
        "위조 토큰 1",  # a refusal, by reason
        "작업 증명 50,000, 주소당 2자리, 구매자당 4석",
        "실시간",
        # actions
        "인기 판매: 작업 증명, 주소당·구매자당 한도",
        "보호 끄기: 누구나 일반 클라이언트로 참여",
        "진행: 참여를 받고 입장시킴",
        "일시 중단: 참여는 받고 입장은 멈춤",
        "마감: 참여 거부, 폴링은 EXPIRED로 응답",
    ):
        assert korean in text, korean
    assert english_left(text) == [], text


def test_the_event_actions_say_what_they_did_in_korean(operator, busy_event):
    for action, said in (
        ("pause_events", "행사 1개: 이제 일시 중단 상태입니다."),
        ("hot_sale", "행사 1개: 인기 판매 보호를 켰습니다."),
        ("protections_off", "행사 1개: 보호를 껐습니다."),
    ):
        page = operator.post(
            "/admin/queue_app/event/",
            {"action": action, "_selected_action": [busy_event.pk]},
            follow=True,
            **KO,
        )
        assert said in visible(page.content), action
    english = operator.post(
        "/admin/queue_app/event/", {"action": "open_events", "_selected_action": [busy_event.pk]}, follow=True
    )
    assert "1 event(s) now Open." in visible(english.content)


def test_the_change_form_speaks_korean(operator, busy_event):
    page = operator.get(f"/admin/queue_app/event/{busy_event.pk}/change/", **KO)
    text = visible(page.content)
    for korean in (
        "입장",
        "매크로·봇 방지",
        "예약 시작",
        "기록",
        "주소당 최대 자리",
        "입장한 사람이 예매할 수 있는 시간.",
    ):
        assert korean in text, korean
    for english in (
        "Admission",
        "Against scripts and bots",
        "Scheduled start",
        "How long an admitted person",
    ):
        assert english not in text, english
    refused = operator.post(
        f"/admin/queue_app/event/{busy_event.pk}/change/",
        {"event_id": busy_event.event_id, "name": busy_event.name, "status": "OPEN", "total_seats": 1},
        **KO,
    )
    assert "이미 2석이 판매되어 전체 좌석을 그보다 줄일 수 없습니다." in visible(refused.content)


def test_the_live_page_speaks_korean(operator, busy_event):
    page = operator.get(f"/admin/queue_app/event/{busy_event.pk}/live/", **KO)
    assert page.status_code == 200
    text = visible(page.content)
    for korean in (
        "실시간",  # the breadcrumb
        "상태",
        "대기",
        "예매 중",
        "잔여 좌석",
        "판매된 좌석",
        "예매 수",
        "최근 1분 입장",
        "거부된 참여",
        "초당 입장",
        "10초당 예매",
        "대기 인원, 최근 30분",  # a chart's label, read aloud
        "최근 30분, 1초마다 갱신합니다.",
    ):
        assert korean in text, korean
    assert english_left(text) == [], text
    # The script's words come with the page, translated.
    found = re.search(
        r'<script id="live-strings" type="application/json">(.*?)</script>', page.content.decode()
    )
    strings = json.loads(found.group(1))
    assert (strings["updated"], strings["end"], strings["statuses"]["OPEN"]) == (
        "%(time)s 갱신",
        "현재",
        "진행 중",
    )
    assert strings["refusals"]["forged_token"] == "위조 토큰"


def test_the_reservation_list_speaks_korean(operator, busy_event):
    page = operator.get("/admin/booking_app/reservation/", **KO)
    assert page.status_code == 200
    text = visible(page.content)
    for korean in (
        "예매",
        "예매 번호",
        "좌석 수",
        "구매자 이름",
        "구매자 이메일",
        "확정",
        "선택한 예매 취소",
    ):
        assert korean in text, korean
    assert english_left(text) == [], text
