// MuJoCo errors raised on the calling thread, trapped instead of ending the process.
//
// mjBatch traps the errors of the simulations it runs, but an error that MuJoCo raises on the
// calling thread outside of them (an argument check of an mjb_* function, an allocation failure
// in mj_copyModel) goes to the active log handler, whose default prints and exits. We install a
// handler of our own once; on a thread inside TrappedCall it jumps back with the message, and on
// every other thread it hands the message on to the handler that was active before, so MuJoCo's
// Python bindings and other users see no difference.
#ifndef MJBATCH_JAX_TRAP_H_
#define MJBATCH_JAX_TRAP_H_

#include <string>

namespace mjbatch_jax {

// Run fn(arg) with MuJoCo errors of this thread trapped; return "" or the error's message.
// fn must be a plain function that owns no C++ objects with destructors: an error unwinds it with
// longjmp, as MuJoCo's own batch does for its workers.
std::string TrappedCall(void (*fn)(void*), void* arg);

// Run any callable with MuJoCo errors trapped. The callable's own frames are left by longjmp on
// an error, so it must not own objects with destructors either; capture by reference.
template <typename Fn>
std::string Trapped(Fn& fn) {
  return TrappedCall([](void* f) { (*static_cast<Fn*>(f))(); }, &fn);
}

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_TRAP_H_
