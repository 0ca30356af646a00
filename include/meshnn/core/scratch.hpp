// Scratch memory that stays with its thread between uses: blocks are handed out in acquisition
// order inside a ScratchScope and come back when the scope ends; a block grows when a later
// acquisition at the same place needs more. A call repeated with the same pattern (every
// collective of a size, every decode step) gets the same warm blocks and allocates nothing after
// the first. The one scratch allocator of the collectives and the ops (blocks from allocate_buffer).
#pragma once

#include <cstddef>

namespace meshnn {

class ScratchScope {
 public:
  ScratchScope();
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;
  // Uninitialised, 64-byte aligned, valid until this scope ends (on this thread; other threads may
  // use it meanwhile through the pointer).
  std::byte* acquire(size_t bytes);
  template <class T>
  T* acquire_as(size_t count) {
    return reinterpret_cast<T*>(acquire(count * sizeof(T)));
  }

 private:
  size_t saved_;
};

}  // namespace meshnn
