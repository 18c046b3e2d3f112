#include "callbacks.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <string>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {
namespace {

// Whether code at address lies in MuJoCo's Python extension that holds the trampolines of
// Python callbacks (mujoco/_callbacks.*.so).
bool InPythonBindings(const void* address) {
  Dl_info info;
  if (!address || !dladdr(address, &info) || !info.dli_fname) return false;
  const char* base = std::strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  return std::strncmp(base, "_callbacks.", 11) == 0 &&
         std::strstr(info.dli_fname, "mujoco") != nullptr;
}

template <typename Fn>
const void* Address(Fn fn) {
  const void* address = nullptr;
  static_assert(sizeof(fn) == sizeof(address), "a callback is a plain function pointer");
  std::memcpy(&address, &fn, sizeof(address));
  return address;
}

// The bindings' default mjcb_time, a C function that lives beside the trampolines.
std::atomic<const void*> default_timer{nullptr};

}  // namespace

void RememberDefaultTimer() { default_timer.store(Address(mjcb_time)); }

std::string PythonCallback() {
  const struct {
    const char* name;
    const void* address;
  } callbacks[] = {
      {"mjcb_passive", Address(mjcb_passive)},   {"mjcb_control", Address(mjcb_control)},
      {"mjcb_contactfilter", Address(mjcb_contactfilter)},
      {"mjcb_sensor", Address(mjcb_sensor)},     {"mjcb_time", Address(mjcb_time)},
      {"mjcb_act_dyn", Address(mjcb_act_dyn)},   {"mjcb_act_gain", Address(mjcb_act_gain)},
      {"mjcb_act_bias", Address(mjcb_act_bias)},
  };
  const void* timer = default_timer.load();
  for (const auto& callback : callbacks) {
    if (callback.address == timer && callback.address == Address(mjcb_time)) continue;
    if (InPythonBindings(callback.address)) return callback.name;
  }
  return "";
}

std::string PythonCallbackError(const std::string& name) {
  return name + " is a Python function, which mjbatch_jax's worker threads cannot call: "
         "uninstall it with mujoco.set_" + name + "(None) before stepping (or install a compiled "
         "C function through ctypes)";
}

}  // namespace mjbatch_jax
