"""The API's body parser. DRF imports it while it loads its views, so it lives
apart from ticketing/api.py, which imports them."""

from typing import Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, but a body nested deeper than Python's parser recurses
    (`[[[[...]]]]` fits in 10 KB) is a malformed body, not a server fault."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
