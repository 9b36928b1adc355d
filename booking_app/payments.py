"""Payment providers, behind one small interface that checkout (booking_app/
checkout.py) drives.

Every provider is asked for the same three things, each keyed by our order id (the
reservation id) so that asking twice is harmless:

- `charge`: take the amount for the order (a provider whose browser step only
  authorises, as Toss Payments' widget does, is confirmed here, server to server);
- `lookup`: whether the order was charged, and when (a charge whose answer was lost,
  or whose process died before its commit, is found this way);
- `refund`: return a charge, in full or in part.

`Declined` means the provider refused and took nothing; `Unavailable` means it
could not be asked or did not answer: the outcome is unknown until a `lookup`.

The built-in test provider (`make run`'s and the tests') keeps its charges in
Redis, as a provider keeps them on its side: they outlive the process that made
them. It can be told to answer late or to fail (settings PAYMENTS_TEST_DELAY_MS,
PAYMENTS_TEST_FAIL), so that tests can reach every branch.
"""

import datetime
import json
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import requests
from django.conf import settings

from ticketing import store


class Declined(Exception):
    """The provider refused the payment; nothing was taken."""


class Unavailable(Exception):
    """The provider could not be asked, or did not answer: the outcome is unknown."""


@dataclass(frozen=True, slots=True)
class Charge:
    order_id: str
    payment_id: str
    amount: int
    currency: str
    charged_at: datetime.datetime
    refunded: int = 0  # how much of it was returned


class Provider(Protocol):
    name: str

    def charge(self, order_id: str, amount: int, currency: str, *, reply: dict[str, str]) -> Charge: ...

    def lookup(self, order_id: str) -> Charge | None: ...

    def refund(self, charge: Charge, amount: int, reason: str) -> None: ...


class TestProvider:
    """Pay or Decline on our own checkout page: `reply["outcome"]` says which."""

    name = "test"

    def _behave(self) -> None:
        delay = settings.PAYMENTS_TEST_DELAY_MS
        if delay:
            time.sleep(delay / 1000)
        if settings.PAYMENTS_TEST_FAIL:
            raise Unavailable("the test provider was told to fail")

    def charge(self, order_id: str, amount: int, currency: str, *, reply: dict[str, str]) -> Charge:
        self._behave()
        if reply.get("outcome") != "pay":
            raise Declined("declined on the test checkout page")
        record = {"id": f"test_{uuid.uuid4().hex}", "amount": amount, "currency": currency, "at": time.time()}
        # An order is charged once: charging it again answers the first charge.
        if store.client().set(store.test_payment_key(order_id), json.dumps(record), nx=True, ex=7 * 86400):
            return self._charge(order_id, record)
        return self.lookup(order_id)

    def lookup(self, order_id: str) -> Charge | None:
        self._behave()
        raw = store.client().get(store.test_payment_key(order_id))
        return None if raw is None else self._charge(order_id, json.loads(raw))

    def refund(self, charge: Charge, amount: int, reason: str) -> None:
        self._behave()
        key = store.test_payment_key(charge.order_id)
        raw = store.client().get(key)
        if raw is None:
            raise Declined(f"no charge for order {charge.order_id}")
        record = json.loads(raw)
        # "Up to charge.refunded + amount in all", as Toss' keyed cancel is: two callers
        # that read the same charge and ask for the same share give it back once.
        record["refunded"] = min(record["amount"], max(record.get("refunded", 0), charge.refunded + amount))
        store.client().set(key, json.dumps(record), keepttl=True)

    @staticmethod
    def _charge(order_id: str, record: dict) -> Charge:
        return Charge(
            order_id,
            record["id"],
            record["amount"],
            record["currency"],
            datetime.datetime.fromtimestamp(record["at"], datetime.UTC),
            record.get("refunded", 0),
        )


class TossProvider:
    """Toss Payments (docs.tosspayments.com, API v1), what Korean buyers pay with.

    The checkout page's payment widget authorises the payment and sends the buyer
    back with `paymentKey`, `orderId` and `amount`; nothing is taken until this
    server confirms it (POST /v1/payments/confirm). So the money is taken only
    while checkout still holds the seats, and an authorisation never confirmed
    lapses at Toss by itself. Every call is authenticated with the secret key
    (HTTP Basic, the key as user name); confirm and cancel carry an
    Idempotency-Key, so that a call repeated after a lost answer acts once."""

    name = "toss"
    # A payment in these states took money (in full, or partly given back since).
    TAKEN = ("DONE", "PARTIAL_CANCELED", "CANCELED")

    def _call(self, method: str, path: str, body: dict | None = None, *, once: str = "") -> dict | None:
        """The answer's JSON; None for 404 (no such payment); `Declined` for a
        refusal Toss answered; `Unavailable` when it did not answer, or failed."""
        headers = {"Idempotency-Key": once} if once else {}
        try:
            answer = requests.request(
                method,
                settings.TOSS_API_URL + path,
                json=body,
                auth=(settings.TOSS_SECRET_KEY, ""),
                headers=headers,
                timeout=settings.PAYMENTS_TIMEOUT_SEC,
            )
        except requests.RequestException as exc:
            raise Unavailable(f"Toss did not answer: {exc}") from None
        if answer.status_code == 404:
            return None
        if answer.status_code >= 500 or answer.status_code in (401, 429):  # ours, or its: not the buyer's
            raise Unavailable(f"Toss answered {answer.status_code}: {answer.text[:200]}")
        found = answer.json()
        if answer.status_code >= 400:
            raise Declined(f"{found.get('code')}: {found.get('message')}")
        return found

    def charge(self, order_id: str, amount: int, currency: str, *, reply: dict[str, str]) -> Charge:
        # The widget's redirect is the buyer's to edit: the order and amount confirmed
        # are the booking's, whatever it says.
        if reply.get("orderId") != order_id or str(reply.get("amount")) != str(amount):
            raise Declined("the checkout's order or amount is not the booking's")
        body = {"paymentKey": reply.get("paymentKey", ""), "orderId": order_id, "amount": amount}
        found = self._call("POST", "/v1/payments/confirm", body, once=f"confirm-{order_id}")
        if found is None or found.get("status") not in self.TAKEN:
            raise Declined(f"Toss did not take the payment ({(found or {}).get('status')})")
        return self._charge(found)

    def payment(self, payment_key: str) -> Charge | None:
        """A payment by its key, as Toss has it now (a notification's word is not
        taken for it: notifications are not signed, may repeat and may come out of
        order)."""
        return self._taken(self._call("GET", f"/v1/payments/{payment_key}"))

    def lookup(self, order_id: str) -> Charge | None:
        return self._taken(self._call("GET", f"/v1/payments/orders/{order_id}"))

    def refund(self, charge: Charge, amount: int, reason: str) -> None:
        self._call(
            "POST",
            f"/v1/payments/{charge.payment_id}/cancel",
            {"cancelReason": reason, "cancelAmount": amount},
            once=f"refund-{charge.payment_id}-{charge.refunded + amount}",
        )

    def _taken(self, found: dict | None) -> Charge | None:
        """A payment Toss answered with, as a charge if it took money; None if it
        did not (never confirmed: the authorisation lapses at Toss by itself)."""
        if found is None or found.get("status") not in self.TAKEN:
            return None
        return self._charge(found)

    @staticmethod
    def _charge(found: dict) -> Charge:
        return Charge(
            found["orderId"],
            found["paymentKey"],
            found["totalAmount"],
            found.get("currency", "KRW"),
            datetime.datetime.fromisoformat(found["approvedAt"]),
            found["totalAmount"] - found.get("balanceAmount", found["totalAmount"]),
        )


def provider() -> Provider | None:
    """The provider of the settings (PAYMENTS_PROVIDER), or None when there is none."""
    return {"test": TestProvider, "toss": TossProvider}.get(settings.PAYMENTS_PROVIDER, lambda: None)()
