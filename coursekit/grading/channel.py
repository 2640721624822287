"""The pipes between the grader and a hand-in's process: length-prefixed JSON frames.

The grader sends commands (the job, one cell, one test, the end) and the runner answers
each one, echoing its nonce. Frames from the hand-in's side are untrusted: their size is
capped before anything is read, and parsing catches everything (a frame nested ten thousand
deep raises ``RecursionError`` in ``json``, not ``ValueError``). The runner encodes its
answers with :func:`encode_plain`, its own encoder of plain data, so a hand-in that patched
``json`` cannot change what is sent.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 16 * 2**20
MAX_DEPTH = 64


class ChannelError(Exception):
    """The other side broke the protocol (a frame too big, not JSON, or out of turn)."""


class Closed(Exception):
    """The other side closed its end: its process ended."""


class TimedOut(Exception):
    """No frame came before the deadline."""


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` (blocking)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_frame(fd: int, payload: bytes) -> None:
    """Write one frame, all of it (blocking)."""
    write_all(fd, HEADER.pack(len(payload)) + payload)


def send(fd: int, message: dict) -> None:
    """Send a frame of trusted data (the grader's commands)."""
    write_frame(fd, json.dumps(message).encode("utf-8"))


def read_exactly(fd: int, count: int) -> bytes:
    """Blocking read of ``count`` bytes; :class:`Closed` at end of file."""
    chunks, left = [], count
    while left:
        chunk = os.read(fd, min(left, 2**20))
        if not chunk:
            raise Closed()
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int) -> dict:
    """Blocking read of one frame of trusted data (the runner reading the grader's commands)."""
    (size,) = HEADER.unpack(read_exactly(fd, HEADER.size))
    return json.loads(read_exactly(fd, size))


def parse_untrusted(payload: bytes) -> dict:
    """A frame from the hand-in's side as a dict, or :class:`ChannelError`; never raises else."""
    try:
        message = json.loads(payload.decode("utf-8", "surrogatepass"))
    except (ValueError, RecursionError, MemoryError, UnicodeError) as error:
        raise ChannelError(f"a frame that is not JSON ({type(error).__name__})") from None
    if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
        raise ChannelError("a frame without a kind")
    return message


class FrameReader:
    """Reads frames from a non-blocking pipe, with a deadline, never more than the cap."""

    def __init__(self, fd: int, max_frame_bytes: int = MAX_FRAME_BYTES):
        self.fd, self.cap = fd, max_frame_bytes
        os.set_blocking(fd, False)
        self._buffer = bytearray()

    def poll(self, timeout_s: float, also: tuple[int, ...] = ()) -> list[int]:
        """Wait until this pipe or one of ``also`` is readable; the readable ones."""
        readable, _, _ = select.select([self.fd, *also], [], [], max(timeout_s, 0.0))
        return readable

    def next_frame(self, deadline: float, drain=None, drain_fds: tuple[int, ...] = ()) -> dict:
        """The next frame; ``drain(fd)`` is called whenever one of ``drain_fds`` is readable
        (the hand-in's output, which must be read or it blocks)."""
        while True:
            frame = self._take()
            if frame is not None:
                return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut()
            for fd in self.poll(min(left, 1.0), drain_fds):
                if fd == self.fd:
                    self._fill()
                elif drain is not None:
                    drain(fd)

    def _fill(self) -> None:
        try:
            chunk = os.read(self.fd, 2**20)
        except BlockingIOError:
            return
        if not chunk:
            raise Closed()
        self._buffer += chunk
        if len(self._buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self._buffer)
            if size > self.cap:
                raise ChannelError(f"a frame of {size} bytes (at most {self.cap})")

    def _take(self) -> dict | None:
        if len(self._buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buffer)
        if size > self.cap:
            raise ChannelError(f"a frame of {size} bytes (at most {self.cap})")
        if len(self._buffer) < HEADER.size + size:
            return None
        payload = bytes(self._buffer[HEADER.size : HEADER.size + size])
        del self._buffer[: HEADER.size + size]
        return parse_untrusted(payload)


# ---------------------------------------------------------------- the runner's own encoder

_escape = json.encoder.encode_basestring_ascii  # the C function, taken before any hand-in code
_float_repr = float.__repr__
_int_repr = int.__repr__


class NotPlainData(TypeError):
    """Outputs that are not plain JSON data (exact dict, list, str, int, float, bool, None)."""


def encode_plain(value, max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """JSON for plain data, checked type by exact type, without recursion or ``json``.

    Subclasses (a ``dict`` or ``float`` with methods of a hand-in's own) are refused rather
    than trusted; so are depths over :data:`MAX_DEPTH` and results over ``max_bytes``.
    """
    out: list[str] = []
    size = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is _Token:
            piece = item.text
        elif depth > MAX_DEPTH:
            raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
        elif item is None:
            piece = "null"
        elif item is True:
            piece = "true"
        elif item is False:
            piece = "false"
        elif kind is int:
            piece = _int_repr(item)
        elif kind is float:
            piece = _float_repr(item) if math.isfinite(item) else _NON_FINITE[_float_repr(item)]
        elif kind is str:
            piece = _escape(item)
        elif kind is list or kind is tuple:
            piece = "["
            parts: list = []
            for index, element in enumerate(item):
                if index:
                    parts.append(_COMMA)
                parts.append((element, depth + 1))
            stack.append((_CLOSE_LIST, 0))
            stack.extend(_wrap(p) for p in reversed(parts))
        elif kind is dict:
            piece = "{"
            parts = []
            for index, (key, element) in enumerate(item.items()):
                if type(key) is not str:
                    raise NotPlainData("a dict key that is not a str")
                if index:
                    parts.append(_COMMA)
                parts.append(_Token(_escape(key) + ":"))
                parts.append((element, depth + 1))
            stack.append((_CLOSE_DICT, 0))
            stack.extend(_wrap(p) for p in reversed(parts))
        else:
            raise NotPlainData(f"a {kind.__name__}")
        out.append(piece)
        size += len(piece)
        if size > max_bytes:
            raise NotPlainData(f"more than {max_bytes} bytes")
    return "".join(out).encode("ascii")


class _Token:
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


_COMMA, _CLOSE_LIST, _CLOSE_DICT = _Token(","), _Token("]"), _Token("}")
_NON_FINITE = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}


def _wrap(part):
    return (part, 0) if type(part) is _Token else part
