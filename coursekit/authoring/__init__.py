"""notebooks/ -> exercises/ and solutions/: small transforms, composed in ``build``."""

from coursekit.authoring.build import BuildPlan, build, plan_build
from coursekit.authoring.markup import MarkupError

__all__ = ["BuildPlan", "MarkupError", "build", "plan_build"]
