"""A real SMTP server for the tests (aiosmtpd, in the test's process), which keeps
what it is sent: Django's SMTP backend delivers to it as to any mail server."""

import email
import email.policy
import threading
import time
from email.message import EmailMessage

from aiosmtpd.controller import Controller

from ticketing.servers import free_port


class Mailbox:
    def __init__(self) -> None:
        self.messages: list[tuple[list[str], EmailMessage]] = []
        self.refuse = 0  # how many recipients to turn away next ("451 try again later")
        self.refused = 0
        self._arrived = threading.Condition()
        self.controller = Controller(self, hostname="127.0.0.1", port=free_port())

    @property
    def url(self) -> str:
        """The EMAIL_URL that sends here."""
        return f"smtp://127.0.0.1:{self.controller.port}"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options) -> str:  # noqa: N802
        if self.refuse > 0:
            self.refuse -= 1
            self.refused += 1
            return "451 4.3.0 Try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 (aiosmtpd's name)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self._arrived:
            self.messages.append((list(envelope.rcpt_tos), message))
            self._arrived.notify_all()
        return "250 Message accepted for delivery"

    def wait_for(self, address: str, seconds: float = 30) -> EmailMessage:
        """The first message to `address` (its case aside: Django writes domains in
        lower case), once it has arrived."""
        deadline = time.monotonic() + seconds
        with self._arrived:
            while True:
                for recipients, message in self.messages:
                    if address.lower() in (r.lower() for r in recipients):
                        return message
                left = deadline - time.monotonic()
                assert left > 0, f"no mail to {address} in {seconds} s"
                self._arrived.wait(left)
