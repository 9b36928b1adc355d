"""Who a buyer is, for the seat cap per buyer (docs/fairness.md)."""

# Mail providers that ignore dots in the local part (and deliver googlemail.com
# to the same inbox): one person, many spellings.
_DOTLESS = {"gmail.com": "gmail.com", "googlemail.com": "gmail.com"}


def email_key(email: str) -> str:
    """One spelling per mailbox: lower case, no "+tag", and for Gmail no dots.

    `Foo.Bar+seat2@GoogleMail.com` and `foobar@gmail.com` reach the same inbox, so
    they are one buyer. "" for no email."""
    email = email.strip().lower()
    local, at, domain = email.rpartition("@")
    if not at or not local:
        return email
    local = local.split("+", 1)[0] or local
    if domain in _DOTLESS:
        local, domain = local.replace(".", "") or local, _DOTLESS[domain]
    return f"{local}@{domain}"
