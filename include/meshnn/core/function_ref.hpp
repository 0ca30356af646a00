// A non-owning reference to a callable, for parameters that are called before the function
// returns (a pool's loop body, an op's per-row work). Unlike std::function it never allocates: a
// lambda capturing more than two references made every std::function a heap allocation, hundreds
// of them per decode step.
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace meshnn {

template <class Signature>
class FunctionRef;

template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  // The callable must outlive every call through this reference (true of an argument).
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> && std::is_invocable_r_v<R, F&, Args...>)
  FunctionRef(F&& f) noexcept  // NOLINT: implicit, as std::function's is
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* object, Args... args) -> R {
          return std::invoke(*static_cast<std::remove_reference_t<F>*>(object), std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace meshnn
