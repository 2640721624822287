"""The course as a static website (``coursekit site``): see ``build``."""

from coursekit.site.build import SiteReport, build_site

__all__ = ["SiteReport", "build_site"]
