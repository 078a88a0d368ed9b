// FrameConn: one TCP connection carrying length-prefixed frames. It is the
// transport of the bookie's add port (docs/add-transport.md), which takes
// Add requests off gRPC because gRPC's loopback round trip costs several
// disk syncs on small machines (docs/performance.md).
//
// A frame is a 16-byte header, then the body:
//   u32 body length, u32 status, u64 id   (all little-endian)
// The meaning of `status` and `id` belongs to the protocol on top.
//
// Threads: one owner thread calls Poll (reading, and writing what Send
// could not write at once); any thread may call Send, Wake, Close and
// queued_bytes. Send never blocks: it writes what the socket takes now and
// leaves the rest for the owner's next Poll, so a bookie's journal thread
// can answer from its commit path without waiting on a slow peer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ledgerkv {

inline constexpr size_t kFrameHeaderBytes = 16;

struct FrameView {
  uint64_t id = 0;
  uint32_t status = 0;
  // Points into the connection's receive buffer: valid until the next Poll.
  std::string_view body;
};

class FrameConn {
 public:
  // Takes ownership of connected socket `fd` (made non-blocking, with
  // TCP_NODELAY and TCP keepalive: a peer that stays silent through 60 s
  // plus 6 probes 10 s apart, or leaves sent data unacknowledged for 2
  // minutes, breaks the connection). A frame whose body exceeds
  // `max_body_bytes` breaks the connection (a peer speaking another
  // protocol, or a corrupt stream).
  static absl::StatusOr<std::unique_ptr<FrameConn>> Adopt(int fd, size_t max_body_bytes);

  // Connects to host:port, waiting at most `timeout`. UNAVAILABLE on failure.
  static absl::StatusOr<std::unique_ptr<FrameConn>> Connect(const std::string& host, int port,
                                                            absl::Duration timeout,
                                                            size_t max_body_bytes);

  ~FrameConn();  // closes the socket
  FrameConn(const FrameConn&) = delete;
  FrameConn& operator=(const FrameConn&) = delete;

  // Queues one frame; `fill` writes its body, exactly `body_bytes` bytes,
  // into the buffer it is given. Returns false (dropping the frame) once
  // the connection is closed or broken, including by this very send.
  bool Send(uint64_t id, uint32_t status, size_t body_bytes, absl::FunctionRef<void(char*)> fill);
  // The same with a body that already exists.
  bool Send(uint64_t id, uint32_t status, std::string_view body);

  // Owner thread only. Waits at most `timeout` for the socket (readable, or
  // writable while bytes are queued) or a Wake(); writes what is queued and,
  // when `read`, reads what arrived. Appends the complete frames received
  // to `frames` (views valid until the next Poll). A non-OK status means
  // the connection is broken (peer closed, reset, oversized frame) or
  // closed; `frames` may still hold frames that arrived before that.
  absl::Status Poll(absl::Duration timeout, bool read, std::vector<FrameView>* frames);

  // Makes the owner's current or next Poll return at once.
  void Wake();

  // Shuts the socket down: Send drops from now on, the owner's Poll fails,
  // and the peer sees the connection end. The descriptor itself is closed
  // by the destructor, so no other thread can hit a reused descriptor.
  void Close();

  // Bytes queued by Send and not yet written to the socket.
  size_t queued_bytes() const;
  // Bytes written to the socket so far (the peer's kernel took them).
  uint64_t bytes_written() const;

  // Owner thread only, before the first Poll: a lower body limit for the
  // first frame received (a server allows only a hello-sized frame before
  // the peer has said hello). Until that frame is complete, Poll reads no
  // byte past its largest allowed end.
  void set_first_frame_max_body_bytes(size_t n) { first_frame_max_body_bytes_ = n; }

 private:
  FrameConn(int fd, int wake_fd, size_t max_body_bytes);
  // Writes queued bytes until the socket would block.
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BreakLocked(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int fd_;
  const int wake_fd_;  // an eventfd
  const size_t max_body_bytes_;

  mutable absl::Mutex mu_;
  std::string out_ ABSL_GUARDED_BY(mu_);
  size_t out_sent_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of out_ already written
  uint64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // bytes written over the connection's life
  absl::Status broken_ ABSL_GUARDED_BY(mu_);   // non-OK once closed or broken

  // Owner thread only.
  std::string in_;
  size_t in_used_ = 0;    // bytes of in_ holding received data
  size_t in_parsed_ = 0;  // bytes of in_ already returned as frames
  size_t first_frame_max_body_bytes_ = SIZE_MAX;
  bool got_first_frame_ = false;
};

// Splits "host:port" or "[v6]:port". False if it has no port.
bool SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace ledgerkv
