#include "trap.h"

#include <csetjmp>
#include <cstdio>
#include <mutex>
#include <string>

#include <mujoco/mujoco.h>

namespace mjbatch_jax {
namespace {

struct Trap {
  std::jmp_buf jump;
  char message[1024];
};

thread_local Trap* active_trap = nullptr;
mjfLogHandler previous_handler = nullptr;

void Handler(const mjLogMessage* message) {
  Trap* trap = active_trap;
  if (trap && message->level == mjLOG_ERROR) {
    std::snprintf(trap->message, sizeof(trap->message), "%s", message->subject);
    active_trap = nullptr;
    std::longjmp(trap->jump, 1);
  }
  // Not ours: what MuJoCo would have done without us.
  if (previous_handler) previous_handler(message);
}

void Install() {
  static std::once_flag once;
  std::call_once(once, [] { previous_handler = mju_setLogHandler(Handler); });
}

// A separate frame for setjmp, with nothing in it that longjmp could skip.
bool Run(Trap* trap, void (*fn)(void*), void* arg) {
  if (setjmp(trap->jump) != 0) return false;
  active_trap = trap;
  fn(arg);
  active_trap = nullptr;
  return true;
}

}  // namespace

std::string TrappedCall(void (*fn)(void*), void* arg) {
  Install();
  Trap trap;
  trap.message[0] = '\0';
  Trap* outer = active_trap;
  bool ok = Run(&trap, fn, arg);
  active_trap = outer;
  return ok ? std::string() : std::string(trap.message[0] ? trap.message : "MuJoCo error");
}

}  // namespace mjbatch_jax
