"""The sandbox: running one hand-in's code where it can reach nothing but its own scratch.

The grader's side is :mod:`~coursekit.grading.sandbox.driver` (start a confined process, send
it one command at a time, read its answers over :mod:`~coursekit.grading.sandbox.channel`).
:mod:`~coursekit.grading.sandbox.warm_parent` imports torch and coursekit once and forks one
:mod:`~coursekit.grading.sandbox.runner` per hand-in; the runner confines itself with
:mod:`namespaces`, :mod:`privileges`, :mod:`landlock` and :mod:`seccomp` before any hand-in code
runs, then watches it from inside with :mod:`tampering`, :mod:`harness_seal` and
:mod:`provenance`. ``docs/architecture.md`` follows one hand-in through these files.
"""
