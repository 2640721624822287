"""The tampering instruments, made once in the warm parent and taken by each hand-in's process.

:func:`prepare` runs after every import and before any hand-in is forked: the record of library
code (:mod:`coursekit.grading.sandbox.provenance`), coursekit's answers wrapped in tripwires
(with a record of their own: the wrappers' closures can be read), and the seal of the harness
(:mod:`coursekit.grading.sandbox.harness_seal`). Made once, they cost a hand-in nothing. Each
hand-in's process forks with a copy and :func:`take` removes it from this module before the
first cell, so that no hand-in code finds the instruments by name.
"""

from __future__ import annotations

_MADE: list = []  # made once in the warm parent; each hand-in's process takes its copy


def prepare() -> None:
    """Make the instruments (in the warm parent, after every import: their code is the
    libraries' own, and the seal records all of it)."""
    from coursekit.checks import QUESTIONS
    from coursekit.grading.sandbox import harness_seal, tampering, torch_registrations
    from coursekit.grading.sandbox.provenance import Provenance, made_private

    # private copies of the class: a hand-in that patches Provenance reaches neither record
    tripwire_provenance = made_private(Provenance())
    judge = tampering.install_tripwires(QUESTIONS, tripwire_provenance)
    provenance = made_private(Provenance())
    provenance.trust_globals(type(tripwire_provenance).is_library.__globals__)
    provenance.trust_globals(judge.__self__.gi_frame.f_globals)  # the judge's private ones
    provenance.seal()  # after the tripwires: their code is coursekit's own
    tripwire_provenance.share_known(provenance)
    dispatcher = torch_registrations.dispatcher_snapshot()
    _MADE.append((provenance, tripwire_provenance, judge, harness_seal.seal(), dispatcher))


def take() -> tuple:
    """(provenance, tripwire provenance, the tripwires' judge, seal, the dispatcher's
    registrations), taken out of this module: called once, in the hand-in's process, before
    any hand-in code runs."""
    return _MADE.pop()
