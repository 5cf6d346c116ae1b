"""drope's fused attention in PyTorch.

Importing the package loads the extension, which registers the ops ``torch.ops.drope.attention_fwd``,
``torch.ops.drope.attention_bwd`` and ``torch.ops.drope.attention`` with their autograd formula and their fake
implementations (``torch.compile(fullgraph=True)`` traces them). ``drope.attention`` is the Python entry point;
``drope.transformers.register()`` makes it an HF transformers attention implementation.
"""

import pathlib

import torch

from . import _build_info

__all__ = ["attention"]


def _load_extension():
    built = _build_info.TORCH_VERSION
    running = torch.__version__.split("+")[0]
    if built and built != running:
        raise ImportError(
            f"drope was built against torch {built}, but this interpreter has torch {torch.__version__}; "
            "reinstall it against this torch: pip install --no-build-isolation ./python"
        )
    libraries = sorted(pathlib.Path(__file__).parent.glob("_C*.so"))
    if not libraries:
        raise ImportError(f"drope: the extension library _C.so is missing from {pathlib.Path(__file__).parent}")
    torch.ops.load_library(str(libraries[0]))


_load_extension()

from ._ops import attention  # noqa: E402 (registers autograd and fake implementations of the loaded ops)
