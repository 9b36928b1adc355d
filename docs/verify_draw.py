#!/usr/bin/env python3
"""Check a waiting room's draw from what it publishes, with nothing but Python 3.

The service draws the order of everyone who joined before an event's scheduled
start (docs/draw.md). Before the start it shows a commitment, the SHA-256 of a
secret seed; after it, the seed and every receipt in drawn order. This script
recomputes the order from those alone and says whether it matches:

    python3 verify_draw.py --url https://tickets.example --event EVENT --commitment HEX
    python3 verify_draw.py --seed HEX --receipts list.txt --commitment HEX
    (add --receipt YOURS to print your own position)

The algorithm, restated here on purpose so that checking needs none of the
service's code:

    receipt     = 8 bytes (16 hex digits), one per place of the pre-queue; the
                  published list gives each with its position, in any order
    list        = the receipts sorted (as bytes): an order nobody chooses
    listDigest  = SHA-256(the list, concatenated as bytes)
    finalSeed   = SHA-256(seed || listDigest)
    words       = SHA-256(finalSeed || 0) || SHA-256(finalSeed || 1) || ...
                  (counters 8 bytes big-endian), read as 64-bit big-endian numbers
    order       = the list shuffled by Fisher-Yates: for i = P-1 down to 1, the
                  k-th step (k from 0) swaps places i and words[k] mod (i+1);
                  position 1 is place 0 afterwards

Exit status 0 when the draw checks out, 1 when it does not, 2 on bad input.
"""

import argparse
import hashlib
import json
import sys
import urllib.parse
import urllib.request


def drawn_positions(seed: bytes, receipts: list[bytes]) -> list[int]:
    """Each receipt's drawn position, in the order given (which changes nothing:
    the draw runs over the receipts sorted)."""
    count = len(receipts)
    order = sorted(range(count), key=receipts.__getitem__)
    final = hashlib.sha256(seed + hashlib.sha256(b"".join(receipts[i] for i in order)).digest()).digest()
    stream = b"".join(hashlib.sha256(final + c.to_bytes(8, "big")).digest() for c in range((count + 2) // 4))
    for k, i in enumerate(range(count - 1, 0, -1)):
        j = int.from_bytes(stream[8 * k : 8 * k + 8], "big") % (i + 1)
        order[i], order[j] = order[j], order[i]
    positions = [0] * count
    for position, index in enumerate(order, 1):
        positions[index] = position
    return positions


def read_list(lines: list[str]) -> tuple[list[bytes], list[int]]:
    """The published "receipt position" lines."""
    receipts, positions = [], []
    for line in lines:
        receipt, position = line.split()
        receipts.append(bytes.fromhex(receipt))
        positions.append(int(position))
    return receipts, positions


def fetch(url: str, event: str) -> tuple[dict, list[str]]:
    query = urllib.parse.urlencode({"eventId": event})
    with urllib.request.urlopen(f"{url}/api/queue/draw?{query}") as answer:
        published = json.load(answer)["data"]
    with urllib.request.urlopen(f"{url}/api/queue/draw/receipts?{query}") as answer:
        lines = answer.read().decode().splitlines()
    return published, lines


def check(seed: bytes, receipts: list[bytes], positions: list[int], commitment: str | None) -> list[str]:
    """What is wrong with the draw; empty when it checks out."""
    wrong = []
    if commitment is not None and hashlib.sha256(seed).hexdigest() != commitment.lower():
        wrong.append("the seed does not hash to the commitment")
    if len(set(receipts)) != len(receipts):
        wrong.append("a receipt is listed twice")
    drawn = drawn_positions(seed, receipts)
    off = sum(1 for mine, theirs in zip(drawn, positions, strict=False) if mine != theirs)
    if off:
        wrong.append(f"{off} positions are not the ones the seed and the list draw")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="the service, e.g. https://tickets.example")
    parser.add_argument("--event", help="the event id (with --url)")
    parser.add_argument("--seed", help="the published seed, hex (instead of --url)")
    parser.add_argument("--receipts", help="the published list, a file (instead of --url)")
    parser.add_argument("--commitment", help="the commitment you saw before the start, hex")
    parser.add_argument("--receipt", help="your receipt: prints its position")
    args = parser.parse_args(argv)
    try:
        if args.url:
            if not args.event:
                parser.error("--url needs --event")
            published, lines = fetch(args.url.rstrip("/"), args.event)
            if published.get("status") != "DRAWN":
                print(f"not drawn yet: {published.get('status')}")
                return 2
            seed = bytes.fromhex(published["seed"])
        elif args.seed and args.receipts:
            seed = bytes.fromhex(args.seed)
            with open(args.receipts, encoding="utf-8") as f:
                lines = f.read().splitlines()
        else:
            parser.error("give --url and --event, or --seed and --receipts")
        receipts, positions = read_list(lines)
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read the draw: {exc}")
        return 2
    if args.commitment is None:
        print("note: without --commitment, nothing shows the seed was fixed before the start")
    wrong = check(seed, receipts, positions, args.commitment)
    for problem in wrong:
        print(f"REFUTED: {problem}")
    if not wrong:
        print(f"CONFIRMED: {len(receipts)} places at the positions the seed draws")
    if args.receipt:
        try:
            mine = positions[receipts.index(bytes.fromhex(args.receipt))]
            print(f"your receipt {args.receipt}: position {mine} of {len(receipts)}")
        except ValueError:
            print(f"your receipt {args.receipt} is not in the list")
            return 1
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
