"""The commands students and instructors run: one module per command (``coursekit <verb>``).

``cli`` is the entry point; ``command_line/`` holds its parts (each command's options and
help apart from what it runs). Each verb is handed to its module: ``launch`` (start),
``course_index`` (the table of contents), ``hand_in`` (submit), ``doctor``, ``grade``,
``instructor`` (export), ``certificate`` (certificate, verify, issuer-key, revoke),
``class_report``, ``gradescope`` and
``hub_links`` (links). The authoring commands (build, student-copy) live in
:mod:`coursekit.authoring`. Nothing here is imported by a notebook's exercise code, except
``doctor.diagnose`` (module 0's set-up check) and ``hand_in.submit`` (``coursekit.submit``).
"""
