"""Planners as pure JAX functions over the batched physics: iLQR, sampling MPC, receding horizon.

  from mjbatch_jax import control
  cost = control.Cost(residual, terms=(control.Term(3, 100.0, "huber", 0.05), ...))
  result = control.ilqr(cost, sim.params(1), start, ctrls, nstep=4)

See docs/control.md.
"""

from mjbatch_jax.control.cost import NORMS, Cost, Term, norm
from mjbatch_jax.control.ilqr import ILQRResult, ILQRSettings, box_qp, ilqr, shift

__all__ = [
  "NORMS",
  "Cost",
  "ILQRResult",
  "ILQRSettings",
  "Term",
  "box_qp",
  "ilqr",
  "norm",
  "shift",
]
