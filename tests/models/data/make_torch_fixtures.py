"""Writes the two small PyTorch checkpoints the torch-free reader is tested on (run
with a Python that has torch; the files are committed, the tests need no torch):

    python tests/models/data/make_torch_fixtures.py

torch_state_dict_zip.pt (torch.save's zip format) and torch_state_dict_legacy.pt (the
format before torch 1.6) hold the same OrderedDict: float32 arange tensors (one stored
transposed, so non-contiguous), a float64 and an int64 tensor, a scalar, a Parameter,
two tensors sharing one storage, and an empty tensor.
"""

from collections import OrderedDict
from pathlib import Path

import torch

HERE = Path(__file__).parent


def state() -> OrderedDict:
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    shared = torch.arange(10, dtype=torch.float32) * 0.5
    return OrderedDict([
        ("conv.weight", base),
        ("conv.transposed", torch.arange(12, dtype=torch.float32).reshape(3, 4).t()),
        ("bn.running_var", torch.arange(5, dtype=torch.float64) + 0.25),
        ("bn.num_batches_tracked", torch.tensor(7, dtype=torch.int64)),
        ("param", torch.nn.Parameter(torch.full((2, 2), -1.5))),
        ("shared.a", shared[2:6]),
        ("shared.b", shared[5:]),
        ("empty", torch.zeros(0, 3)),
    ])


if __name__ == "__main__":
    torch.save(state(), HERE / "torch_state_dict_zip.pt")
    torch.save(state(), HERE / "torch_state_dict_legacy.pt",
               _use_new_zipfile_serialization=False)
    print("wrote", *sorted(p.name for p in HERE.glob("*.pt")))
