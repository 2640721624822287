"""Module 6's questions (transitional: the files below become one file per question)."""

from coursekit.checks import module06_noise, module06_scaling  # noqa: F401, I001
