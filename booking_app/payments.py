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
        record["refunded"] = min(record["amount"], record.get("refunded", 0) + amount)
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


def provider() -> Provider | None:
    """The provider of the settings (PAYMENTS_PROVIDER), or None when there is none."""
    return {"test": TestProvider}.get(settings.PAYMENTS_PROVIDER, lambda: None)()
