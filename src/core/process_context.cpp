#include "meshnn/core/process_context.hpp"

#include <atomic>

namespace meshnn {
namespace {
std::atomic<ThreadPool*> g_pool{nullptr};
std::atomic<bool> g_shared{true};
}  // namespace

ThreadPool* default_worker_pool() { return g_pool.load(std::memory_order_acquire); }
int default_worker_count() {
  const ThreadPool* pool = default_worker_pool();
  return pool != nullptr ? pool->num_threads() : 1;
}
bool ranks_share_cores() { return g_shared.load(std::memory_order_relaxed); }
void set_default_worker_pool(ThreadPool* pool) { g_pool.store(pool, std::memory_order_release); }
void set_ranks_share_cores(bool shared) { g_shared.store(shared, std::memory_order_relaxed); }

}  // namespace meshnn
