"""The sandbox: running one hand-in's code where it can reach nothing but its own scratch.

The grader's side is :mod:`~coursekit.grading.sandbox.driver` (start a confined process, send
it one command at a time over :mod:`~coursekit.grading.sandbox.channel` and read its answers:
:mod:`~coursekit.grading.sandbox.session`), with its settings (:mod:`limits`, :mod:`modes`) and
its handle on the warm parent (:mod:`warm_parent`, :mod:`reaping`), and, where hand-ins share
the host's files, :mod:`read_shield` (with :mod:`shield_plan`, :mod:`shield_journal` and
:mod:`as_hand_in`), which closes the course and the hand-ins to them while grading runs.
The warm parent's own process (:mod:`fork_server`, ``python -m``'s entry point) imports torch
and coursekit once
(:mod:`preload`, :mod:`instruments`) and forks one runner per hand-in; the runner builds its
process tree (:mod:`process_tree`) and confines the hand-in's process (:mod:`confinement`:
:mod:`namespaces`, :mod:`privileges`, :mod:`landlock` and :mod:`seccomp`, whose lists are
:mod:`seccomp_allow_list` and :mod:`syscall_numbers`) before any hand-in code runs, then
serves the grader's commands (:mod:`runner`) and watches it from inside with
:mod:`tampering`, :mod:`harness_seal` and :mod:`provenance`. Both sides share
:mod:`exit_codes`, :mod:`errors` and the naming of host scratch folders (:mod:`scratch`).
``docs/architecture.md`` follows one hand-in through these files.
"""
