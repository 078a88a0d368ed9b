#include "base/frame_conn.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv {
namespace {

// Received bytes are read in chunks of at least this much.
constexpr size_t kReadChunk = 256 << 10;
// One Poll reads at most this much, so that a fast sender cannot keep the
// owner from answering.
constexpr size_t kMaxReadPerPoll = 8 << 20;
// A drained send buffer larger than this is given back, not kept.
constexpr size_t kKeepBufferBytes = 1 << 20;

void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

int PollMillis(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return 0;
  if (timeout >= absl::Seconds(60)) return 60000;
  return static_cast<int>(absl::ToInt64Milliseconds(absl::Ceil(timeout, absl::Milliseconds(1))));
}

absl::Status ErrnoStatus(const char* what, int err) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(err)));
}

}  // namespace

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 >= address.size()) return false;
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  int p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p < 0 || p > 65535) return false;
  *host = std::move(h);
  *port = p;
  return true;
}

FrameConn::FrameConn(int fd, int wake_fd, size_t max_body_bytes)
    : fd_(fd), wake_fd_(wake_fd), max_body_bytes_(max_body_bytes) {}

FrameConn::~FrameConn() {
  ::close(fd_);
  ::close(wake_fd_);
}

absl::StatusOr<std::unique_ptr<FrameConn>> FrameConn::Adopt(int fd, size_t max_body_bytes) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("fcntl(O_NONBLOCK)", err);
  }
  int one = 1;
  // Frames are written whole; Nagle would only hold the last piece back.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A peer whose host died or was cut off sends no reset: without probes an
  // idle connection to it would hold its descriptors (and, on a bookie, a
  // thread and a connection slot) forever. Probes from 60 s of silence, 6
  // of them 10 s apart; and data unacknowledged for 2 minutes ends the
  // connection too (keepalive does not probe while data is in flight).
  int idle_s = 60, interval_s = 10, probes = 6;
  unsigned int user_timeout_ms = 120000;
  (void)::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("eventfd", err);
  }
  return std::unique_ptr<FrameConn>(new FrameConn(fd, wake_fd, max_body_bytes));
}

absl::StatusOr<std::unique_ptr<FrameConn>> FrameConn::Connect(const std::string& host, int port,
                                                              absl::Duration timeout,
                                                              size_t max_body_bytes) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", ::gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", host));
  const absl::Time deadline = absl::Now() + timeout;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            ai->ai_protocol);
    if (fd < 0) {
      last = ErrnoStatus("socket", errno);
      continue;
    }
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int n = ::poll(&p, 1, PollMillis(deadline - absl::Now()));
        if (n == 1) {
          socklen_t len = sizeof(err);
          if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        } else {
          err = n == 0 ? ETIMEDOUT : errno;
        }
      }
    }
    if (err != 0) {
      ::close(fd);
      last = ErrnoStatus(absl::StrCat("connect to ", host, ":", port).c_str(), err);
      continue;
    }
    ::freeaddrinfo(found);
    return Adopt(fd, max_body_bytes);
  }
  ::freeaddrinfo(found);
  return last;
}

bool FrameConn::Send(uint64_t id, uint32_t status, size_t body_bytes,
                     absl::FunctionRef<void(char*)> fill) {
  bool wake = false;
  {
    absl::MutexLock l(&mu_);
    if (!broken_.ok()) return false;
    const bool was_idle = out_sent_ == out_.size();
    const size_t at = out_.size();
    out_.resize(at + kFrameHeaderBytes + body_bytes);
    char* p = out_.data() + at;
    PutU32(p, static_cast<uint32_t>(body_bytes));
    PutU32(p + 4, status);
    PutU64(p + 8, id);
    fill(p + kFrameHeaderBytes);
    // Write at once unless older bytes wait for the owner's Poll (they
    // must leave first). What the socket does not take, the owner writes.
    if (was_idle) FlushLocked();
    if (!broken_.ok()) return false;
    wake = out_sent_ != out_.size();
  }
  if (wake) Wake();
  return true;
}

bool FrameConn::Send(uint64_t id, uint32_t status, std::string_view body) {
  return Send(id, status, body.size(),
              [body](char* p) { std::memcpy(p, body.data(), body.size()); });
}

void FrameConn::FlushLocked() {
  while (broken_.ok() && out_sent_ < out_.size()) {
    const ssize_t n = ::send(fd_, out_.data() + out_sent_, out_.size() - out_sent_,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      out_sent_ += static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    BreakLocked(ErrnoStatus("send", n < 0 ? errno : EPIPE));
  }
  if (out_sent_ == out_.size()) {
    // One burst of large frames must not pin its buffer for the life of
    // the connection (the receive buffer is given back the same way).
    if (out_.capacity() > kKeepBufferBytes) {
      std::string().swap(out_);
    } else {
      out_.clear();
    }
    out_sent_ = 0;
  } else if (out_sent_ > (1u << 20) && out_sent_ > out_.size() / 2) {
    out_.erase(0, out_sent_);
    out_sent_ = 0;
  }
}

void FrameConn::BreakLocked(absl::Status why) {
  if (!broken_.ok()) return;
  broken_ = std::move(why);
  ::shutdown(fd_, SHUT_RDWR);
  std::string().swap(out_);
  out_sent_ = 0;
}

void FrameConn::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void FrameConn::Close() {
  {
    absl::MutexLock l(&mu_);
    BreakLocked(absl::CancelledError("connection closed"));
  }
  Wake();
}

size_t FrameConn::queued_bytes() const {
  absl::MutexLock l(&mu_);
  return out_.size() - out_sent_;
}

uint64_t FrameConn::bytes_written() const {
  absl::MutexLock l(&mu_);
  return written_;
}

absl::Status FrameConn::Poll(absl::Duration timeout, bool read, std::vector<FrameView>* frames) {
  // Drop what the previous Poll returned (its views are now invalid).
  if (in_parsed_ > 0) {
    std::memmove(in_.data(), in_.data() + in_parsed_, in_used_ - in_parsed_);
    in_used_ -= in_parsed_;
    in_parsed_ = 0;
  }
  // One large frame must not pin its buffer for the connection's life.
  if (in_used_ == 0 && in_.size() > 4 * kReadChunk) {
    std::string().swap(in_);
  }
  // Not reading, a peer that closed would go unnoticed (a FIN raises
  // neither POLLERR nor POLLHUP): ask for POLLRDHUP then.
  short events = read ? POLLIN : POLLRDHUP;
  {
    absl::MutexLock l(&mu_);
    if (!broken_.ok()) return broken_;
    if (out_sent_ < out_.size()) events |= POLLOUT;
  }
  pollfd fds[2] = {{fd_, events, 0}, {wake_fd_, POLLIN, 0}};
  const int n = ::poll(fds, 2, PollMillis(timeout));
  if (n < 0 && errno != EINTR) return ErrnoStatus("poll", errno);
  if (n <= 0) return absl::OkStatus();
  if (fds[1].revents & POLLIN) {
    uint64_t count;
    (void)!::read(wake_fd_, &count, sizeof(count));
  }
  const short got = fds[0].revents;
  if (got & (POLLOUT | POLLERR | POLLHUP | POLLRDHUP)) {
    absl::MutexLock l(&mu_);
    FlushLocked();
    // Not reading, the reset or hang-up would never be noticed and poll
    // would return at once forever: break here. (The protocols on top never
    // half-close: a peer that shut its side down is gone.)
    if (!read && (got & (POLLERR | POLLHUP | POLLRDHUP)) && broken_.ok()) {
      BreakLocked(absl::UnavailableError("connection reset or closed by the peer"));
    }
    if (!broken_.ok()) return broken_;
  }
  absl::Status status;
  if (read && (got & (POLLIN | POLLERR | POLLHUP))) {
    // Before the first frame, read no further than its largest allowed end:
    // a stranger makes a server buffer that much, not a megabyte.
    size_t budget = kMaxReadPerPoll;
    if (!got_first_frame_ && first_frame_max_body_bytes_ < max_body_bytes_) {
      const size_t first_end = kFrameHeaderBytes + first_frame_max_body_bytes_;
      budget = first_end > in_used_ ? first_end - in_used_ : 1;
    }
    size_t total = 0;
    while (total < budget) {
      const size_t want = std::min(kReadChunk, budget - total);
      if (in_.size() - in_used_ < want) in_.resize(std::max(in_.size() * 2, in_used_ + want));
      const ssize_t r = ::recv(fd_, in_.data() + in_used_,
                               std::min(in_.size() - in_used_, budget - total), MSG_DONTWAIT);
      if (r > 0) {
        in_used_ += static_cast<size_t>(r);
        total += static_cast<size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      status = r == 0 ? absl::UnavailableError("connection closed by the peer")
                      : ErrnoStatus("recv", errno);
      break;
    }
  }
  // Whole frames; views stay valid because in_ does not change until the
  // next Poll.
  while (in_used_ - in_parsed_ >= kFrameHeaderBytes) {
    const char* p = in_.data() + in_parsed_;
    const uint32_t len = GetU32(p);
    const size_t limit =
        got_first_frame_ ? max_body_bytes_ : std::min(max_body_bytes_, first_frame_max_body_bytes_);
    if (len > limit) {
      status = absl::DataLossError(absl::StrCat("frame of ", len, " bytes exceeds the limit of ",
                                                limit, " (not this protocol?)"));
      break;
    }
    if (in_used_ - in_parsed_ < kFrameHeaderBytes + len) break;
    frames->push_back(FrameView{GetU64(p + 8), GetU32(p + 4),
                                std::string_view(p + kFrameHeaderBytes, len)});
    in_parsed_ += kFrameHeaderBytes + len;
    got_first_frame_ = true;
  }
  if (!status.ok()) {
    absl::MutexLock l(&mu_);
    BreakLocked(status);
  }
  return status;
}

}  // namespace ledgerkv
