// One error type for everything a user can cause: a bad file, a bad input, an
// unsupported op. Messages gain context as they rise ("model.onnx: node 'x'
// (MatMul): ..."), so the thrower states only what it knows.
#pragma once

#include <fmt/format.h>

#include <concepts>
#include <stdexcept>
#include <string>
#include <utility>

namespace onebit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Runs `body`; an Error escaping it is rethrown with `prefix: ` in front.
template <class Body>
decltype(auto) with_context(const std::string& prefix, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    throw Error(prefix + ": " + e.what());
  }
}

// The same with the prefix built only if `body` throws: for calls made per
// node and per run, where formatting a label each time costs more than
// many of the kernels it would name.
template <class Prefix, class Body>
  requires std::invocable<Prefix&>
decltype(auto) with_context(Prefix&& prefix, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    throw Error(prefix() + ": " + e.what());
  }
}

}  // namespace onebit
