"""The references every figure is compared with: bare Django and one Redis GET (the
baseline), and the poll in a raw ASGI app (the Python ceiling, ceiling.py)."""
