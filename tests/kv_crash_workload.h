// Concurrent writers for kill -9 tests: each thread writes its own keys
// sequentially (one request in flight per thread, so many in flight in all)
// until the server dies, remembering how many of its writes were
// acknowledged and whether one was still in flight. The writes are chosen so
// that, after a restart, every acknowledged write can be checked exactly and
// the in-flight one must be all there or not there at all:
//   kInc:   Increment <p>/<t>/ctr by 1            -> value = acked (+1)
//   kPut:   Put <p>/<t>/put/<n> = "tok-<n>"[+padding] -> keys 1..acked (+1)
//   kTxn:   Txn [version(a) == n-1] put a, b = "tok-<n>", increment c
//           -> a, b, c all at the same n, with one mod revision
//   kGroup: odd ops put 5 keys of a group in one Txn, even ops delete the
//           group with a range Delete -> a group is whole or absent
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/kv.grpc.pb.h"

namespace ledgerkv::testing {

class CrashWorkload {
 public:
  enum Kind { kInc = 0, kPut = 1, kTxn = 2, kGroup = 3 };

  // Keys live under `prefix` (e.g. "w1/"); `threads_per_kind` writers of
  // each kind.
  CrashWorkload(std::string table, std::string prefix, int threads_per_kind);
  ~CrashWorkload();  // stops and joins

  // Pads the values of the kPut writers with `bytes` bytes (to make the log
  // grow fast enough for snapshots during the workload). Before Start.
  void set_put_padding(int64_t bytes) { put_padding_ = bytes; }

  void Start(std::shared_ptr<grpc::Channel> channel);
  // OK once every writer has `n` acknowledged writes. Otherwise says why:
  // the errors of the writers that stopped on one (at once), or, after
  // `timeout`, the writer with the fewest acknowledgements.
  absl::Status WaitForAcks(int64_t n, absl::Duration timeout);
  // Errors any writer hit so far (before a kill there must be none).
  std::vector<absl::Status> Errors() const;
  // Asks the writers to stop after their current request and joins them.
  // After a kill they stop at their first error instead.
  void StopAndJoin();

  // Checks the keys under the prefix in `state` (a full scan after the
  // restart, whose header revision is `revision`); adds gtest failures.
  void Verify(const std::map<std::string, ledgerkv::v1::KeyValue>& state, int64_t revision) const;

  int64_t TotalAcked() const;
  // Writers whose last write has an unknown outcome (after a kill: those
  // that had a write in flight).
  int InFlight() const;
  // Highest header revision of any acknowledged write.
  int64_t MaxAckedRevision() const;

 private:
  struct Writer {
    Kind kind;
    int index;
    std::string key_prefix;  // <prefix><kind>-<index>/
    mutable absl::Mutex mu;
    int64_t acked ABSL_GUARDED_BY(mu) = 0;
    bool in_flight ABSL_GUARDED_BY(mu) = false;
    absl::Status error ABSL_GUARDED_BY(mu);
    int64_t max_revision ABSL_GUARDED_BY(mu) = 0;
    // kPut: header revision of the ack of put n (index n-1).
    std::vector<int64_t> put_revisions ABSL_GUARDED_BY(mu);
  };

  void Run(Writer* w);
  // One write (op number n, 1-based); OK iff acknowledged and its answer was
  // right (a wrong answer is also a gtest failure).
  absl::Status DoOp(ledgerkv::v1::KV::Stub& stub, Writer* w, int64_t n, int64_t* revision);
  void VerifyWriter(const Writer& w, const std::map<std::string, ledgerkv::v1::KeyValue>& state,
                    int64_t revision) const;

  std::string table_;
  std::string prefix_;
  std::vector<std::unique_ptr<Writer>> writers_;
  std::vector<std::thread> threads_;
  std::shared_ptr<grpc::Channel> channel_;
  std::atomic<bool> stop_{false};
  int64_t put_padding_ = 0;
};

}  // namespace ledgerkv::testing
