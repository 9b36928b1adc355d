#!/usr/bin/env python3
"""Check a waiting room's draw from what it publishes, with nothing but Python 3.

The service draws the order of everyone who joined before an event's scheduled
start (docs/draw.md). Before the start it shows a commitment, the SHA-256 of a
secret seed; after it, the seed and every receipt with its drawn position. This
script recomputes the order from those alone and says whether it matches:

    python3 verify_draw.py --url https://tickets.example --event EVENT --commitment HEX
    python3 verify_draw.py --seed HEX --receipts list.txt --commitment HEX
    (add --receipt YOURS to print your own position)

A list can be redrawn consistently without someone's receipt, or with one more:
only a receipt the service signed shows it. With --receipt-file, the file the
waiting room saves ("Save my signed receipt"), the script also checks that the
service's key signed it (the key the draw publishes, or --public-key), that the
list holds the receipt at the position the seed draws, and, for a receipt signed
after the draw, that this is the position and the list the service signed:

    python3 verify_draw.py --url https://tickets.example --event EVENT --receipt-file receipt.json
    python3 verify_draw.py --seed HEX --receipts list.txt --public-key HEX --receipt-file receipt.json

The algorithm, restated here on purpose so that checking needs none of the
service's code (docs/draw.md gives every input byte by byte, with a worked example):

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

A receipt file is a JSON object: eventId, receipt, commitment, and once drawn size,
listDigest, position; publicKey (32 bytes, hex) and signature (64 bytes, hex), an
Ed25519 signature (RFC 8032) of these lines, each ending in a newline:

    waiting room draw receipt v1
    eventId <eventId>
    receipt <receipt>
    commitment <commitment>
    size <size>                 (these three once drawn)
    listDigest <listDigest>
    position <position>

Exit status 0 when the draw checks out, 1 when it does not (each problem on a line
"REFUTED: ..."), 2 when it cannot be checked: bad input, or a receipt file whose
signature is not the service's, which proves nothing.
"""

import argparse
import hashlib
import json
import re
import sys
import urllib.parse
import urllib.request


def drawn_positions(seed: bytes, receipts: list[bytes]) -> list[int]:
    """Each receipt's drawn position, in the order given (which changes nothing:
    the draw runs over the receipts sorted)."""
    count = len(receipts)
    order = sorted(range(count), key=receipts.__getitem__)
    final = final_seed(seed, list_digest(receipts))
    stream = b"".join(hashlib.sha256(final + c.to_bytes(8, "big")).digest() for c in range((count + 2) // 4))
    for k, i in enumerate(range(count - 1, 0, -1)):
        j = int.from_bytes(stream[8 * k : 8 * k + 8], "big") % (i + 1)
        order[i], order[j] = order[j], order[i]
    positions = [0] * count
    for position, index in enumerate(order, 1):
        positions[index] = position
    return positions


def list_digest(receipts: list[bytes]) -> bytes:
    return hashlib.sha256(b"".join(sorted(receipts))).digest()


def final_seed(seed: bytes, digest: bytes) -> bytes:
    """The shuffle's seed: mixes in the list, which nobody knows before the start."""
    return hashlib.sha256(seed + digest).digest()


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


def check(
    seed: bytes, receipts: list[bytes], positions: list[int], drawn: list[int], commitment: str | None
) -> list[str]:
    """What is wrong with the draw; empty when it checks out."""
    wrong = []
    if commitment is not None and hashlib.sha256(seed).hexdigest() != commitment.lower():
        wrong.append("the seed does not hash to the commitment")
    if len(set(receipts)) != len(receipts):
        wrong.append("a receipt is listed twice")
    off = sum(1 for mine, theirs in zip(drawn, positions, strict=False) if mine != theirs)
    if off:
        wrong.append(f"{off} positions are not the ones the seed and the list draw")
    return wrong


# --- A signed receipt ------------------------------------------------------------

_HEX = {"receipt": 16, "commitment": 64, "listDigest": 64, "publicKey": 64, "signature": 128}
STATEMENT = ("eventId", "receipt", "commitment", "size", "listDigest", "position")


def read_receipt(text: str) -> dict:
    """A receipt file's fields, checked for shape (ValueError says what is wrong)."""
    held = json.loads(text)
    if isinstance(held, dict) and "data" in held:  # the API's whole answer, saved as it came
        held = held["data"]
    if not isinstance(held, dict):
        raise ValueError("a receipt file is a JSON object")
    if not isinstance(held.get("eventId"), str) or not held["eventId"]:
        raise ValueError("the receipt file has no eventId")
    for name, digits in _HEX.items():
        value = held.get(name)
        if value is None and name == "listDigest":
            continue
        if not isinstance(value, str) or not re.fullmatch(f"[0-9a-f]{{{digits}}}", value):
            raise ValueError(f"the receipt file's {name} is not {digits} hexadecimal digits")
    drawn = [held.get(name) is not None for name in ("size", "listDigest", "position")]
    if any(drawn) and not all(drawn):
        raise ValueError("the receipt file has some of size, listDigest and position, not all three")
    for name in ("size", "position"):
        if held.get(name) is not None and (type(held[name]) is not int or held[name] < 0):
            raise ValueError(f"the receipt file's {name} is not a whole number")
    return held


def statement(held: dict) -> bytes:
    """The text the service signed (see the top of this file)."""
    named = [f"{name} {held[name]}" for name in STATEMENT if held.get(name) is not None]
    return "".join(f"{line}\n" for line in ("waiting room draw receipt v1", *named)).encode()


def check_receipt(
    held: dict, seed: bytes, receipts: list[bytes], positions: list[int], drawn: list[int]
) -> list[str]:
    """What the published draw contradicts of a receipt the service signed."""
    mine = held["receipt"]
    wrong = []
    if hashlib.sha256(seed).hexdigest() != held["commitment"]:
        wrong.append("the seed does not hash to the commitment the service signed in your receipt")
    try:
        at = receipts.index(bytes.fromhex(mine))
    except ValueError:
        wrong.append(f"the service signed receipt {mine} as a place of this draw; the list leaves it out")
        return wrong
    if positions[at] != drawn[at]:
        wrong.append(f"the list puts receipt {mine} at position {positions[at]}; the seed draws {drawn[at]}")
    if held.get("position") is None:
        return wrong
    if held["size"] != len(receipts):
        wrong.append(f"the service signed a draw of {held['size']} places; the list has {len(receipts)}")
    if held["listDigest"] != list_digest(receipts).hex():
        wrong.append("the list is not the one the service signed in your receipt (another digest)")
    if held["position"] != drawn[at]:
        wrong.append(
            f"the service signed position {held['position']} for receipt {mine}; "
            f"the seed and the list draw it at {drawn[at]}"
        )
    return wrong


# Ed25519 signature verification, after RFC 8032 section 6 (Python's standard library
# has none): points in extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, x*y = T/Z.
_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _add(a: tuple, b: tuple) -> tuple:
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    p, q = (y1 - x1) * (y2 - x2) % _P, (y1 + x1) * (y2 + x2) % _P
    r, s = 2 * t1 * t2 * _D % _P, 2 * z1 * z2 % _P
    e, f, g, h = q - p, s - r, s + r, q + p
    return e * f % _P, g * h % _P, f * g % _P, e * h % _P


def _times(n: int, point: tuple) -> tuple:
    total = (0, 1, 1, 0)
    while n:
        if n & 1:
            total = _add(total, point)
        point, n = _add(point, point), n >> 1
    return total


def _x(y: int, sign: int) -> int | None:
    if y >= _P:
        return None
    xx = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if xx == 0:
        return None if sign else 0
    x = pow(xx, (_P + 3) // 8, _P)
    if (x * x - xx) % _P:
        x = x * _SQRT_M1 % _P
    if (x * x - xx) % _P:
        return None
    return _P - x if x & 1 != sign else x


def _point(encoded: bytes) -> tuple | None:
    number = int.from_bytes(encoded, "little")
    y, sign = number & ((1 << 255) - 1), number >> 255
    x = _x(y, sign)
    return None if x is None else (x, y, 1, x * y % _P)


_BASE = _point((4 * pow(5, _P - 2, _P) % _P).to_bytes(32, "little"))


def ed25519_valid(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Whether `signature` is the holder of `public_key`'s signature of `message`."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    a, r, s = _point(public_key), _point(signature[:32]), int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= _L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public_key + message).digest(), "little") % _L
    (x1, y1, z1, _), (x2, y2, z2, _) = _times(s, _BASE), _add(r, _times(h, a))
    return (x1 * z2 - x2 * z1) % _P == 0 and (y1 * z2 - y2 * z1) % _P == 0  # [s]B == R + [h]A


def receipt_unusable(held: dict, public_key: str | None, event: str | None) -> str | None:
    """Why a receipt file proves nothing here (None when its signature is the service's)."""
    if public_key is None:
        return "the service's public key is needed to check it: give --url, or --public-key"
    if event is not None and held["eventId"] != event:
        return f"it is a receipt of event {held['eventId']!r}, not {event!r}"
    if held["publicKey"] != public_key.lower():
        return f"it was signed with the key {held['publicKey']}, not the service's {public_key.lower()}"
    if not ed25519_valid(bytes.fromhex(public_key), statement(held), bytes.fromhex(held["signature"])):
        return "its signature is not the service's: the file was changed, or not made by the service"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="the service, e.g. https://tickets.example")
    parser.add_argument("--event", help="the event id (with --url)")
    parser.add_argument("--seed", help="the published seed, hex (instead of --url)")
    parser.add_argument("--receipts", help="the published list, a file (instead of --url)")
    parser.add_argument("--commitment", help="the commitment you saw before the start, hex")
    parser.add_argument("--receipt", help="your receipt: prints its position")
    parser.add_argument("--receipt-file", help="your signed receipt (a JSON file): checked against the draw")
    parser.add_argument("--public-key", help="the service's public key, hex (--url reads the published one)")
    args = parser.parse_args(argv)
    try:
        public_key = args.public_key
        if args.url:
            if not args.event:
                parser.error("--url needs --event")
            published, lines = fetch(args.url.rstrip("/"), args.event)
            if published.get("status") != "DRAWN":
                print(f"not drawn yet: {published.get('status')}")
                return 2
            seed = bytes.fromhex(published["seed"])
            public_key = public_key or published.get("publicKey")
        elif args.seed and args.receipts:
            seed = bytes.fromhex(args.seed)
            with open(args.receipts, encoding="utf-8") as f:
                lines = f.read().splitlines()
        else:
            parser.error("give --url and --event, or --seed and --receipts")
        receipts, positions = read_list(lines)
        held = None
        if args.receipt_file:
            with open(args.receipt_file, encoding="utf-8") as f:
                held = read_receipt(f.read())
    except (OSError, ValueError, KeyError) as exc:
        print(f"cannot read the draw: {exc}")
        return 2
    if held is not None:
        unusable = receipt_unusable(held, public_key, args.event if args.url else None)
        if unusable:
            print(f"cannot use the receipt file: {unusable}")
            return 2
        print(f"your receipt {held['receipt']} is signed by the service's key")
    if args.commitment is None and held is None:
        print("note: without --commitment, nothing shows the seed was fixed before the start")
    drawn = drawn_positions(seed, receipts)
    wrong = check(seed, receipts, positions, drawn, args.commitment)
    if held is not None:
        wrong += check_receipt(held, seed, receipts, positions, drawn)
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
    if held is not None and not wrong:
        mine = positions[receipts.index(bytes.fromhex(held["receipt"]))]
        print(f"your receipt {held['receipt']}: position {mine} of {len(receipts)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
