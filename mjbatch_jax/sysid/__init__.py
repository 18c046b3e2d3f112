"""System identification: Levenberg-Marquardt over params, with multiple shooting.

The unknowns are one vector theta that parameter maps turn into params leaves (inertias, damping,
friction, armature, any params field). The data are shooting windows of a recording, each a
simulation of its own from its recorded start, all of them rows of one `rollout` call. Each
window's start is fitted with the parameters (its record is its prior) and eliminated from the
normal equations window by window (the Schur complement), so only an n x n system is solved.
The Jacobian is `jax.jacfwd` through `rollout`: its rule makes every finite-difference column
of every window a simulation row of one custom call per knot. The damped steps are simulated
together as rows of one more call, and the best one is kept if it lowers the cost; where none
does, adaptive dampings (Nielsen's update) go on. A Fit says whether it converged (the
Gauss-Newton step or its gain is small), each window's cost, and the misfit (chi-square per
degree of freedom); a robust loss (Problem.loss) weighs outlier windows less, and
`fitted_starts` turns a fit's start offsets into rows.

  parameters = sysid.Parameters(sim, [sysid.Inertia(["link1", "link2"]),
                                      sysid.Field("dof_damping", ["joint1", "joint2"], log=True)])
  data = sysid.windows(states, ctrls, measured, length=50)
  problem = sysid.Problem(parameters, residual, prior_width=..., start_width=...)
  fit = sysid.fit(problem, data, theta0)
  print(sysid.report(problem, data, fit).summary())

With a `mjbatch_jax.distributed.Distributed` (`dist=`) the windows are rows of a global batch
over every process's devices: each device simulates and eliminates its own windows, and what
crosses processes is `psum` of the n x n system, of every damping's reduced system and of the
trial costs: three all-reduces an iteration. docs/sysid.md has the method and a comparison with
`mujoco.sysid`.

The package's modules, each one idea: parameters (the maps from theta to params), data (the
shooting windows), problem (what to fit, what a fit returns, and their checks), solver (fit),
identifiability (report), programs (the compiled programs a Parameters keeps).
"""

from mjbatch_jax.sysid.data import Windows, windows
from mjbatch_jax.sysid.identifiability import Report, report
from mjbatch_jax.sysid.parameters import Field, Inertia, Parameters
from mjbatch_jax.sysid.problem import Fit, Problem
from mjbatch_jax.sysid.solver import fit, fitted_starts

__all__ = [
  "Field",
  "Fit",
  "Inertia",
  "Parameters",
  "Problem",
  "Report",
  "Windows",
  "fit",
  "fitted_starts",
  "report",
  "windows",
]
