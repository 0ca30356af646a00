#include "meshnn/server/router.hpp"

#include <algorithm>

namespace meshnn::server {

Router::Router(int replicas, int64_t slots_per_replica)
    : slots_(slots_per_replica), running_(static_cast<size_t>(replicas), 0),
      recent_(static_cast<size_t>(replicas)) {}

int Router::route(const std::vector<int32_t>& prompt) {
  // A shared start shorter than a tile of positions saves little and would pull every request that
  // begins with BOS to one replica.
  constexpr size_t kWorthReusing = 32;
  auto shared_start = [&](int r) {
    size_t best = 0;
    for (const std::vector<int32_t>& p : recent_[static_cast<size_t>(r)]) {
      const size_t n = std::min(p.size(), prompt.size());
      best = std::max(best, static_cast<size_t>(std::mismatch(p.begin(), p.begin() + static_cast<int64_t>(n),
                                                              prompt.begin()).first - p.begin()));
    }
    return best >= kWorthReusing ? best : 0;
  };
  int chosen = 0;
  for (int r = 1; r < replicas(); ++r) {
    const bool free_r = running(r) < slots_, free_c = running(chosen) < slots_;
    if (free_r != free_c) {
      if (free_r) chosen = r;
      continue;
    }
    const size_t shared_r = shared_start(r), shared_c = shared_start(chosen);
    if (shared_r > shared_c || (shared_r == shared_c && running(r) < running(chosen))) chosen = r;
  }
  ++running_[static_cast<size_t>(chosen)];
  auto& recent = recent_[static_cast<size_t>(chosen)];
  recent.push_front(prompt);
  // A replica's cache holds at most `slots` requests' worth: older prompts are gone from it.
  while (static_cast<int64_t>(recent.size()) > slots_) recent.pop_back();
  return chosen;
}

void Router::ended(int replica) { --running_[static_cast<size_t>(replica)]; }

}  // namespace meshnn::server
