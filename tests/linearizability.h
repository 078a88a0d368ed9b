// A linearizability checker for histories of concurrent KV clients (issue 4):
// each key is a register holding a string or nothing (absent, the initial
// state); operations are read, write (put), compare-and-set and delete. The
// history is split per key (linearizability is compositional, so a history
// is linearizable iff every key's sub-history is) and each key is searched
// Wing-Gong style with Lowe's memoization: walk the call/return events in
// time order, try to linearize any call whose return has not been passed,
// backtrack on a return whose call is not yet linearized, and never revisit a
// (set of linearized ops, register value) pair.
//
// How to record a history that the checker can judge well:
// - Write a value no other operation writes (for example "c3-17": client 3,
//   its 17th write). With repeated values a stale read can look like a fresh
//   one and the checker can only report what the values prove.
// - Stamp invoke before the request leaves and complete after the answer
//   arrives, from one monotonic clock (HistoryRecorder does both).
// - An error that proves the operation did nothing (a retry-safe UNAVAILABLE,
//   FAILED_PRECONDITION before anything was applied) is kFailed. A deadline
//   or a lost connection is kUnknown: the op may take effect at any time
//   after its invoke, or never. Reporting a maybe-applied write as kFailed
//   turns a correct server into a "violation"; reporting a failed one as
//   kUnknown only weakens the check.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ledgerkv::testing {

// A register value; std::nullopt means the key is absent.
using Value = std::optional<std::string>;

enum class OpKind { kRead, kWrite, kCas, kDelete };

enum class Outcome {
  kOk,       // completed; its result fields are filled in
  kFailed,   // definitely did not take effect (dropped by the checker)
  kUnknown,  // may or may not have taken effect, at any time after invoke
};

struct Operation {
  int client = 0;
  std::string key;
  OpKind kind = OpKind::kRead;
  // kWrite: the value written. kCas: the value written if the compare holds.
  // Unused for kRead and kDelete.
  std::string value;
  // kCas: the value compared against; std::nullopt = "the key is absent".
  Value expected;
  // Nanoseconds on one clock shared by the whole history. complete_ns is
  // ignored for kUnknown (it is taken as +infinity).
  int64_t invoke_ns = 0;
  int64_t complete_ns = 0;
  Outcome outcome = Outcome::kUnknown;
  // kRead with kOk: the value observed.
  Value observed;
  // kCas with kOk: true if the compare held and the new value was written.
  bool cas_succeeded = false;
};

struct CheckResult {
  // True only if a linearization was found for every key. False on a
  // violation, on a malformed history and when the budget ran out
  // (timed_out): callers must treat all three as failures.
  bool linearizable = false;
  bool timed_out = false;
  // For a violation: the key whose sub-history has no linearization.
  std::string key;
  // Empty when linearizable. Otherwise a human-readable account: for a
  // violation, the longest linearizable prefix the search found, the op
  // that could not take effect next and why, and the ops of that key in the
  // time window around it (FormatOperation lines).
  std::string explanation;
};

// Checks `history` (ops of any keys, in any order). kFailed ops and kUnknown
// reads are dropped first. Keys are checked in sorted order; the first
// violation stops the check. `budget` bounds the wall time of the whole
// search; when it runs out the result has timed_out = true and
// linearizable = false.
// Cost: fast when few ops overlap (a few thousand ops per key with 5-10
// clients take milliseconds, also with many unknown ops). Ops of unknown
// outcome stay pending forever, so proving a violation must rule out every
// placement of each: with a handful per key that takes well under seconds,
// with dozens in a history of thousands of ops it can take seconds to
// minutes. A quarter of the remaining budget goes to a search tuned for
// finding a linearization, the rest to one tuned for proving a violation.
// On timeout the explanation shows the deepest dead end reached, usually
// where the violation is. Spread load over several keys and keep timeouts
// per key to dozens for crisp verdicts.
// A history is malformed (linearizable = false, explanation says why, key
// set) if a kOk op completes before its invoke.
CheckResult CheckHistory(const std::vector<Operation>& history,
                         absl::Duration budget = absl::Seconds(60));

// One line: client, kind with arguments and result, outcome and times, e.g.
//   c2 cas("v1" -> "v7") = true   [1200us, 1350us]
std::string FormatOperation(const Operation& op);

// The ops on `key` (all keys if `key` is empty) whose [invoke, complete]
// interval meets [from_ns, to_ns], one FormatOperation line each in invoke
// order, at most `max_lines` lines (a final "... N more" line says how many
// were left out).
std::string FormatWindow(const std::vector<Operation>& history, const std::string& key,
                         int64_t from_ns, int64_t to_ns, int max_lines = 40);

// Records a history from concurrent client threads. Times are nanoseconds
// of a monotonic clock since the recorder was constructed. Thread-safe.
class HistoryRecorder {
 public:
  HistoryRecorder();
  HistoryRecorder(const HistoryRecorder&) = delete;
  HistoryRecorder& operator=(const HistoryRecorder&) = delete;

  // Records `op` with invoke_ns = now and outcome kUnknown (what it stays if
  // never completed: the client gave up waiting) and returns its index.
  // Only the input fields of `op` are used (client, key, kind, value,
  // expected). Call just before sending the request.
  int64_t Invoke(const Operation& op);
  int64_t InvokeRead(int client, const std::string& key);
  int64_t InvokeWrite(int client, const std::string& key, const std::string& value);
  int64_t InvokeCas(int client, const std::string& key, const Value& expected,
                    const std::string& new_value);
  int64_t InvokeDelete(int client, const std::string& key);

  // Sets complete_ns = now and the outcome; for kOk, `observed` is a read's
  // result and `cas_succeeded` a CAS's. Call just after the answer arrives.
  // Completing with kUnknown records that the outcome cannot be known.
  // REQUIRES: `index` was returned by Invoke and not completed yet
  // (otherwise aborts: a recording bug would make every verdict meaningless).
  void Complete(int64_t index, Outcome outcome, const Value& observed = std::nullopt,
                bool cas_succeeded = false);

  // A copy of everything recorded so far, in invoke order.
  std::vector<Operation> History() const;

 private:
  int64_t NowNs() const;

  // Constant after construction.
  const int64_t start_ns_;

  mutable absl::Mutex mu_;
  std::vector<Operation> ops_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> completed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledgerkv::testing
