#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "meshnn/ccl/transport.hpp"
#include "meshnn/core/error.hpp"

namespace meshnn::ccl {
namespace {

// Shared state of the virtual ranks: pending sends and receives per (source, destination, tag),
// matched in posting order, and the completion flag of every request.
class Fabric {
 public:
  explicit Fabric(int size) : size_(size) {}
  int size() const { return size_; }

  int post(bool is_send, int self, int peer, int tag, void* data, size_t bytes) {
    std::lock_guard lock(mutex_);
    const int id = static_cast<int>(done_.size());
    done_.push_back(false);
    const Key key = is_send ? Key{self, peer, tag} : Key{peer, self, tag};
    Queue& q = queues_[key];
    auto& opposite = is_send ? q.recvs : q.sends;
    auto& mine = is_send ? q.sends : q.recvs;
    // Match at post time under the lock: both queues are FIFO, so the k-th send meets the k-th
    // receive whatever the thread interleaving.
    if (!opposite.empty()) {
      Pending other = opposite.front();
      opposite.pop_front();
      const Pending me{id, data, bytes};
      const Pending& send = is_send ? me : other;
      const Pending& recv = is_send ? other : me;
      MESHNN_FATAL_IF(send.bytes != recv.bytes, "in-process ccl: send of {} bytes from {} to {} (tag {}) met a receive of {} bytes",
                      send.bytes, std::get<0>(key), std::get<1>(key), tag, recv.bytes);
      if (send.bytes) std::memcpy(recv.data, send.data, send.bytes);
      done_[send.id] = true;
      done_[recv.id] = true;
    } else {
      mine.push_back({id, data, bytes});
    }
    return id;
  }

  bool test(int id) {
    std::lock_guard lock(mutex_);
    return done_.at(id);
  }

 private:
  using Key = std::tuple<int, int, int>;  // source, destination, tag
  struct Pending {
    int id;
    void* data;
    size_t bytes;
  };
  struct Queue {
    std::deque<Pending> sends, recvs;
  };
  int size_;
  std::mutex mutex_;
  std::map<Key, Queue> queues_;
  std::deque<bool> done_;
};

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(Fabric& fabric, int position) : fabric_(fabric), position_(position) {}
  int size() const override { return fabric_.size(); }
  int position() const override { return position_; }
  int max_tag() const override { return (1 << 30) - 1; }
  int post_send(int peer, int tag, const void* data, size_t bytes) override {
    return fabric_.post(true, position_, peer, tag, const_cast<void*>(data), bytes);
  }
  int post_recv(int peer, int tag, void* data, size_t bytes) override {
    return fabric_.post(false, position_, peer, tag, data, bytes);
  }
  bool test(int request) override { return fabric_.test(request); }
  std::string describe_member(int position) const override { return "virtual rank " + std::to_string(position); }

 private:
  Fabric& fabric_;
  int position_;
};

}  // namespace

void InProcessFabric::run(int size, const std::function<void(Transport&)>& fn) {
  MESHNN_CHECK(size >= 1, "in-process fabric needs at least one member, got {}", size);
  Fabric fabric(size);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int p = 0; p < size; ++p) {
    threads.emplace_back([&, p] {
      InProcessTransport transport(fabric, p);
      try {
        fn(transport);
      } catch (...) {
        errors[p] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace meshnn::ccl
