"""The optional libraries an export or an import needs, imported when it runs, or one line saying what to install.

They live in requirements-interop.txt, not requirements.txt: together they add about half a gigabyte
and seconds of import time that training and watching never need. A conversion imports them through
these functions only, so a missing (or wrong) version is one `MissingDependency` line, not a traceback.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import warnings
from contextlib import contextmanager
from types import ModuleType

from cli import UserError

REQUIREMENTS = "requirements-interop.txt"


class MissingDependency(UserError):
    """An optional library that an export or an import needs is absent, or is a version without what it needs."""


def library(module: str, purpose: str) -> ModuleType:
    """`module` (safetensors, tokenizers, huggingface_hub, ...), or a `MissingDependency` naming its package."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(f"{purpose} needs {module.replace('_', '-')}, which is not installed here; install it "
                                f"with: pip install -r {REQUIREMENTS}") from None


def transformer_lens(purpose: str = "exporting to TransformerLens") -> ModuleType:
    """The `transformer_lens` package, with `HookedTransformer` (3.x: 4.0 removed it)."""
    module = library("transformer_lens", purpose)
    if not hasattr(module, "HookedTransformer"):
        try:
            version = importlib.metadata.version("transformer-lens")
        except importlib.metadata.PackageNotFoundError:
            version = "?"
        raise MissingDependency(f"{purpose} needs transformer-lens 3.x (HookedTransformer); version {version} here "
                                f"has none (4.0 removed it); install the pinned one with: pip install -r "
                                f"{REQUIREMENTS}")
    return module


def transformers(purpose: str = "exporting to Hugging Face") -> ModuleType:
    """The `transformers` package (which brings `tokenizers` and `safetensors`)."""
    module = library("transformers", purpose)
    library("tokenizers", purpose)
    return module


@contextmanager
def quiet_deprecation():
    """Silences transformer-lens 3.x's DeprecationWarning on building a HookedTransformer (it points
    to 4.x's TransformerBridge; requirements-interop.txt pins 3.x on purpose, see there)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated", category=DeprecationWarning)
        yield
