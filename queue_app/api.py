"""The waiting room's JSON endpoints: parse, call a service, shape the envelope."""

from django.conf import settings
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from queue_app import services
from ticketing.errors import envelope, validation_error
from ticketing.ratelimit import rate_limit


def json_object(request: Request) -> dict:
    data = request.data
    if not isinstance(data, dict):
        raise validation_error("The body must be a JSON object.")
    return data


def ok(data: dict) -> Response:
    return Response(envelope(data))


class JoinView(APIView):
    def post(self, request: Request) -> Response:
        event_id = services.parse_event_id(json_object(request).get("eventId"))
        rate_limit(request, "join", settings.RATE_LIMIT_JOIN)
        return ok(services.queue_join(event_id=event_id))


class RejoinView(APIView):
    def post(self, request: Request) -> Response:
        body = json_object(request)
        token = services.parse_token(body.get("token"))
        event_id = services.parse_event_id(body.get("eventId"))
        rate_limit(request, "join", settings.RATE_LIMIT_JOIN)
        return ok(services.queue_rejoin(event_id=event_id, token=token))


class LeaveView(APIView):
    def delete(self, request: Request) -> Response:
        token = services.parse_token(request.query_params.get("token"))
        event_id = services.parse_event_id(request.query_params.get("eventId"))
        rate_limit(request, "leave", settings.RATE_LIMIT_LEAVE)
        return ok(services.queue_leave(event_id=event_id, token=token))


class PollView(APIView):
    def get(self, request: Request) -> Response:
        token = services.parse_token(request.query_params.get("token"))
        event_id = services.parse_event_id(request.query_params.get("eventId"))
        return ok(services.queue_poll(event_id=event_id, token=token))
