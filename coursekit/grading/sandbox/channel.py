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
MAX_FRAME_BYTES = 4 * 2**20
MAX_OUTPUTS_BYTES = 2**20  # one test's outputs; the course's largest are about 90 kB
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


def payload_sender(fd: int, lock):
    """A sender of whole frames built only from objects taken now (``os.write``, the header's
    ``pack`` and ``lock``): whatever a hand-in later patches in ``os`` or this module, what
    the runner sends still goes out whole on ``fd``, one frame at a time."""
    write, pack = os.write, HEADER.pack

    def send_payload(payload: bytes) -> None:
        data = pack(len(payload)) + payload
        with lock:
            while data:
                data = data[write(fd, data) :]

    return send_payload


def flag_sender(fd: int, lock):
    """:func:`payload_sender` for flags, with the C escaper taken now: no encoder a hand-in
    could have patched stands between a flag and the grader."""
    send_payload, escape = payload_sender(fd, lock), _escape

    def send_flag(what: str) -> None:
        send_payload(('{"kind": "flag", "what": ' + escape(what) + "}").encode("ascii"))

    return send_flag


def send(fd: int, message: dict) -> None:
    """Send a frame of trusted data (blocking)."""
    write_frame(fd, json.dumps(message).encode("utf-8"))


def send_by(fd: int, message: dict, deadline: float) -> None:
    """Send a frame of trusted data (the grader's commands) on a pipe that a hand-in may have
    stopped reading: :class:`TimedOut` at ``deadline`` rather than waiting forever."""
    payload = json.dumps(message).encode("utf-8")
    view = memoryview(HEADER.pack(len(payload)) + payload)
    os.set_blocking(fd, False)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut() from None
            select.select([], [fd], [], min(left, 1.0))


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


def parse_outputs(text) -> dict | None:
    """A test's outputs, sent as JSON text and parsed only when judged (one at a time: a
    hand-in's millions of tiny objects never pile up); None if they are not a JSON object."""
    if not isinstance(text, str) or len(text) > 2 * MAX_OUTPUTS_BYTES:
        return None
    try:
        outputs = json.loads(text)
    except (ValueError, RecursionError, MemoryError):
        return None
    return outputs if isinstance(outputs, dict) else None


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

    def answered_within(self, seconds: float) -> bool:
        """Whether something came within ``seconds`` (read or not): a frame already buffered,
        or the pipe readable."""
        return bool(self._buffer) or bool(self.poll(seconds))

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

_escape = json.encoder.encode_basestring_ascii  # the C function, taken at import
_isfinite = math.isfinite
_float_repr = float.__repr__
_int_repr = int.__repr__


class NotPlainData(TypeError):
    """Outputs that are not plain JSON data (exact dict, list, str, int, float, bool, None)."""


def encode_plain(value, max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """JSON for plain data, checked type by exact type, without recursion or ``json``.

    Subclasses (a ``dict`` or ``float`` with methods of a hand-in's own) are refused rather
    than trusted; so are depths over :data:`MAX_DEPTH` and results over ``max_bytes``, as
    soon as the output reaches it (a list of millions costs no more than ``max_bytes``).
    """
    out: list[str] = []
    size = 0
    stack: list[list] = []  # [iterator, closing bracket, is a dict, first item, depth]

    def emit(piece: str) -> None:
        nonlocal size
        out.append(piece)
        size += len(piece)
        if size > max_bytes:
            raise NotPlainData(f"more than {max_bytes} bytes")

    def open_item(item, depth: int) -> None:
        kind = type(item)
        if depth > MAX_DEPTH:
            raise NotPlainData(f"nested deeper than {MAX_DEPTH}")
        if item is None:
            emit("null")
        elif item is True:
            emit("true")
        elif item is False:
            emit("false")
        elif kind is int:
            emit(_int_repr(item))
        elif kind is float:
            emit(_float_repr(item) if _isfinite(item) else _NON_FINITE[_float_repr(item)])
        elif kind is str:
            emit(_escape(item))
        elif kind is list or kind is tuple:
            emit("[")
            stack.append([iter(item), "]", False, True, depth + 1])
        elif kind is dict:
            emit("{")
            stack.append([iter(item.items()), "}", True, True, depth + 1])
        else:
            raise NotPlainData(f"a {kind.__name__}")

    open_item(value, 0)
    while stack:
        frame = stack[-1]
        try:
            item = next(frame[0], _END)
        except RuntimeError:  # changed while read, by a thread of the hand-in's
            raise NotPlainData("a container that changed while it was read") from None
        if item is _END:
            emit(frame[1])
            stack.pop()
            continue
        if not frame[3]:
            emit(",")
        frame[3] = False
        if frame[2]:
            key, item = item
            if type(key) is not str:
                raise NotPlainData("a dict key that is not a str")
            emit(_escape(key) + ":")
        open_item(item, frame[4])
    return "".join(out).encode("ascii")


_END = object()
_NON_FINITE = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}
