"""Module 5's questions, checked in the notebook 05_capstone.

Fitting a target batch into a memory budget (``plan_accumulation``), the whole recipe in
one window (``recipe_window``) and the step counts of a run (``count_steps``). The import
order below is the registration order, and so the order of the questions in the notebook.
"""

from coursekit.checks.module05 import (  # noqa: F401, I001  (importing registers, in this order)
    plan_accumulation,
    recipe_window,
    count_steps,
)
