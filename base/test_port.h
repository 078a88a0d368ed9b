// PickRestartablePort (tests): a loopback TCP port for a test server that is
// stopped and started again on the same address (a bookie restarted after a
// kill, etcd, a standalone process).
//
// Port 0 and outgoing connections take their ports from the kernel's
// ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default).
// A port from there, free while its server is down, is soon taken by some
// socket of a test running in parallel (ctest -j2), and the restart fails
// with EADDRINUSE: seen as "bookie: cannot listen on 127.0.0.1:34481" in
// range_test. The ports picked here come from below that range, at random,
// and were free at the moment of the pick (a bind check). One process never
// gets the same port twice, and a pick is claimed across processes with a
// record lock (byte <port> of /tmp/ledgerkv-test-ports.lock, held until
// the process exits), so two test processes never pick the same port:
// without it a parallel test process had taken etcd's peer port in
// cluster_process_test ("bind: address already in use").
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

namespace ledgerkv {

namespace test_port_internal {

inline constexpr char kLockFile[] = "/tmp/ledgerkv-test-ports.lock";

// 127.0.0.1:`port` (0: the kernel picks).
inline sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

// Whether 127.0.0.1:`port` can be bound now (as gRPC binds: SO_REUSEADDR,
// so a connection of an earlier server in TIME_WAIT does not count).
inline bool CanBind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = Loopback(port);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// A port the kernel hands out for port 0 (the fallback).
inline int EphemeralPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// Claims `port` for this process's life among the processes that use
// PickRestartablePort: a write lock on byte `port` of one shared file,
// through one descriptor kept open (close-on-exec; record locks are not
// inherited by children and go away when the process exits). False if
// another live process holds it. Where the file cannot be used, claims
// everything (the bind check alone then guards the pick).
inline bool ClaimAcrossProcesses(int port) {
  static const int fd = [] {
    const int f = ::open(kLockFile, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f >= 0) ::fchmod(f, 0666);
    return f;
  }();
  if (fd < 0) return true;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = port;
  lock.l_len = 1;
  if (::fcntl(fd, F_SETLK, &lock) == 0) return true;
  return errno != EACCES && errno != EAGAIN;  // held by another process
}

// A port in [lo, hi), free now (bind check), never returned before in
// this process, and claimed against other test processes; 0 if there is
// none. 200 random tries, then every port from a random start.
inline int PickIn(int lo, int hi) {
  static std::mutex mu;
  static std::set<int> given;
  static std::mt19937 random(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::lock_guard<std::mutex> lock(mu);
  auto take = [&](int port) {
    if (given.contains(port) || !CanBind(port) || !ClaimAcrossProcesses(port)) return false;
    given.insert(port);
    return true;
  };
  std::uniform_int_distribution<int> pick(lo, hi - 1);
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (const int port = pick(random); take(port)) return port;
  }
  const int start = pick(random);
  for (int i = 0; i < hi - lo; ++i) {
    if (const int port = lo + (start - lo + i) % (hi - lo); take(port)) return port;
  }
  return 0;
}

}  // namespace test_port_internal

// Lowest port picked: above the well-known and registered ports tests or
// the machine may use (etcd's 2379/2380, the standalone's 7070).
constexpr int kLowestTestPort = 10000;

// Returns a port below the ephemeral range, free at the time of the call,
// not returned before in this process (tests pick the ports of a whole
// cluster before they start any of its servers) and not claimed by another
// live test process; if that range is too small on this machine, or holds
// no such port, a port the kernel picks (as port 0 would).
inline int PickRestartablePort() {
  int ephemeral_low = 32768;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (int low = 0, high = 0; range >> low >> high && low > 0) ephemeral_low = low;
  if (ephemeral_low - kLowestTestPort < 1000) return test_port_internal::EphemeralPort();
  const int port = test_port_internal::PickIn(kLowestTestPort, ephemeral_low);
  return port > 0 ? port : test_port_internal::EphemeralPort();
}

}  // namespace ledgerkv
