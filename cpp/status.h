// The result of an engine call: success, or an error with a kind, so that the FFI layer can tell
// a caller's mistake (a bad argument) from a simulation that MuJoCo failed.
#ifndef MJBATCH_JAX_STATUS_H_
#define MJBATCH_JAX_STATUS_H_

#include <string>
#include <utility>

namespace mjbatch_jax {

class Status {
 public:
  enum class Code {
    kOk,
    kInvalidArgument,    // the caller's inputs are wrong; nothing ran
    kResourceExhausted,  // threads or memory could not be had; nothing ran
    kSimulation,         // MuJoCo raised an error in a simulation; the message names it
  };

  Status() = default;
  static Status InvalidArgument(std::string message) {
    return Status(Code::kInvalidArgument, std::move(message));
  }
  static Status ResourceExhausted(std::string message) {
    return Status(Code::kResourceExhausted, std::move(message));
  }
  static Status Simulation(std::string message) {
    return Status(Code::kSimulation, std::move(message));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace mjbatch_jax

#endif  // MJBATCH_JAX_STATUS_H_
