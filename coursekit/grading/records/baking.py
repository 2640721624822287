"""A badge image with the credential baked in (Open Badges 3.0, "Baked Badge", PNG).

Why: a student can upload one image to a profile or a backpack, and software that knows Open
Badges reads the credential out of it. Per the specification the PNG carries one ``iTXt``
chunk with the keyword ``openbadgecredential``, uncompressed, whose text is the compact JWS.
The image itself is drawn here (a medal with a check mark), so nothing is downloaded and no
imaging library is needed; reading checks every chunk's length and CRC and refuses an image
with two credentials in it.
"""

from __future__ import annotations

import re
import struct
import zlib

KEYWORD = b"openbadgecredential"
SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZE_PX = 160
#: A badge image is a few kB; reading stops well before anything that could exhaust memory.
MAX_PNG_BYTES = 4 * 2**20


class BakingError(ValueError):
    """An image that holds no credential we can read; the message says why."""


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _near_segment(x: float, y: float, a: tuple, b: tuple, width: float) -> bool:
    (ax, ay), (bx, by) = a, b
    dx, dy = bx - ax, by - ay
    t = max(0.0, min(1.0, ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy)))
    return (x - ax - t * dx) ** 2 + (y - ay - t * dy) ** 2 <= width * width


def badge_image() -> bytes:
    """A plain PNG medal (RGBA): gold disc, darker rim, white check mark."""
    centre, rows = SIZE_PX / 2, []
    for y in range(SIZE_PX):
        row = bytearray(b"\0")  # filter type 0 (none) for each scanline
        for x in range(SIZE_PX):
            r2 = (x + 0.5 - centre) ** 2 + (y + 0.5 - centre) ** 2
            if r2 > (centre - 2) ** 2:
                pixel = (0, 0, 0, 0)
            elif r2 > (centre - 12) ** 2:
                pixel = (107, 91, 62, 255)
            elif _near_segment(x, y, (48, 84), (70, 106), 8) or _near_segment(
                x, y, (70, 106), (114, 58), 8
            ):
                pixel = (255, 253, 247, 255)
            else:
                pixel = (201, 162, 39, 255)
            row.extend(pixel)
        rows.append(bytes(row))
    header = struct.pack(">IIBBBBB", SIZE_PX, SIZE_PX, 8, 6, 0, 0, 0)
    return (
        SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"".join(rows), 9))
        + _chunk(b"IEND", b"")
    )


def _chunks(png: bytes):
    """(kind, data) of each chunk, checked; BakingError on a damaged or foreign file."""
    if len(png) > MAX_PNG_BYTES:
        raise BakingError("the image is too large to be a badge")
    if not png.startswith(SIGNATURE):
        raise BakingError("this is not a PNG image")
    at = len(SIGNATURE)
    while at < len(png):
        if at + 12 > len(png):
            raise BakingError("the image is cut short")
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        end = at + 12 + length
        if len(data) != length or end > len(png):
            raise BakingError("the image is cut short")
        (crc,) = struct.unpack(">I", png[end - 4 : end])
        if crc != zlib.crc32(kind + data):
            raise BakingError(f"the image's {kind.decode('latin-1')!r} chunk is damaged")
        if at == len(SIGNATURE) and kind != b"IHDR":
            raise BakingError("the image does not start with its header (IHDR)")
        yield kind, data
        if kind == b"IEND":
            if end != len(png):
                raise BakingError("the image has data after its end (IEND)")
            return
        at = end
    raise BakingError("the image has no end (IEND)")


def bake(png: bytes, token: str) -> bytes:
    """``png`` with an uncompressed ``iTXt`` chunk ``openbadgecredential`` holding ``token``,
    after the header; refused if the image already holds a credential."""
    if credential_in(png, missing_ok=True) is not None:
        raise BakingError("the image already holds a credential")
    text = KEYWORD + b"\0" + b"\0\0" + b"\0" + b"\0" + token.encode("utf-8")
    header_end = len(SIGNATURE) + 12 + 13  # IHDR is first and 13 bytes long
    return png[:header_end] + _chunk(b"iTXt", text) + png[header_end:]


_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
#: What a chunk that claims to be (or to hold) a badge says of itself: the Open Badges 3.0
#: keyword, the 2.0 one (``openbadges``), any spelling or case of either.
_CLAIM = re.compile(rb"open[\s_-]?badge", re.IGNORECASE)
#: A compact JWS: three base64url parts; a credential in any other text chunk is a forgery.
_COMPACT_JWS = re.compile(rb"[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")


def _inflate(data: bytes) -> bytes:
    """A compressed text chunk's text, at most MAX_PNG_BYTES of it (no zip bomb)."""
    try:
        return zlib.decompressobj().decompress(data, MAX_PNG_BYTES)
    except zlib.error:
        raise BakingError("a compressed text chunk of the image is damaged") from None


def _text_of(kind: bytes, data: bytes) -> tuple[bytes, bytes]:
    """(keyword, text) of a PNG text chunk, decompressed where it is compressed."""
    keyword, _, rest = data.partition(b"\0")
    if kind == b"tEXt":
        return keyword, rest
    if kind == b"zTXt":
        return keyword, _inflate(rest[1:])
    compressed = rest[:1] == b"\1"
    parts = rest[2:].split(b"\0", 2)
    text = parts[2] if len(parts) == 3 else b""
    return keyword, _inflate(text) if compressed else text


def _the_credential_chunk(kind: bytes, data: bytes) -> bool:
    return kind == b"iTXt" and data.startswith(KEYWORD + b"\0")


def credential_in(png: bytes, missing_ok: bool = False) -> str | None:
    """The text of the ``openbadgecredential`` chunk (a compact JWS), checked to be the
    only one and uncompressed.

    Only an image with exactly one credential and nothing beside it that claims to be one
    is read: a second ``openbadgecredential`` chunk, any other chunk naming Open Badges
    (``openbadges``, another case or chunk type), a compact JWS in any other text chunk, or
    bytes after the image's end are refused, since a reader other than this one might
    take the forged one for the badge."""
    found = []
    for kind, data in _chunks(png):
        if _the_credential_chunk(kind, data):
            rest = data[len(KEYWORD) + 1 :]
            if len(rest) < 2 or rest[0] != 0:
                raise BakingError("the baked credential is compressed, which Open Badges forbids")
            try:
                _language, _translated, text = rest[2:].split(b"\0", 2)
                found.append(text.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                raise BakingError("the baked credential is damaged") from None
            continue
        claims = _CLAIM.search(kind + data) is not None
        if kind in _TEXT_CHUNKS:
            keyword, text = _text_of(kind, data)
            claims = claims or _CLAIM.search(keyword + text) or _COMPACT_JWS.search(text)
        if claims:
            name = kind.decode("latin-1")
            raise BakingError(
                f"the image has a {name!r} chunk that claims to hold a badge credential beside "
                "the one a badge may hold: it is not a genuine coursekit badge"
            )
    if len(found) > 1:
        raise BakingError("the image holds two credentials; a badge holds one")
    if not found and not missing_ok:
        raise BakingError("the image holds no baked credential (no openbadgecredential chunk)")
    return found[0] if found else None
