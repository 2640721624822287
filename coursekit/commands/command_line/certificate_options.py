"""Options and help of the certificate commands: certificate, verify, issuer-key and revoke.

Defaults are the command functions' own (``coursekit.commands.certificate.run_*``): an
option not given is not passed, and the help names the default. Importing those functions
here would load ``cryptography`` for every command's help.
"""

from __future__ import annotations

import argparse


def certificate(commands: argparse._SubParsersAction) -> None:
    certificate = commands.add_parser(
        "certificate",
        help="signed certificate (page, Open Badges credential, badge) for a student who passed",
    )
    certificate.add_argument("student")
    certificate.add_argument(
        "--pass-mark", type=float, help="percent of the covered modules' points (default 70)"
    )
    certificate.add_argument(
        "--out", help="HTML page to write; the .jwt credential and .png badge go beside it"
    )
    certificate.add_argument("--gradebook", help="default gradebook.sqlite")
    certificate.add_argument(
        "--key", help="private signing key (Ed25519, made on first use in ~/.config/coursekit)"
    )
    certificate.add_argument(
        "--track", help="a track of coursekit/course.py TRACKS, or the name for --modules"
    )
    certificate.add_argument(
        "--modules", help="modules covered, e.g. 01_accumulation,02_loss_scaling (default: all)"
    )
    certificate.add_argument(
        "--did-web", help="issue as this did:web (e.g. did:web:example.edu), not the key's did:key"
    )
    certificate.add_argument(
        "--allow-placeholder",
        action="store_true",
        default=None,
        help="sign even while an address it signs is a placeholder (the template's REPOSITORY "
        "in coursekit/course.py, an example did:web), for a trial: refused otherwise",
    )


def verify(commands: argparse._SubParsersAction) -> None:
    verify = commands.add_parser(
        "verify", help="check a certificate offline with the issuer's public key"
    )
    verify.add_argument(
        "certificate",
        help="the page (.html), credential (.jwt or .json) or badge (.png), the text its QR "
        "code holds (quoted), or - to read any of these from standard input",
    )
    verify.add_argument(
        "--key",
        help="the issuer's public key (default: certificates/issuer-public-key.pem of the "
        "course), or the old HMAC key for certificates issued before",
    )
    verify.add_argument(
        "--revoked", help="revocation list (default: revoked.json beside the key, if any)"
    )


def issuer_key(commands: argparse._SubParsersAction) -> None:
    issuer_key = commands.add_parser(
        "issuer-key", help="export the certificate issuer's public key for the course to publish"
    )
    issuer_key.add_argument("--out", help="folder (default certificates/)")
    issuer_key.add_argument("--key", help="private signing key (as for certificate)")
    issuer_key.add_argument("--did-web", help="also write did.json for this did:web issuer")


def revoke(commands: argparse._SubParsersAction) -> None:
    revoke = commands.add_parser("revoke", help="revoke a certificate (the published list)")
    revoke.add_argument("certificate_id", help="its ID, CK-XXXX-XXXX-XXXX-XXXX")
    revoke.add_argument("--reason", help="shown by verify")
    revoke.add_argument("--revoked", help="the list (default certificates/revoked.json)")
