"""Whose code is this? Decided from what a hand-in cannot forge.

A code object names its own file (``co_filename``), and a hand-in can give its code any name:
``compile(source, torch.__file__, "exec")``, ``code.replace(co_filename=...)`` or
``marshal.loads`` of bytes it made. So a file name alone never makes code the libraries'.
Here a code object counts as library code only when

- it existed before any hand-in code ran (:meth:`Provenance.seal`, in the warm parent, keeps
  every code object reachable from a function alive and known by identity), or
- it is, field for field (bytecode, constants, names, line table), code compiled from the text
  of a file under a trusted folder (Python, site-packages, coursekit) as that file is on
  disk, which the hand-in can read but not write: a module imported later, honestly.

Code equal to the library's behaves as the library's, whoever made the object. What is left
to a hand-in is to run library code with other globals or closures, which
:mod:`coursekit.grading.sandbox.harness_seal` watches for the harness's own functions.
"""

from __future__ import annotations

import gc
import types

_CODE = types.CodeType
_MOST_FILE_BYTES = 8 * 2**20  # larger "sources" are not Python files of a library


class Provenance:
    """Library code or not, for code objects, by identity or by recompiling its file."""

    def __init__(self, trusted: tuple[str, ...] = ()):
        self.trusted = tuple(trusted)
        self._known: dict[int, _CODE] = {}
        self._by_file: dict[str, frozenset] = {}

    def seal(self) -> int:
        """Record every code object now reachable from a function (nested code included),
        before any hand-in code runs; returns how many. They are held, so no id is reused."""
        stack = [obj.__code__ for obj in gc.get_objects() if type(obj) is types.FunctionType]
        while stack:
            code = stack.pop()
            if id(code) not in self._known:
                self._known[id(code)] = code
                stack += [c for c in code.co_consts if type(c) is _CODE]
        return len(self._known)

    def share_known(self, other: Provenance) -> None:
        """Take a copy of ``other``'s record (two instruments, neither reaching the other's)."""
        self._known = dict(other._known)

    def trust(self, prefixes: tuple[str, ...]) -> None:
        """The folders whose files count as the libraries' (set in the hand-in's process)."""
        self.trusted = tuple(prefixes)

    def is_library(self, code) -> bool:
        """Whether ``code`` is the libraries' own (see the module's docstring)."""
        if type(code) is not _CODE:
            return False
        if self._known.get(id(code)) is code:
            return True
        filename = code.co_filename
        if not self.trusted or not filename.startswith(self.trusted):
            return False
        return code in self._codes_in(filename)

    def source_matches(self, source, filename: str) -> bool:
        """Whether ``source`` (str or bytes) is the text of ``filename`` on disk."""
        data = _read(filename)
        if data is None:
            return False
        if isinstance(source, str):
            try:
                return source == data.decode("utf-8")
            except UnicodeDecodeError:
                return False
        return isinstance(source, bytes | bytearray | memoryview) and bytes(source) == data

    def is_trusted_file(self, filename) -> bool:
        return (
            isinstance(filename, str) and bool(self.trusted) and filename.startswith(self.trusted)
        )

    def _codes_in(self, filename: str) -> frozenset:
        found = self._by_file.get(filename)
        if found is None:
            found = frozenset()
            data = _read(filename)
            if data is not None:
                try:
                    top = compile(data, filename, "exec", dont_inherit=True)
                except (SyntaxError, ValueError):
                    top = None
                found = frozenset(_nested(top)) if top is not None else frozenset()
            self._by_file[filename] = found
        return found


def _nested(code: _CODE) -> list[_CODE]:
    found, stack = [], [code]
    while stack:
        item = stack.pop()
        found.append(item)
        stack += [c for c in item.co_consts if type(c) is _CODE]
    return found


def _read(filename: str) -> bytes | None:
    try:
        with open(filename, "rb") as handle:
            data = handle.read(_MOST_FILE_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= _MOST_FILE_BYTES else None
