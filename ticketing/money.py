"""Amounts of money: whole numbers in a currency's minor unit (ISO 4217), never
floats, so that a price times a seat count is exact and a provider is asked for
exactly what the row records.

The currencies a sale may be priced in, each with its minor unit's exponent (KRW
and JPY have none: 55000 is ₩55,000; USD has cents: 5500 is $55.00)."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

EXPONENTS = {
    "KRW": 0,
    "JPY": 0,
    "USD": 2,
    "EUR": 2,
    "GBP": 2,
    "CHF": 2,
    "CAD": 2,
    "AUD": 2,
    "NZD": 2,
    "SGD": 2,
    "HKD": 2,
    "TWD": 2,
    "CNY": 2,
    "SEK": 2,
    "NOK": 2,
    "DKK": 2,
    "PLN": 2,
    "CZK": 2,
}
DEFAULT_CURRENCY = "KRW"
CURRENCY_CHOICES = [(code, code) for code in EXPONENTS]
# The most a seat may cost, in minor units (a billion won; ten million dollars):
# well inside Postgres' bigint however many seats a booking takes.
MAX_PRICE = 1_000_000_000


def validate_currency(code: str) -> None:
    if code not in EXPONENTS:
        raise ValidationError(
            _("%(code)s is not a currency this service sells in (%(known)s)."),
            params={"code": code, "known": ", ".join(EXPONENTS)},
        )


def major(amount: int, currency: str) -> Decimal:
    """The amount in the currency's major unit (5500 USD cents: 55.00)."""
    exponent = EXPONENTS[currency]
    return Decimal(amount).scaleb(-exponent).quantize(Decimal(1).scaleb(-exponent))


def shown(amount: int, currency: str) -> str:
    """The amount as people read it, with its code: "55,000 KRW", "55.00 USD"."""
    exponent = EXPONENTS[currency]
    return f"{major(amount, currency):,.{exponent}f} {currency}"
