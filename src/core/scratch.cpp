#include "meshnn/core/scratch.hpp"

#include <algorithm>
#include <vector>

#include "meshnn/core/error.hpp"
#include "meshnn/core/memory.hpp"

namespace meshnn {
namespace {

// Per-thread arena: blocks kept across scopes, handed out in acquisition order.
struct Arena {
  struct Block {
    std::byte* data = nullptr;
    size_t size = 0;
  };
  std::vector<Block> blocks;
  size_t next = 0;
  ~Arena() {
    for (auto& b : blocks) release_buffer(b.data);
  }
};
Arena& arena() {
  thread_local Arena a;
  return a;
}

}  // namespace

ScratchScope::ScratchScope() : saved_(arena().next) {}
ScratchScope::~ScratchScope() { arena().next = saved_; }

std::byte* ScratchScope::acquire(size_t bytes) {
  Arena& a = arena();
  bytes = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  if (a.next == a.blocks.size()) a.blocks.push_back({});
  Arena::Block& b = a.blocks[a.next];
  // Blocks at or after `next` are free, so a too-small one can be replaced.
  if (b.size < bytes) {
    release_buffer(b.data);
    b.data = allocate_buffer(bytes);
    MESHNN_FATAL_IF(!b.data, "cannot allocate {} bytes of scratch memory", bytes);
    b.size = bytes;
  }
  ++a.next;
  return b.data;
}

}  // namespace meshnn
