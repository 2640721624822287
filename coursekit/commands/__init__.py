"""The commands students and instructors run: one module per command (``coursekit <verb>``).

``cli`` reads the command line and hands each verb to its module: ``launch`` (start),
``course_index`` (the table of contents), ``hand_in`` (submit), ``doctor``, ``grade``,
``instructor`` (export), ``certificate`` (certificate, verify, issuer-key, revoke),
``class_report``, ``gradescope`` and
``hub_links`` (links). The authoring commands (build, student-copy) live in
:mod:`coursekit.authoring`. Nothing here is imported by a notebook's exercise code, except
``doctor.diagnose`` (module 0's set-up check) and ``hand_in.submit`` (``coursekit.submit``).
"""
