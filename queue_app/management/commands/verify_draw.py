from django.core.management.base import BaseCommand, CommandError, CommandParser

from queue_app import draw
from queue_app.models import Draw, commitment
from ticketing import store


class Command(BaseCommand):
    help = (
        "Check an event's draw (docs/draw.md): the seed against its commitment, the "
        "published positions against those the seed and the list draw, and the line "
        "in Redis against the positions. --seed/--receipts check other copies (say, "
        "what someone downloaded) instead of the published ones."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("event_id")
        parser.add_argument("--commitment", help="the commitment seen before the start (hex)")
        parser.add_argument("--seed", help="a seed to check instead of the published one (hex)")
        parser.add_argument(
            "--receipts", help='a "receipt position" list to check instead of the published one'
        )

    def handle(self, *args, **opts) -> None:
        event_id = opts["event_id"]
        found = Draw.objects.select_related("event").filter(event__event_id=event_id).first()
        if found is None or found.drawn_at is None:
            raise CommandError(f"{event_id}: no draw has happened")
        try:
            seed = bytes.fromhex(opts["seed"]) if opts["seed"] else bytes(found.seed)
            if opts["receipts"]:
                with open(opts["receipts"], encoding="utf-8") as f:
                    pairs = [line.split() for line in f.read().splitlines()]
                entries = [(bytes.fromhex(receipt), int(position)) for receipt, position in pairs]
            else:
                entries = list(draw.drawn_list(found).entries())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the draw: {exc}") from None

        receipts = [receipt for receipt, _ in entries]
        listed = [position for _, position in entries]
        wrong = []
        if commitment(seed) != (opts["commitment"] or found.commitment).lower():
            wrong.append("the seed does not hash to the commitment")
        if len(receipts) != found.size or len(set(receipts)) != len(receipts):
            wrong.append(
                f"the list has {len(receipts)} receipts ({len(set(receipts))} distinct), "
                f"the draw had {found.size}"
            )
        off = sum(
            1 for mine, theirs in zip(draw.positions(seed, receipts), listed, strict=False) if mine != theirs
        )
        if off:
            wrong.append(f"{off} positions are not the ones the seed and the list draw")
        # The line knows places by arrival number: the draw's receipts in the order they joined.
        given = dict(entries)
        by_number = [given.get(receipt) for receipt, _ in draw.drawn_list(found).entries()]
        in_line, astray = _line_agrees(event_id, by_number)
        if astray:
            wrong.append(f"{astray} places waiting in the line are not at their drawn position")
        for problem in wrong:
            self.stderr.write(f"REFUTED: {problem}")
        if wrong:
            raise CommandError(f"{event_id}: the draw does not check out")
        self.stdout.write(
            f"CONFIRMED: {len(receipts)} places at the positions the seed draws; "
            f"{in_line} places still in the line stand at them"
        )


def _line_agrees(event_id: str, listed: list[int | None]) -> tuple[int, int]:
    """The pre-queue places still in the line, and how many of them do not stand at
    their drawn position: the line serves places in order (lua/admit.lua), and a
    pre-queue token's place is its number's entry in `drawpos`, which must be the
    position listed for that number's receipt (`listed`: by number, from 1)."""
    k = store.event_keys(event_id)
    client = store.client()
    popped = int(client.get(k.popped) or 0)
    table = client.get(k.drawpos) or b""
    placed = [int.from_bytes(table[i : i + 4], "big") for i in range(0, len(table), 4)]
    waiting = [i for i, place in enumerate(placed) if place > popped]
    astray = sum(1 for i in waiting if i >= len(listed) or listed[i] != placed[i])
    return len(waiting), astray
