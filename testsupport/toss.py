"""A local stand-in of Toss Payments' API (v1), for the tests: the same requests
the real client code sends (booking_app/payments.py: TossProvider), answered as
docs.tosspayments.com describes, on another host.

It checks the secret key (HTTP Basic, the key as user name), keeps each payment's
state (READY once the widget authorised it, DONE once confirmed, CANCELED or
PARTIAL_CANCELED once given back), answers a repeated Idempotency-Key with the
first answer, and can be told to decline, to answer late, or to apply a call and
then drop the connection (an answer lost). For the fault-injection suite it can
also be down (every call answered 503), run a hook around each confirm (to delay
it, or to kill the process waiting for it), and report each change of a payment's
status, as Toss' notifications do."""

import base64
import datetime
import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ticketing.servers import free_port

KST = datetime.timezone(datetime.timedelta(hours=9))


@dataclass
class Knobs:
    decline: str = ""  # the next confirm is refused with this code
    delay: float = 0.0  # seconds before each answer
    lose_answer: bool = False  # the next confirm is applied, then the connection dropped
    down: bool = False  # every call is answered 503, nothing applied (an outage)
    # Called with the payment's key and "before" / "after" around each confirm, outside
    # any lock: it may sleep, or act; "lose" from the "after" call drops the answer.
    confirm_hook: Callable[[str, str], str] | None = None
    # Called with a payment after each change of its status (Toss' PAYMENT_STATUS_CHANGED).
    on_change: Callable[[dict], None] | None = None


@dataclass
class TossStandIn:
    secret: str = "test_sk_standin"
    payments: dict[str, dict] = field(default_factory=dict)  # paymentKey -> payment
    refused: int = 0  # calls answered 503 while down
    seen: list[tuple[str, str, dict, dict]] = field(default_factory=list)  # method, path, headers, body
    knobs: Knobs = field(default_factory=Knobs)
    _answers: dict[str, tuple[int, dict]] = field(default_factory=dict)  # Idempotency-Key -> answer
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.port = free_port()
        self.server = _Server(("127.0.0.1", self.port), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "TossStandIn":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def authorize(self, order_id: str, amount: int, *, decline: str = "") -> str:
        """What the checkout page's widget does: the buyer authorises the payment;
        the paymentKey it hands the success URL. `decline`: the card issuer's refusal
        its confirm will meet."""
        key = f"tpk_{uuid.uuid4().hex}"
        with self._lock:
            self.payments[key] = {
                "paymentKey": key,
                "orderId": order_id,
                "status": "READY",
                "totalAmount": amount,
                "balanceAmount": amount,
                "currency": "KRW",
                "approvedAt": None,
                "cancels": [],
                "declineWith": decline,
            }
        return key

    def calls(self, path_part: str) -> list[tuple[str, str, dict, dict]]:
        return [c for c in self.seen if path_part in c[1]]

    # --- the API ------------------------------------------------------------------

    def answer(self, method: str, path: str, headers: dict, body: dict) -> tuple[int, dict]:
        self.seen.append((method, path, headers, body))
        expected = "Basic " + base64.b64encode(f"{self.secret}:".encode()).decode()
        if headers.get("Authorization") != expected:
            return 401, {
                "code": "UNAUTHORIZED_KEY",
                "message": "인증되지 않은 시크릿 키 혹은 클라이언트 키 입니다.",
            }
        if self.knobs.down:
            with self._lock:
                self.refused += 1
            return 503, {
                "code": "FAILED_INTERNAL_SYSTEM_PROCESSING",
                "message": "내부 시스템 처리 작업이 실패했습니다.",
            }
        once = headers.get("Idempotency-Key", "")
        with self._lock:
            if once and once in self._answers:
                return self._answers[once]
            before = {key: p["status"] for key, p in self.payments.items()}
            status, found = self._apply(method, path, body)
            if once and status < 500:
                self._answers[once] = (status, found)
            changed = [dict(p) for key, p in self.payments.items() if before.get(key) != p["status"]]
        for payment in changed if self.knobs.on_change else ():
            self.knobs.on_change(payment)
        return status, found

    def _apply(self, method: str, path: str, body: dict) -> tuple[int, dict]:
        if method == "POST" and path == "/v1/payments/confirm":
            payment = self.payments.get(body.get("paymentKey", ""))
            if payment is None or payment["orderId"] != body.get("orderId"):
                return 404, {
                    "code": "NOT_FOUND_PAYMENT_SESSION",
                    "message": "결제 시간이 만료되어 결제 진행 데이터가 존재하지 않습니다.",
                }
            if payment["totalAmount"] != body.get("amount"):
                return 400, {"code": "INVALID_REQUEST", "message": "잘못된 요청입니다."}
            if payment["status"] != "READY":
                return 400, {"code": "ALREADY_PROCESSED_PAYMENT", "message": "이미 처리된 결제 입니다."}
            if self.knobs.decline or payment["declineWith"]:
                code, self.knobs.decline = self.knobs.decline or payment["declineWith"], ""
                return 403, {"code": code, "message": "결제 승인이 거절되었습니다."}
            payment.update(status="DONE", approvedAt=datetime.datetime.now(KST).isoformat(timespec="seconds"))
            return 200, dict(payment)
        if method == "GET" and path.startswith("/v1/payments/orders/"):
            order = path.rsplit("/", 1)[1]
            found = [p for p in self.payments.values() if p["orderId"] == order]
            if not found:
                return 404, {"code": "NOT_FOUND_PAYMENT", "message": "존재하지 않는 결제 정보 입니다."}
            return 200, dict(found[-1])
        if method == "GET" and path.startswith("/v1/payments/"):
            payment = self.payments.get(path.rsplit("/", 1)[1])
            if payment is None:
                return 404, {"code": "NOT_FOUND_PAYMENT", "message": "존재하지 않는 결제 정보 입니다."}
            return 200, dict(payment)
        if method == "POST" and path.startswith("/v1/payments/") and path.endswith("/cancel"):
            payment = self.payments.get(path.split("/")[3])
            if payment is None or payment["status"] not in ("DONE", "PARTIAL_CANCELED"):
                return 400, {"code": "NOT_CANCELABLE_PAYMENT", "message": "취소 할 수 없는 결제 입니다."}
            amount = body.get("cancelAmount", payment["balanceAmount"])
            if not 0 < amount <= payment["balanceAmount"]:
                return 400, {"code": "NOT_CANCELABLE_AMOUNT", "message": "취소 할 수 없는 금액 입니다."}
            payment["balanceAmount"] -= amount
            payment["cancels"].append({"cancelAmount": amount, "cancelReason": body.get("cancelReason")})
            payment["status"] = "CANCELED" if payment["balanceAmount"] == 0 else "PARTIAL_CANCELED"
            return 200, dict(payment)
        return 404, {"code": "NOT_FOUND", "message": "Not found"}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A caller that went away before its answer (a process killed while it
        waited) is one of the faults the tests make, not an error of the stand-in."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _handler(standin: TossStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            hook = standin.knobs.confirm_hook if self.path == "/v1/payments/confirm" else None
            if hook:
                hook(str(body.get("paymentKey")), "before")
            status, found = standin.answer(self.command, self.path, dict(self.headers), body)
            if standin.knobs.delay:
                time.sleep(standin.knobs.delay)
            lose = bool(hook) and hook(str(body.get("paymentKey")), "after") == "lose"
            if lose or (standin.knobs.lose_answer and self.path == "/v1/payments/confirm"):
                standin.knobs.lose_answer = False
                self.close_connection = True
                self.connection.close()  # applied, and the answer never leaves
                return
            data = json.dumps(found).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve  # noqa: N815 (http.server's names)

        def log_message(self, *args: object) -> None:
            pass

    return Handler
