"""Sign-up with proof of work in headless Chromium, against the production server
(ticketing/tests/test_browser.py has the browser): the page solves the challenge in
the background and the person signs up as on any day."""

import re

import pytest
from django.contrib.auth import get_user_model

from accounts_app.tests.web import PASSWORD
from queue_app.models import SUGGESTED_PROOF_OF_WORK
from ticketing.tests.browser import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_person_signs_up_while_an_event_asks_for_proof_of_work(page, make_event):  # noqa: F811
    event = make_event(proof_of_work=SUGGESTED_PROOF_OF_WORK)
    page.goto(f"/accounts/signup/?next=/events/{event.event_id}/")
    button = page.get_by_role("button", name="Sign up")
    page.fill("#id_username", "haneul")
    page.fill("#id_password1", PASSWORD)
    page.fill("#id_password2", PASSWORD)
    page.wait_for_function("!document.querySelector('form[data-proof] button').disabled", timeout=30_000)
    assert page.locator("#proof-status").is_hidden()
    assert page.locator("altcha-widget").count() == 0  # nothing left on the page
    shot(page, "signup-proof-of-work")
    button.click()
    page.wait_for_url(re.compile(rf"/events/{event.event_id}/$"))
    assert page.locator(".user").inner_text() == "haneul"
    assert get_user_model().objects.filter(username="haneul").exists()
