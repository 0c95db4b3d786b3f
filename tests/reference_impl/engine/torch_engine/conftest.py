"""Without a GPU, Triton kernels run under its interpreter on CPU tensors.

NOTE: ``TRITON_INTERPRET`` is read when triton is first imported, and torch imports triton as
soon as ``torch._dynamo`` loads (building any engine does), so it is set here, at collection.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
