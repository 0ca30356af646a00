#include "client_socket.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace meshnn::server {
namespace {

// A socket address's numeric host and port, as httplib's get_remote_ip_and_port spells them.
bool host_and_port(const sockaddr_storage& address, socklen_t length, std::string& host, int& port) {
  char name[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, name, sizeof name, service, sizeof service,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = name;
  port = std::atoi(service);
  return true;
}

}  // namespace

std::optional<ClientSocket> ClientSocket::find(const std::string& remote_addr, int remote_port, int local_port) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    sockaddr_storage peer{}, local{};
    socklen_t peer_length = sizeof peer, local_length = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0)
      continue;  // not a connected socket (or the listing's own descriptor, already closed)
    std::string peer_host, local_host;
    int peer_port = -1, port = -1;
    if (host_and_port(peer, peer_length, peer_host, peer_port) && host_and_port(local, local_length, local_host, port) &&
        peer_host == remote_addr && peer_port == remote_port && port == local_port)
      return ClientSocket(fd);
  }
  return std::nullopt;
}

bool ClientSocket::hung_up() const {
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace meshnn::server
