"""Module 8's question (08_fitting_one_gpu): documents packed into rows, windows counted in
tokens.

Importing a question's file registers it.
"""

from coursekit.checks.module08 import pack_documents  # noqa: F401  (importing registers it)
