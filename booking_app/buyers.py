"""Who a buyer is, for the seat cap per buyer (docs/fairness.md: Seats per buyer).

`email_key` is the one spelling of a mailbox that every count per buyer keys on:
the row's `buyer_key`, which the seat ledger's trigger sums, and `seats_allowed`.
"""

import re
import unicodedata

from django.utils.encoding import punycode

# Mail providers whose rules go further than the "+tag" every address loses, each
# named once: domain -> (the domain its mailboxes are delivered to, dots ignored in
# the local part). Gmail ignores dots and delivers googlemail.com to the same inbox.
PROVIDERS: dict[str, tuple[str, bool]] = {
    "gmail.com": ("gmail.com", True),
    "googlemail.com": ("gmail.com", True),
}

_QUOTED_PAIR = re.compile(r"\\(.)")


def email_key(email: str) -> str:
    """One spelling per mailbox; "" for no email. The rule, in order:

    1. A quoted local part is unquoted: quotes and the backslash of a quoted pair
       are "semantically invisible" (RFC 5322, 3.2.4), so `"foo"@x` is `foo@x`.
    2. The whole address is case-folded. RFC 5321 lets a server tell `Kim@` from
       `kim@`, but no provider a buyer is likely to use does, and a cap that did
       would be beaten by a capital letter; two people whose addresses differ only
       in case would share a cap, which costs less.
    3. The domain is IDNA-encoded (punycode), as Django does to send mail to it:
       `bücher.de`, `BÜCHER.DE` and `xn--bcher-kva.de` are one domain.
    4. A "+tag" is dropped, at every domain: the common sub-address separator of
       Gmail, Outlook.com (outlook, hotmail, live, msn), iCloud, Fastmail, Proton and
       most mail servers' default; a domain where `a+b` is someone other than `a` is
       rare enough to share a cap.
    5. PROVIDERS: dots dropped where the provider ignores them, and the domain its
       aliases deliver to.
    """
    email = unicodedata.normalize("NFC", email.strip())
    local, at, domain = email.rpartition("@")
    if not at or not local:
        return email.casefold()
    if len(local) >= 2 and local[0] == local[-1] == '"':
        local = _QUOTED_PAIR.sub(r"\1", local[1:-1])
    local, domain = local.casefold(), domain.casefold()
    try:
        domain = punycode(domain)
    except UnicodeError:  # an empty or over-long label: not a domain IDNA can spell
        pass
    local = local.split("+", 1)[0] or local
    domain, dotless = PROVIDERS.get(domain, (domain, False))
    if dotless:
        local = local.replace(".", "") or local
    return f"{local}@{domain}"
