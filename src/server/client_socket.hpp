// The TCP socket of an HTTP request's client, for noticing a client that hangs up while its
// non-streaming answer is being made: nothing is written to it before the end, so no failed write
// would tell. cpp-httplib 0.11 hands a handler the connection's addresses but not its socket, so
// the socket is found among the process's descriptors by those addresses (one connection has one
// (peer address, peer port, local port)).
#pragma once

#include <optional>
#include <string>

namespace meshnn::server {

class ClientSocket {
 public:
  // The descriptor whose peer is remote_addr:remote_port (as httplib spells the address:
  // getnameinfo's numeric host) and whose local port is local_port; nullopt if none is open (Linux
  // only: the descriptors are listed from /proc/self/fd).
  static std::optional<ClientSocket> find(const std::string& remote_addr, int remote_port, int local_port);

  // The peer closed its end or the connection broke (poll's POLLRDHUP, POLLHUP or POLLERR; never
  // blocks). A client that only shuts down its sending half while still reading would count as
  // gone: HTTP clients do not do that while they wait for an answer.
  bool hung_up() const;

 private:
  explicit ClientSocket(int fd) : fd_(fd) {}
  int fd_;  // owned by httplib's connection, which outlives the handler that asks
};

}  // namespace meshnn::server
