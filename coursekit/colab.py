"""Are we on Google Colab? (No torch needed: the doctor asks before torch is there.)"""

from __future__ import annotations

import os
import sys


def in_colab() -> bool:
    """True inside a Google Colab runtime."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
