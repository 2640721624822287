"""What the certificate commands run: certificate, verify, issuer-key and revoke.

Each calls its function in :mod:`coursekit.commands.certificate` with the options given on
the command line alone, so every other one takes that function's own default (written once,
there). Where the ``instructor`` extra those functions need is missing, the command says
what to install instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _given(**options) -> dict:
    """The options given on the command line (not None), so that every other one takes the
    command function's own default."""
    return {name: value for name, value in options.items() if value is not None}


def _path_or_none(value: str | None) -> Path | None:
    return Path(value) if value else None


def _certificate_command(name: str):
    """A certificate command, or None (with the reason printed) where the ``instructor``
    extra it needs is not installed."""
    try:
        from coursekit.commands import certificate
    except ModuleNotFoundError as error:
        print(
            f"coursekit: certificates need the {(error.name or '?').split('.')[0]} package, not "
            "installed here. "
            'Install the instructor extra: pip install "coursekit[instructor]"',
            file=sys.stderr,
        )
        return None
    return getattr(certificate, name)


def certificate(args: argparse.Namespace) -> int:
    run_certificate = _certificate_command("run_certificate")
    if run_certificate is None:
        return 2
    return run_certificate(
        student=args.student,
        **_given(
            gradebook=_path_or_none(args.gradebook),
            pass_percent=args.pass_mark,
            out=_path_or_none(args.out),
            key_path=_path_or_none(args.key),
            track=args.track,
            modules=args.modules,
            did_web=args.did_web,
            allow_placeholder=args.allow_placeholder,
        ),
    )


def verify(args: argparse.Namespace) -> int:
    run_verify = _certificate_command("run_verify")
    if run_verify is None:
        return 2
    return run_verify(
        certificate=args.certificate,  # a file, the QR code's text or "-": told apart there
        **_given(key_path=_path_or_none(args.key), revoked_path=_path_or_none(args.revoked)),
    )


def issuer_key(args: argparse.Namespace) -> int:
    run_issuer_key = _certificate_command("run_issuer_key")
    if run_issuer_key is None:
        return 2
    return run_issuer_key(
        **_given(
            out=_path_or_none(args.out), key_path=_path_or_none(args.key), did_web=args.did_web
        )
    )


def revoke(args: argparse.Namespace) -> int:
    run_revoke = _certificate_command("run_revoke")
    if run_revoke is None:
        return 2
    return run_revoke(
        certificate_id=args.certificate_id,
        **_given(reason=args.reason, revoked_path=_path_or_none(args.revoked)),
    )
