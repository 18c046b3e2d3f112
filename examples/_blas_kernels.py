"""Imported first by an example whose result depends on the last bits of numpy's BLAS.

OPENBLAS_CORETYPE=Haswell on a CPU with AVX2 and FMA, unless it is set already or numpy is
loaded (OpenBLAS reads it once, when it loads). OpenBLAS picks its kernels by CPU, and they round
differently in the last bits; the backflip's reference runs its IK on numpy's BLAS and its solve
is chaotic (docs/backflip.md), so the same kernels on every such CPU give the same plan. A user's
own setting stands.

  import _blas_kernels  # noqa: F401  (before anything that imports numpy)
"""

import os
import sys
from pathlib import Path


def pin() -> None:
  if "numpy" not in sys.modules and "OPENBLAS_CORETYPE" not in os.environ:
    try:
      if {"avx2", "fma"} <= set(Path("/proc/cpuinfo").read_text().split()):
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"
    except OSError:
      pass  # not Linux: nothing to read the CPU's features from


pin()
