"""How often each person polls: the seed's adaptive table, the further back the less
often, with jitter so that a crowd that joined in the same second does not ask in
the same millisecond forever."""

import random

# The seed's adaptive polling: the further back, the less often.
_POLL_STEPS_MS = ((100_000, 10_000), (10_000, 5_000), (1_000, 3_000), (100, 2_000))
_ACTIVE_POLL_MS = 2_000
# Before a scheduled start: the seed's slowest step while the start is far; then one
# poll spread over the first seconds after it (the draw takes a few), so that the
# whole pre-queue does not ask in the start's millisecond. While drawing: soon.
_PRE_QUEUE_POLL_MS = 10_000
_AFTER_START_SPREAD_MS = (500, 3_000)
_DRAWING_POLL_MS = (1_000, 3_000)


def next_poll_ms(status: str, rank: int | None, until_start_ms: int | None = None) -> int:
    """Base interval of the seed's table with +/-20 % jitter, so that a crowd that
    joined in the same second does not poll in the same millisecond forever; before
    a scheduled start, a time spread over the seconds after it."""
    if status == "PRE_QUEUE":
        until = max(until_start_ms or 0, 0)
        if until > _PRE_QUEUE_POLL_MS * 1.5:
            return int(_PRE_QUEUE_POLL_MS * random.uniform(0.8, 1.2))
        return until + random.randint(*_AFTER_START_SPREAD_MS)
    if status == "DRAWING":
        return random.randint(*_DRAWING_POLL_MS)
    if status == "ACTIVE":
        base = _ACTIVE_POLL_MS
    elif status == "WAITING":
        base = 1_000
        for above, ms in _POLL_STEPS_MS:
            if rank is not None and rank > above:
                base = ms
                break
    else:
        return 0  # nothing left to wait for
    return int(base * random.uniform(0.8, 1.2))
