"""The fast lane serves a view by the declarations it honours, or not at all.

A fast view that declares a permission, renderer, parser, authentication, content
negotiation or versioning other than the lane's (ticketing/fastlane.py's HONOURED),
or that overrides a method of APIView's that reads them, stops the server's start-up
with a message naming the view and the declaration: served, it would answer by rules
the lane ignores. The Accept headers the lane answers without negotiating are those
DRF answers in the JSON the lane writes.
"""

import asyncio

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from django.urls import path
from rest_framework import serializers
from rest_framework.authentication import BasicAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.versioning import QueryParameterVersioning

from queue_app.api import PollView
from ticketing import fastlane
from ticketing.parsers import JSONParser

# The URL conf of the start-up test (ROOT_URLCONF = this module).
urlpatterns: list = []


class OwnNegotiation(DefaultContentNegotiation):
    pass


UNHONOURED = [
    ("permission_classes", [AllowAny, IsAuthenticated], r"\[AllowAny, IsAuthenticated\]"),
    ("permission_classes", [IsAuthenticated], r"\[IsAuthenticated\]"),
    ("renderer_classes", [JSONRenderer, BrowsableAPIRenderer], r"\[JSONRenderer, BrowsableAPIRenderer\]"),
    ("renderer_classes", [BrowsableAPIRenderer], r"\[BrowsableAPIRenderer\]"),
    ("parser_classes", [JSONParser, FormParser], r"\[JSONParser, FormParser\]"),
    ("authentication_classes", [BasicAuthentication], r"\[BasicAuthentication\]"),
    ("versioning_class", QueryParameterVersioning, "QueryParameterVersioning"),
    ("content_negotiation_class", OwnNegotiation, "OwnNegotiation"),
]


def _guarded(**declared: object) -> type:
    return type("GuardedPollView", (PollView,), {"__module__": __name__, **declared})


@pytest.mark.parametrize(("name", "value", "shown"), UNHONOURED, ids=[f"{n}-{s}" for n, _, s in UNHONOURED])
def test_a_fast_view_declaring_what_the_lane_does_not_honour_is_refused(name, value, shown) -> None:
    view = _guarded(**{name: value})
    where = rf"{__name__}\.GuardedPollView\.{name} = {shown}: the fast lane honours only"
    with pytest.raises(ImproperlyConfigured, match=where):
        fastlane.find_routes([path("api/guarded", view.as_view())])


@pytest.mark.parametrize("method", ["get_permissions", "initial", "get_renderers"])
def test_a_fast_view_overriding_how_drf_reads_its_declarations_is_refused(method) -> None:
    view = _guarded(**{method: lambda self, *args, **kwargs: []})
    with pytest.raises(ImproperlyConfigured, match=rf"GuardedPollView\.{method}\(\) is overridden"):
        fastlane.find_routes([path("api/guarded", view.as_view())])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("permission_classes", [AllowAny]),
        ("permission_classes", []),
        ("renderer_classes", (JSONRenderer,)),
        ("parser_classes", [JSONParser]),
    ],
)
def test_a_fast_view_declaring_what_the_lane_does_is_served(name, value) -> None:
    view = _guarded(**{name: value})
    assert list(fastlane.find_routes([path("api/guarded", view.as_view())])) == ["/api/guarded"]


def test_the_server_does_not_start_with_a_view_the_lane_does_not_honour() -> None:
    """At start-up (the ASGI lifespan, "on" in ticketing/gunicorn_conf.py, which makes
    uvicorn exit when it fails), not at the first request."""
    urlpatterns[:] = [path("api/guarded", _guarded(permission_classes=[IsAuthenticated]).as_view())]
    lane = fastlane.FastLane(app=None)  # type: ignore[arg-type]
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "lifespan.startup"}

    async def send(message: dict) -> None:
        sent.append(message)

    try:
        with override_settings(ROOT_URLCONF=__name__):
            with pytest.raises(ImproperlyConfigured, match=r"GuardedPollView\.permission_classes"):
                asyncio.run(lane({"type": "lifespan"}, receive, send))
    finally:
        urlpatterns.clear()
    assert sent == []  # never "lifespan.startup.complete"


@pytest.mark.parametrize("accept", [None, *sorted(fastlane._PLAIN_ACCEPTS)])
def test_the_accept_headers_the_lane_does_not_negotiate_get_its_json_from_drf(accept) -> None:
    assert fastlane._negotiate(accept, None) is True


class _Shaping(serializers.JSONField):
    def to_representation(self, value: object) -> object:
        return {"shaped": value}


def test_an_object_is_written_as_it_is_only_where_drf_writes_it_so() -> None:
    """The poll's message (a dict decoded once per process) goes out as it is, with no
    call: DRF's JSONField writes an object unchanged. A binary one writes a string, and
    a field that shapes its value is asked every time."""
    assert fastlane._shown_as_is(PollView.Output().fields["message"]) is dict
    message = {"id": 1, "ko": "안내", "en": "Notice", "at": 0}
    assert PollView.Output().fields["message"].to_representation(message) is message
    assert fastlane._shown_as_is(serializers.JSONField(binary=True)) is None
    assert fastlane._shown_as_is(_Shaping()) is None
