"""Take, in a measured fork, the free memory malloc inherited, so that the call cannot reuse it.

A fork starts with its parent's heap: blocks the notebook and earlier tests freed stay in
malloc's free lists, resident, and a new block is cut from them before malloc asks the
kernel for pages. A whole-window forward that fits in them raises no resident size the
kernel counts: with tens of MiB freed before (a test run earlier in the same process), the
memory test saw an ordinary whole-window forward rise 2 MiB instead of 40. :func:`plug`
allocates every such block of 64 KiB or more (what a tensor of that size would be cut
from; smaller blocks hold no window) and never uses or frees it: its pages stay shared
with the parent, and what the call allocates next comes from pages of its own, which the
kernel counts. It costs 0.3 ms an arena, and about 3.5 ms for each arena an ended thread
left (its first block in the fork copies pages malloc's bookkeeping writes).

An arena is malloc's per-thread heap: the main thread's is plugged directly. A new thread
takes an arena an ended thread left first, then a new one: threads started for the purpose,
all alive at once, plug those left behind, one each, until one gets a new arena. They stay,
idle, until the fork ends. (Arenas of the parent's other threads, which did not come along,
are reached only past malloc's arena limit, by a function starting dozens of threads: not
plugged.)
"""

from __future__ import annotations

import bisect
import ctypes
import os
import sys
import threading

LARGEST, SMALLEST = 64 * 2**20, 64 * 2**10  # the smallest: malloc maps no less on its own
_HELD: list[int] = []  # the blocks taken: never freed (the fork ends with its call)
AVAILABLE = sys.platform.startswith("linux")

if AVAILABLE:  # looked up once, on import: nothing is resolved in a hand-in's process
    _LIBC = ctypes.CDLL(None)
    _MALLOC, _FREE = _LIBC.malloc, _LIBC.free
    _MALLOC.restype, _MALLOC.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    _FREE.restype, _FREE.argtypes = None, [ctypes.c_void_p]


def _inside(address: int, ranges: list[tuple[int, int]], starts: list[int]) -> bool:
    at = bisect.bisect_right(starts, address) - 1
    return at >= 0 and address < ranges[at][1]


def plug_arena(ranges: list[tuple[int, int]]) -> int:
    """Take, in the calling thread's arena, every free block of :data:`SMALLEST` or more
    that lies in ``ranges`` (:func:`writable_mappings` the fork inherited, sorted): sizes
    halve from
    :data:`LARGEST`, and each size is taken until malloc answers from memory of its own.
    The bytes taken."""
    starts = [start for start, _ in ranges]
    taken, size = 0, LARGEST
    while size >= SMALLEST:
        while True:
            block = _MALLOC(size)
            if not block:
                break
            if not _inside(block, ranges, starts):
                _FREE(block)  # new memory: given back, and counted if the call uses it
                break
            _HELD.append(block)
            taken += size
        size //= 2
    return taken


def writable_mappings() -> list[tuple[int, int]]:
    """This process's readable and writable mappings, adjacent ones merged, from its own
    ``/proc`` folder: where a free block malloc could hand out again lies. (An arena's
    reserve beyond its heap is mapped with no access: a block malloc cuts from it by
    growing the heap is new memory, and counted when used.)"""
    ranges: list[list[int]] = []
    try:
        with open(f"/proc/{os.getpid()}/maps") as handle:
            for line in handle:
                fields = line.split()
                if not fields[1].startswith("rw"):
                    continue
                start, _, end = fields[0].partition("-")
                low, high = int(start, 16), int(end, 16)
                if ranges and ranges[-1][1] == low:
                    ranges[-1][1] = high
                else:
                    ranges.append([low, high])
    except (OSError, ValueError, IndexError):
        return []
    return [(low, high) for low, high in ranges]


def plug(ranges: list[tuple[int, int]]) -> int:
    """Take every inherited free block in the main arena and in the arenas ended threads
    left (see the module's text); the bytes taken. Call it in the fork, before its warm-up
    and before it reads the mappings it keeps, from its only thread: the helper threads
    never end (an ended thread's stack is unmapped a moment later, and a block mapped there
    later could not be given back), and wait, running nothing, until the fork ends."""
    if not AVAILABLE:
        return 0
    ranges = sorted(ranges)
    starts = [start for start, _ in ranges]
    taken = [plug_arena(ranges)]
    never = threading.Event()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # each hand-over of the GIL to a helper is prompt
    try:
        _plug_left_arenas(ranges, starts, taken, never)
    finally:
        sys.setswitchinterval(interval)
    return sum(taken)


MOST_HELPERS = 64  # arenas ended threads left, plugged at most: malloc's limit on 8 cores


def _plug_left_arenas(ranges, starts, taken: list, never: threading.Event) -> None:
    for _ in range(MOST_HELPERS):
        done, fresh = threading.Event(), []

        def helper(done=done, fresh=fresh) -> None:
            try:
                probe = _MALLOC(64)  # a new arena's first block is new memory
                fresh.append(not _inside(probe, ranges, starts))
                _FREE(probe)
                taken.append(plug_arena(ranges))
            finally:
                done.set()
            never.wait()

        threading.Thread(target=helper, daemon=True).start()
        done.wait()
        if not fresh or fresh[0]:  # past the arenas ended threads left: the rest are new
            break
