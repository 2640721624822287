"""The package versions of Colab's published runtime, pinned: what ``scripts/colab-check`` builds.

Source: Google's own ``pip freeze`` of a Colab GPU runtime, ``pip-freeze.gpu.txt`` in
github.com/googlecolab/backend-info at commit a72407924822 (2026-08-19, "Upgrade to Python
3.13"; the newest one our reference index holds, read 2026-12-05), and its ``os-info-gpu.txt``
for the Python. Google's note on those files: they reflect "the most recent submitted" change,
"not necessarily the current state" of the runtime.

Kept here: the packages the course touches (``HEADLINE``) and everything they need, each at
Colab's version, so that pip resolves nothing of its own while the environment is built.
Left out on purpose: torch's CUDA libraries (``nvidia-*``, ``cuda-*``, ``triton``), which come
with whichever torch build is installed (see :mod:`.torch_builds`), and ``jedi``, which
IPython needs but Colab's list does not name (pip picks it). To refresh: take the new
``pip-freeze.gpu.txt``, change the versions below (``tests/test_colab_check.py`` checks that
coursekit's requirements still accept them), and update ``SNAPSHOT`` and ``PYTHON``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

#: Where the pins come from, in one line (printed by every run).
SNAPSHOT = (
    "Colab GPU runtime of 2026-08-19 "
    "(github.com/googlecolab/backend-info, pip-freeze.gpu.txt at a72407924822)"
)
#: Colab's Python (os-info-gpu.txt).
PYTHON = "3.13.15"
#: Colab's torch is this release built for CUDA 12.8; the build installed here depends on the
#: machine (:mod:`.torch_builds`).
COLAB_TORCH_BUILD = "cu128"

#: What the course imports or runs its kernel on.
HEADLINE = """
torch==2.11.0
numpy==2.1.3
ipywidgets==7.7.1
ipython==7.34.0
ipykernel==6.17.1
jupyter_client==7.4.9
traitlets==5.7.1
matplotlib==3.10.0
nbformat==5.11.1
transformers==5.15.0
tokenizers==0.22.2
safetensors==0.8.0
huggingface_hub==1.27.0
accelerate==1.14.0
peft==0.20.0
"""

#: Everything the headline packages need, at Colab's versions; pip itself is Colab's too.
DEPENDENCIES = """
annotated-doc==0.0.5
anyio==4.14.2
argon2-cffi==25.1.0
argon2-cffi-bindings==25.1.0
arrow==1.4.0
attrs==26.1.0
backcall==0.2.0
beautifulsoup4==4.13.5
bleach==6.4.0
certifi==2026.7.22
cffi==2.1.1
click==8.4.2
contourpy==1.3.3
cycler==0.12.1
debugpy==1.8.15
decorator==4.4.2
defusedxml==0.7.1
entrypoints==0.4
fastjsonschema==2.22.2
filelock==3.32.3
fonttools==4.63.0
fqdn==1.5.1
fsspec==2025.3.0
h11==0.16.0
hf-xet==1.6.0
httpcore==1.0.9
httpx==0.28.1
idna==3.18
ipython-genutils==0.2.0
isoduration==20.11.0
Jinja2==3.1.6
jsonpointer==3.1.1
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
jupyter-events==0.12.1
jupyter_core==5.9.1
jupyter_server==2.20.0
jupyter_server_terminals==0.5.4
jupyterlab_pygments==0.3.0
jupyterlab_widgets==3.0.16
kiwisolver==1.5.0
lark==1.3.1
markdown-it-py==4.2.0
MarkupSafe==3.0.3
matplotlib-inline==0.2.2
mdurl==0.1.2
mistune==3.3.4
mpmath==1.3.0
nbclassic==1.3.3
nbclient==0.10.4
nbconvert==7.17.1
nest-asyncio==1.6.0
networkx==3.6.1
notebook==6.5.7
notebook_shim==0.2.4
packaging==26.3
pandocfilters==1.5.1
parso==0.8.7
pexpect==4.9.0
pickleshare==0.7.5
pillow==11.3.0
pip==24.1.2
platformdirs==4.11.3
prometheus_client==0.26.0
prompt_toolkit==3.0.53
psutil==5.9.5
ptyprocess==0.7.0
pycparser==3.0
Pygments==2.21.0
pyparsing==3.3.2
python-dateutil==2.9.0.post0
python-json-logger==4.2.0
PyYAML==6.0.3
pyzmq==26.2.1
referencing==0.37.0
regex==2025.11.3
rfc3339-validator==0.1.4
rfc3986-validator==0.1.1
rfc3987-syntax==1.1.0
rich==13.9.4
rpds-py==2026.6.3
Send2Trash==2.1.0
setuptools==75.2.0
shellingham==1.5.4
six==1.17.0
soupsieve==2.9.2
sympy==1.14.0
terminado==0.18.1
tinycss2==1.5.1
tornado==6.5.7
tqdm==4.67.3
typer==0.27.1
typing_extensions==4.16.0
tzdata==2026.3
uri-template==1.3.0
wcwidth==0.8.2
webcolors==25.10.0
webencodings==0.6.1
websocket-client==1.9.0
widgetsnbextension==3.6.10
"""


@dataclass(frozen=True)
class Pin:
    name: str  # as pip freeze spells it
    version: str

    @property
    def key(self) -> str:
        """The name as pip compares names (PEP 503): ``Jinja2`` and ``jinja2`` are one."""
        return normalise(self.name)

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


def normalise(name: str) -> str:
    """A distribution name in PEP 503's normal form."""
    return "-".join(name.lower().replace("_", "-").replace(".", "-").split("-"))


def parse(text: str) -> list[Pin]:
    """``name==version`` lines (blank lines and ``#`` comments skipped) as pins.

    Raises ValueError naming the line for anything else, and for a name pinned twice: a
    refresh that left a range or a duplicate would build something other than Colab's.
    """
    pins: list[Pin] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, separator, version = line.partition("==")
        name, version = name.strip(), version.strip()
        if not separator or not name or not version or any(c in version for c in "=<>!~ ;,"):
            raise ValueError(
                f"pin list line {number} is {raw!r}: write one exact pin, name==version"
            )
        pin = Pin(name, version)
        if pin.key in seen:
            raise ValueError(f"pin list line {number} pins {name} again (line {seen[pin.key]} did)")
        seen[pin.key] = number
        pins.append(pin)
    return pins


def colab_pins() -> list[Pin]:
    """Every pin, the headline packages first."""
    return parse(HEADLINE + "\n" + DEPENDENCIES)


def torch_version() -> str:
    """The torch release pinned (``2.11.0``), without a build."""
    return next(pin.version for pin in colab_pins() if pin.key == "torch")


def colab_torch() -> str:
    """Colab's torch as ``torch.__version__`` spells it: ``2.11.0+cu128``."""
    return f"{torch_version()}+{COLAB_TORCH_BUILD}"


def fingerprint() -> str:
    """A short hash of the pins and Colab's Python: the name of the cached environment."""
    text = f"{PYTHON}\n{COLAB_TORCH_BUILD}\n" + "\n".join(map(str, colab_pins()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
