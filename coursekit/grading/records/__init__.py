"""The records grading leaves: the gradebook, the exports read from it, and certificates.

:mod:`~coursekit.grading.records.gradebook` keeps every hand-in and every grading of it (one
SQLite file); :mod:`~coursekit.grading.records.exports` turns it into CSVs, LMS files and
feedback pages; :mod:`~coursekit.grading.records.certificates` and
:mod:`~coursekit.grading.records.keys` sign and verify completion certificates. Nothing here
runs hand-in code.
"""
