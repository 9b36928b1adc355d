"""The waiting room's JSON endpoints: parse, call a service, shape the data.

Served from the WSGI environ by ticketing.hotpath (these are the crowd's requests).
"""

from django.conf import settings

from queue_app import services
from ticketing.hotpath import Environ, Route, json_body, query
from ticketing.ratelimit import rate_limit

JOIN, REJOIN, LEAVE, POLL = "/api/queue/join", "/api/queue/rejoin", "/api/queue/leave", "/api/status/poll"


def join(environ: Environ) -> dict:
    event_id = services.parse_event_id(json_body(environ).get("eventId"))
    rate_limit(environ, "join", settings.RATE_LIMIT_JOIN)
    return services.queue_join(event_id=event_id)


def rejoin(environ: Environ) -> dict:
    body = json_body(environ)
    token = services.parse_token(body.get("token"))
    event_id = services.parse_event_id(body.get("eventId"))
    rate_limit(environ, "join", settings.RATE_LIMIT_JOIN)
    return services.queue_rejoin(event_id=event_id, token=token)


def leave(environ: Environ) -> dict:
    q = query(environ)
    token = services.parse_token(q.get("token"))
    event_id = services.parse_event_id(q.get("eventId"))
    rate_limit(environ, "leave", settings.RATE_LIMIT_LEAVE)
    return services.queue_leave(event_id=event_id, token=token)


def poll(environ: Environ) -> dict:
    q = query(environ)
    token = services.parse_token(q.get("token"))
    event_id = services.parse_event_id(q.get("eventId"))
    return services.queue_poll(event_id=event_id, token=token)


ROUTES: dict[str, Route] = {
    JOIN: Route("POST", join),
    REJOIN: Route("POST", rejoin),
    LEAVE: Route("DELETE", leave),
    POLL: Route("GET", poll),
}
