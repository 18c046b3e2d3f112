// MuJoCo's global callbacks (mjcb_control, mjcb_passive, ...) as the engine's threads would call
// them. A callback installed from Python (mujoco.set_mjcb_control(fn)) is a trampoline into the
// interpreter that MuJoCo's Python bindings own; a batch's worker threads cannot call it (it
// fails with "Python exception raised", or worse), so every call refuses it up front. C
// callbacks (a compiled function installed through ctypes) run as they would in mj_step.
#ifndef MJBATCH_JAX_CALLBACKS_H_
#define MJBATCH_JAX_CALLBACKS_H_

#include <string>

namespace mjbatch_jax {

// The name of the first mjcb_* callback that is a Python function ("mjcb_control"), or "" if
// none is.
std::string PythonCallback();

// Take the current mjcb_time as the bindings' own C timer, which they install by default from
// the same library as the trampolines; to be called when Python reports no time callback.
void RememberDefaultTimer();

// The message of the error for a Python callback named name.
std::string PythonCallbackError(const std::string& name);

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_CALLBACKS_H_
