// What the lower layers need of the process they run in: the worker threads an op uses when the
// call names none, and whether this rank shares its cores with others (then a wait yields the core
// instead of spinning). Runtime (runtime/runtime.hpp), which owns the process, installs both for
// its lifetime; ops and transports read them here, so no arrow points up from them to the runtime.
// Without a Runtime: no pool (ops run on the calling thread) and shared cores (waits yield).
#pragma once

#include "meshnn/core/thread_pool.hpp"

namespace meshnn {

ThreadPool* default_worker_pool();
int default_worker_count();  // the pool's threads, or 1 without one
bool ranks_share_cores();

// Installs (or, with nullptr / true, clears) the above. Called by Runtime; tests may call them too.
void set_default_worker_pool(ThreadPool* pool);
void set_ranks_share_cores(bool shared);

}  // namespace meshnn
