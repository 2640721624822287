"""What a certificate covers: the whole course, a named track, or a list of modules.

Why: a workshop that teaches modules 01 and 02 must be able to certify its students on those
modules' points alone, and the certificate must say which modules it covers. A track is
named in ``coursekit/course.py`` (``TRACKS``) or on the command line (``--track``,
``--modules``); every module it names must be one of the course's graded modules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coursekit.checks import questions_of
from coursekit.course import BRANCH, MODULES, TITLE, TRACKS, module, repository_url
from coursekit.grading.records.credentials import MODULE_TARGET_TYPE

_TRACK_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


class CoverageError(ValueError):
    """A track or module list that names nothing certifiable; the message says what to do."""


@dataclass(frozen=True)
class Coverage:
    """The modules a certificate covers, and what it calls them."""

    track: str | None  # None: the whole course, or modules named with --modules alone
    modules: tuple[str, ...]

    @property
    def whole_course(self) -> bool:
        return self.track is None and self.modules == tuple(graded_modules())

    @property
    def title(self) -> str:
        """What the certificate says was completed: the course, a track, or the modules by
        number (one module by its title too: "module 01, Accumulating gradients")."""
        if self.whole_course:
            return TITLE
        if self.track is not None:
            return f"{TITLE}: {self.track}"
        numbers = [name.split("_")[0] for name in self.modules]
        if len(numbers) == 1:
            return f"{TITLE}: module {numbers[0]}, {module(self.modules[0]).title}"
        return f"{TITLE}: modules {', '.join(numbers[:-1])} and {numbers[-1]}"

    @property
    def slug(self) -> str:
        if self.whole_course:
            return "course"
        return self.track or "modules-" + "-".join(m.split("_")[0] for m in self.modules)

    def points(self) -> float:
        return float(sum(q.points for m in self.modules for q in questions_of(m)))

    def achievement(self, pass_percent: float) -> dict:
        """The Open Badges ``Achievement``: what was achieved, the criteria, and each module
        covered by name (an ``Alignment`` to the module's notebook: the page names the
        modules from these signed titles, not from a course.py that may change later)."""
        return {
            "id": f"{repository_url()}#certificate-{self.slug}",
            "type": ["Achievement"],
            "achievementType": "Certificate",
            "name": self.title,
            "description": f"Completion of {self.title}, graded by hidden tests.",
            "criteria": {
                "narrative": f"At least {pass_percent:g}% of the points of "
                f"{', '.join(self.modules)}, each handed in and graded."
            },
            "tag": list(self.modules),
            "alignment": [
                {
                    "type": ["Alignment"],
                    "targetType": MODULE_TARGET_TYPE,
                    "targetCode": name,
                    "targetName": module(name).title,
                    "targetFramework": TITLE,
                    "targetUrl": f"{repository_url()}/blob/{BRANCH}/exercises/{name}.ipynb",
                }
                for name in self.modules
            ],
        }


def graded_modules() -> list[str]:
    """The course's modules that have graded questions, in course order."""
    return [m.name for m in MODULES if questions_of(m.name)]


def coverage(track: str | None = None, modules: str | None = None) -> Coverage:
    """The coverage ``--track`` and ``--modules`` ask for (neither: the whole course).

    ``--modules a,b`` alone certifies those modules; with ``--track NAME`` it names them;
    ``--track NAME`` alone reads ``TRACKS`` in ``coursekit/course.py``.
    """
    graded = graded_modules()
    if track is not None and not _TRACK_NAME.fullmatch(track):
        raise CoverageError(
            f"the track name {track!r} is not one coursekit takes: use lower-case letters, "
            "digits, '-' and '_' (at most 40), e.g. --track workshop."
        )
    if modules is None and track is None:
        return Coverage(None, tuple(graded))
    if modules is None:
        if track not in TRACKS:
            known = ", ".join(sorted(TRACKS)) or "none yet"
            raise CoverageError(
                f"no track named {track!r} in coursekit/course.py (TRACKS: {known}). Add it "
                "there, or name its modules: --track NAME --modules "
                "01_accumulation,02_loss_scaling."
            )
        asked = list(TRACKS[track])
    else:
        asked = [part.strip() for part in modules.split(",") if part.strip()]
    if not asked:
        raise CoverageError(
            "--modules names no module, e.g. --modules 01_accumulation,02_loss_scaling."
        )
    unknown = [name for name in asked if name not in graded]
    if unknown:
        raise CoverageError(
            f"{unknown[0]!r} is not a graded module of this course. Graded modules: "
            f"{', '.join(graded)}."
        )
    return Coverage(track, tuple(name for name in graded if name in asked))  # course order
