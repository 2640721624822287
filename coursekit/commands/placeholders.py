"""Addresses a course still holds from the template or from an example, found in one place.

Why: ``coursekit links`` hands students an address and ``coursekit certificate`` signs one
into a credential that cannot be changed once handed out; both must recognise the same
placeholders. Two kinds:

- the template's repository: ``REPOSITORY`` in ``coursekit/course.py`` still equal to
  ``PLACEHOLDER_REPOSITORY`` (GitHub ignores case in owner/name, so this does too);
- a host reserved for examples, which no issuer can own: ``example.com``, ``example.net``,
  ``example.org`` (RFC 2606), anything under the ``.example``, ``.test``, ``.invalid`` and
  ``.localhost`` top-level domains (RFC 2606 and 6761), and ``example.edu``, the host
  coursekit's own help gives as an example of a did:web.
"""

from __future__ import annotations

from urllib.parse import unquote

from coursekit import course

EXAMPLE_HOSTS = ("example.com", "example.net", "example.org", "example.edu")
EXAMPLE_TOP_LEVEL_DOMAINS = ("example", "test", "invalid", "localhost")


def placeholder_repository() -> str | None:
    """``REPOSITORY`` of course.py while it is still the template's placeholder, else None."""
    placeholder = getattr(course, "PLACEHOLDER_REPOSITORY", None)
    if placeholder is None or course.REPOSITORY.lower() != placeholder.lower():
        return None
    return course.REPOSITORY


def is_example_host(host: str) -> bool:
    """Is ``host`` (a DNS name, any case, with or without a port or final dot) reserved
    for examples, so that no issuer can serve anything there?

    >>> is_example_host("Courses.Example.ORG:8443"), is_example_host("uni.edu")
    (True, False)
    """
    name = host.strip().lower().rsplit("@", 1)[-1].split(":", 1)[0].rstrip(".")
    labels = name.split(".")
    if labels[-1] in EXAMPLE_TOP_LEVEL_DOMAINS:
        return True
    return any(name == known or name.endswith("." + known) for known in EXAMPLE_HOSTS)


def did_web_host(did: str) -> str:
    """The host a did:web names (``did:web:example.edu%3A8443:path`` -> ``example.edu``)."""
    return unquote(did.removeprefix("did:web:").split(":", 1)[0]).split(":", 1)[0]
