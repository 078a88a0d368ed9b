#include "tests/linearizability.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::testing {
namespace {

// Register values are interned per key; 0 is "absent".
constexpr int kAbsent = 0;
constexpr int kCannotRun = -1;
// How many of the last linearized ops a violation report shows.
constexpr size_t kReportTail = 5;

std::string Quote(const Value& v) {
  return v.has_value() ? absl::StrCat("\"", absl::CHexEscape(*v), "\"") : "absent";
}

std::string FormatTime(int64_t ns) { return absl::FormatDuration(absl::Nanoseconds(ns)); }

// One op of a single key's sub-history, with values interned.
struct KeyOp {
  size_t index = 0;  // into the caller's history
  OpKind kind = OpKind::kRead;
  bool unknown = false;
  int value = kAbsent;
  int expected = kAbsent;
  int observed = kAbsent;
  bool cas_succeeded = false;
  int64_t invoke_ns = 0;
  int64_t complete_ns = 0;
};

// The register value after `op` runs on `state`, or kCannotRun if `op` could
// not have returned what it returned when run there.
int Step(const KeyOp& op, int state) {
  switch (op.kind) {
    case OpKind::kRead:
      return op.observed == state ? state : kCannotRun;
    case OpKind::kWrite:
      return op.value;
    case OpKind::kDelete:
      return kAbsent;
    case OpKind::kCas:
      // An unknown CAS that runs applies iff the compare holds; "never ran"
      // is covered by linearizing it after every known op.
      if (op.unknown) return state == op.expected ? op.value : state;
      if (op.cas_succeeded) return state == op.expected ? op.value : kCannotRun;
      return state != op.expected ? state : kCannotRun;
  }
  return kCannotRun;
}

using Bits = std::vector<uint64_t>;

void SetBit(Bits& bits, int i, bool on) {
  const uint64_t mask = uint64_t{1} << (i % 64);
  if (on) {
    bits[i / 64] |= mask;
  } else {
    bits[i / 64] &= ~mask;
  }
}

bool IsSubset(const Bits& a, const Bits& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if ((a[i] & ~b[i]) != 0) return false;
  }
  return true;
}

// Which known ops are linearized, and the register value.
struct CacheKey {
  Bits known;
  int state = kAbsent;

  bool operator==(const CacheKey& o) const { return state == o.state && known == o.known; }
  template <typename H>
  friend H AbslHashValue(H h, const CacheKey& k) {
    return H::combine(std::move(h), k.known, k.state);
  }
};

// Wing-Gong search with Lowe's memoization over one key's ops.
//
// Known ops (with a return) live in a doubly linked list of call and return
// events in time order; linearizing an op unlinks its events, backtracking
// relinks them (strictly LIFO, so relinking in reverse order restores the
// list exactly). The candidates at each point are the known calls before the
// first linked return, then the unknown ops invoked by that return's time:
// Run() picks which of the two groups comes first.
//
// Unknown ops have no return: they may be linearized at any point after
// their invoke, or never. Hence a search state (known set K, unknown set U,
// value x) is dominated by (K, U', x) for any U' subset of U: every way to
// finish from the first also finishes from the second, which merely keeps
// more ops available. The memo is keyed by (K, x) and holds the U sets seen;
// a state is skipped if a subset of its U was seen (all seen states failed
// or are its ancestors). Without unknown ops this is Lowe's plain memo.
class KeySearch {
 public:
  enum class Verdict { kLinearizable, kViolation, kTimedOut };

  // The deepest point the search reached before failing: the op whose
  // return was passed without it being linearized.
  struct DeadEnd {
    size_t depth = 0;
    int blocked = -1;  // index into ops
    int state = kAbsent;
    std::vector<int> tail;  // the last linearized ops, oldest first
  };

  KeySearch(const std::vector<KeyOp>& ops, absl::Time deadline)
      : ops_(ops), deadline_(deadline), slot_(ops.size(), -1) {
    struct Event {
      int64_t time;
      bool is_return;
      int op;
    };
    std::vector<Event> events;
    std::vector<int> unknown;
    int known_count = 0;
    for (size_t i = 0; i < ops_.size(); ++i) {
      const int op = static_cast<int>(i);
      if (ops_[i].unknown) {
        slot_[i] = static_cast<int>(unknown.size());
        unknown.push_back(op);
        continue;
      }
      slot_[i] = known_count++;
      events.push_back({ops_[i].invoke_ns, false, op});
      events.push_back({ops_[i].complete_ns, true, op});
    }
    // At equal times calls sort first: the ops then count as concurrent,
    // which never invents a violation.
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
      if (a.time != b.time) return a.time < b.time;
      if (a.is_return != b.is_return) return !a.is_return;
      return a.op < b.op;
    });
    std::stable_sort(unknown.begin(), unknown.end(),
                     [&](int a, int b) { return ops_[a].invoke_ns < ops_[b].invoke_ns; });
    // Node 0 of each list is its head sentinel; -1 ends a list.
    const int n = static_cast<int>(events.size());
    next_.resize(n + 1);
    prev_.resize(n + 1);
    event_op_.assign(n + 1, -1);
    event_time_.assign(n + 1, 0);
    is_return_.assign(n + 1, false);
    node_.assign(ops_.size(), -1);
    return_node_.assign(ops_.size(), -1);
    for (int e = 0; e <= n; ++e) {
      next_[e] = e < n ? e + 1 : -1;
      prev_[e] = e - 1;
      if (e == 0) continue;
      const Event& ev = events[e - 1];
      event_op_[e] = ev.op;
      event_time_[e] = ev.time;
      is_return_[e] = ev.is_return;
      (ev.is_return ? return_node_ : node_)[ev.op] = e;
    }
    const int u = static_cast<int>(unknown.size());
    u_next_.resize(u + 1);
    u_prev_.resize(u + 1);
    u_op_.assign(u + 1, -1);
    for (int e = 0; e <= u; ++e) {
      u_next_[e] = e < u ? e + 1 : -1;
      u_prev_[e] = e - 1;
      if (e == 0) continue;
      u_op_[e] = unknown[e - 1];
      node_[unknown[e - 1]] = e;
    }
    known_.assign(known_count / 64 + 1, 0);
    unknown_set_.assign(u / 64 + 1, 0);
    remaining_known_ = known_count;
  }

  // `unknown_first` picks the candidate order: unknown ops before known
  // ones finds linearizations fast (pending writes are applied early), known
  // ones first proves violations faster (states without optional effects
  // come first, so the memo prunes the rest).
  Verdict Run(bool unknown_first) {
    unknown_first_ = unknown_first;
    Restart();
    for (uint64_t iteration = 0;; ++iteration) {
      // Unknown ops left over can all be linearized at the end (or never).
      if (remaining_known_ == 0) return Verdict::kLinearizable;
      if (iteration % 256 == 0 && absl::Now() > deadline_) return Verdict::kTimedOut;
      if (in_unknown_phase_) {
        if (unode_ >= 0 && ops_[u_op_[unode_]].invoke_ns <= event_time_[blocking_]) {
          if (TryLinearize(u_op_[unode_])) {
            Restart();
          } else {
            unode_ = u_next_[unode_];
          }
          continue;
        }
        if (unknown_first_) {
          in_unknown_phase_ = false;
          entry_ = next_[0];
          continue;
        }
      } else {
        if (!is_return_[entry_]) {
          if (TryLinearize(event_op_[entry_])) {
            Restart();
          } else {
            entry_ = next_[entry_];
          }
          continue;
        }
        if (!unknown_first_) {
          in_unknown_phase_ = true;
          unode_ = u_next_[0];
          continue;
        }
      }
      // Every candidate failed: the op returning at `blocking_` cannot take
      // effect before its return after this prefix. Undo the latest choice.
      NoteDeadEnd(event_op_[blocking_]);
      if (stack_.empty()) return Verdict::kViolation;
      const Frame top = stack_.back();
      stack_.pop_back();
      Mark(top.op, false);
      state_ = top.state_before;
      Unlift(top.op);
      blocking_ = top.blocking;  // the lists are as they were at that choice
      in_unknown_phase_ = ops_[top.op].unknown;
      if (in_unknown_phase_) {
        unode_ = u_next_[node_[top.op]];
      } else {
        ++remaining_known_;
        entry_ = next_[node_[top.op]];
      }
    }
  }

  const DeadEnd& dead_end() const { return dead_end_; }

 private:
  struct Frame {
    int op;
    int state_before;
    int blocking;
  };

  // Back to the first candidate. While a known op is left its return is
  // linked, so the first linked return exists; it bounds the candidates.
  void Restart() {
    blocking_ = next_[0];
    while (blocking_ >= 0 && !is_return_[blocking_]) blocking_ = next_[blocking_];
    in_unknown_phase_ = unknown_first_;
    entry_ = next_[0];
    unode_ = u_next_[0];
  }

  bool TryLinearize(int op) {
    // Unknown ops chosen back to back: a blind write or delete right after
    // another unknown op hides that op's effect, and the state it reaches
    // is dominated by choosing it alone, which the first op of the run
    // also tries. Skipping it keeps pending timeouts from being explored
    // as every ordered subset.
    const KeyOp& k = ops_[op];
    if (k.unknown && (k.kind == OpKind::kWrite || k.kind == OpKind::kDelete) && !stack_.empty() &&
        ops_[stack_.back().op].unknown) {
      return false;
    }
    const int after = Step(k, state_);
    if (after == kCannotRun) return false;
    Mark(op, true);
    std::vector<Bits>& seen = memo_[CacheKey{known_, after}];
    for (const Bits& u : seen) {
      if (IsSubset(u, unknown_set_)) {
        Mark(op, false);
        return false;
      }
    }
    seen.push_back(unknown_set_);
    stack_.push_back({op, state_, blocking_});
    state_ = after;
    Lift(op);
    if (!ops_[op].unknown) --remaining_known_;
    return true;
  }

  void NoteDeadEnd(int blocked) {
    if (dead_end_.blocked >= 0 && stack_.size() <= dead_end_.depth) return;
    dead_end_.depth = stack_.size();
    dead_end_.blocked = blocked;
    dead_end_.state = state_;
    dead_end_.tail.clear();
    for (size_t i = stack_.size() - std::min(stack_.size(), kReportTail); i < stack_.size(); ++i) {
      dead_end_.tail.push_back(stack_[i].op);
    }
  }

  void Mark(int op, bool on) { SetBit(ops_[op].unknown ? unknown_set_ : known_, slot_[op], on); }

  static void Unlink(std::vector<int>& next, std::vector<int>& prev, int e) {
    next[prev[e]] = next[e];
    if (next[e] >= 0) prev[next[e]] = prev[e];
  }
  static void Relink(std::vector<int>& next, std::vector<int>& prev, int e) {
    next[prev[e]] = e;
    if (next[e] >= 0) prev[next[e]] = e;
  }
  void Lift(int op) {
    if (ops_[op].unknown) {
      Unlink(u_next_, u_prev_, node_[op]);
      return;
    }
    Unlink(next_, prev_, node_[op]);
    Unlink(next_, prev_, return_node_[op]);
  }
  void Unlift(int op) {
    if (ops_[op].unknown) {
      Relink(u_next_, u_prev_, node_[op]);
      return;
    }
    Relink(next_, prev_, return_node_[op]);
    Relink(next_, prev_, node_[op]);
  }

  const std::vector<KeyOp>& ops_;
  const absl::Time deadline_;
  std::vector<int> slot_;  // bit index of each op in known_ or unknown_set_
  // Known ops' events.
  std::vector<int> next_, prev_, event_op_;
  std::vector<int64_t> event_time_;
  std::vector<bool> is_return_;
  // node_[op]: the op's call event, or its node in the unknown list.
  std::vector<int> node_, return_node_;
  // Unknown ops in invoke order.
  std::vector<int> u_next_, u_prev_, u_op_;

  Bits known_, unknown_set_;
  int state_ = kAbsent;
  size_t remaining_known_ = 0;
  // The cursor: candidates are known calls before `blocking_` (from entry_)
  // and unknown ops invoked by its time (from unode_).
  bool unknown_first_ = true;
  bool in_unknown_phase_ = true;
  int blocking_ = -1;
  int entry_ = -1;
  int unode_ = -1;
  std::vector<Frame> stack_;
  absl::flat_hash_map<CacheKey, std::vector<Bits>> memo_;
  DeadEnd dead_end_;
};

// Builds the per-key view of a history and explains its violations.
class KeyChecker {
 public:
  KeyChecker(const std::vector<Operation>& history, std::string key,
             const std::vector<size_t>& indices)
      : history_(history), key_(std::move(key)) {
    names_.push_back(std::nullopt);
    for (size_t i : indices) {
      const Operation& op = history[i];
      KeyOp k;
      k.index = i;
      k.kind = op.kind;
      k.unknown = op.outcome == Outcome::kUnknown;
      if (op.kind == OpKind::kWrite || op.kind == OpKind::kCas) k.value = Intern(op.value);
      k.expected = Intern(op.expected);
      k.observed = Intern(op.observed);
      k.cas_succeeded = op.cas_succeeded;
      k.invoke_ns = op.invoke_ns;
      k.complete_ns = op.complete_ns;
      ops_.push_back(k);
    }
  }

  CheckResult Check(absl::Time deadline) {
    CheckResult result;
    result.key = key_;
    if (std::string why = ReadOfUnwrittenValue(); !why.empty()) {
      result.explanation = std::move(why);
      return result;
    }
    // Unknown-first settles linearizable histories fast; if it runs out of
    // a quarter of the time left, known-first gets the rest (it proves
    // violations among many unknown ops far faster). Without unknown ops
    // the orders are the same.
    const size_t unknown = UnknownCount();
    absl::Time first_deadline = deadline;
    if (unknown > 0) first_deadline = absl::Now() + (deadline - absl::Now()) / 4;
    auto search = std::make_unique<KeySearch>(ops_, first_deadline);
    KeySearch::Verdict verdict = search->Run(/*unknown_first=*/true);
    if (verdict == KeySearch::Verdict::kTimedOut && unknown > 0) {
      search = std::make_unique<KeySearch>(ops_, deadline);
      verdict = search->Run(/*unknown_first=*/false);
    }
    switch (verdict) {
      case KeySearch::Verdict::kLinearizable:
        result.linearizable = true;
        result.key.clear();
        return result;
      case KeySearch::Verdict::kTimedOut:
        result.timed_out = true;
        result.explanation = absl::StrCat(
            "key ", Quote(key_), ": the search budget ran out (", ops_.size(),
            " ops on this key, ", UnknownCount(), " of unknown outcome); not proven linearizable.\n");
        if (search->dead_end().blocked >= 0) {
          absl::StrAppend(&result.explanation,
                          "The deepest dead end so far (a likely violation, unproven):\n",
                          Explain(search->dead_end(), ""));
        }
        return result;
      case KeySearch::Verdict::kViolation:
        result.explanation = Explain(search->dead_end(), Header());
        return result;
    }
    return result;
  }

 private:
  int Intern(const Value& v) {
    if (!v.has_value()) return kAbsent;
    auto [it, inserted] = ids_.try_emplace(*v, static_cast<int>(names_.size()));
    if (inserted) names_.push_back(*v);
    return it->second;
  }

  std::string Header() const {
    return absl::StrCat("key ", Quote(key_), ": not linearizable (", ops_.size(),
                        " ops on this key after dropping failed ops and unknown reads).\n");
  }

  std::string Window(int64_t from_ns, int64_t to_ns) const {
    return absl::StrCat("Ops on ", Quote(key_), " in [", FormatTime(from_ns), ", ",
                        FormatTime(to_ns), "]:\n", FormatWindow(history_, key_, from_ns, to_ns));
  }

  // Cheap and precise: a read can only observe absent or a value that some
  // write or CAS on this key (that may have taken effect) wrote.
  std::string ReadOfUnwrittenValue() const {
    std::vector<bool> written(names_.size(), false);
    written[kAbsent] = true;
    for (const KeyOp& op : ops_) {
      if (op.kind == OpKind::kWrite || op.kind == OpKind::kCas) written[op.value] = true;
    }
    for (const KeyOp& op : ops_) {
      if (op.kind != OpKind::kRead || written[op.observed]) continue;
      return absl::StrCat(Header(), "Read ", FormatOperation(history_[op.index]),
                          "\nobserved a value that no write or CAS on this key which may have "
                          "taken effect wrote.\n",
                          Window(op.invoke_ns, op.complete_ns));
    }
    return "";
  }

  std::string Reason(const KeyOp& op, int state) const {
    const std::string holds = absl::StrCat("the register holds ", Quote(names_[state]));
    constexpr char kNoOther[] = " (and no other order of the ops that may come first avoids this)";
    if (Step(op, state) == kCannotRun) {
      if (op.kind == OpKind::kRead) {
        return absl::StrCat("it observed ", Quote(names_[op.observed]), " but ", holds, kNoOther);
      }
      if (op.cas_succeeded) {
        return absl::StrCat("it reported success but ", holds, ", not the expected ",
                            Quote(names_[op.expected]), kNoOther);
      }
      return absl::StrCat("it reported failure but ", holds, ", which is the expected value",
                          kNoOther);
    }
    return absl::StrCat(holds, " and it can run there, but every order of it and the ops that ",
                        "may precede it leads to a dead end later");
  }

  size_t UnknownCount() const {
    return std::count_if(ops_.begin(), ops_.end(), [](const KeyOp& op) { return op.unknown; });
  }

  std::string Explain(const KeySearch::DeadEnd& dead, std::string out) const {
    const KeyOp& blocked = ops_[dead.blocked];
    int64_t from = blocked.invoke_ns;
    if (dead.tail.empty()) {
      absl::StrAppend(&out, "No op can be linearized first.\n");
    } else {
      absl::StrAppend(&out, "A longest linearizable prefix the search found has ", dead.depth,
                      " ops, ending with:\n");
      for (int op : dead.tail) {
        absl::StrAppend(&out, "  ", FormatOperation(history_[ops_[op].index]), "\n");
        from = std::min(from, ops_[op].invoke_ns);
      }
      absl::StrAppend(&out, "after which ", Quote(key_), " holds ", Quote(names_[dead.state]),
                      ".\n");
    }
    absl::StrAppend(&out, "Then ", FormatOperation(history_[blocked.index]),
                    "\nmust take effect before it completes, but ", Reason(blocked, dead.state),
                    ".\n",
                    Window(from, blocked.complete_ns));
    return out;
  }

  const std::vector<Operation>& history_;
  const std::string key_;
  std::vector<KeyOp> ops_;
  absl::flat_hash_map<std::string, int> ids_;
  std::vector<Value> names_;  // by interned id
};

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kFailed:
      return "FAILED";
    case Outcome::kUnknown:
      return "UNKNOWN";
  }
  return "?";
}

// An op's input fields only; outcome kUnknown until completed.
Operation Input(int client, const std::string& key, OpKind kind, const std::string& value,
                const Value& expected) {
  Operation op;
  op.client = client;
  op.key = key;
  op.kind = kind;
  op.value = value;
  op.expected = expected;
  op.outcome = Outcome::kUnknown;
  return op;
}

}  // namespace

CheckResult CheckHistory(const std::vector<Operation>& history, absl::Duration budget) {
  const absl::Time deadline = absl::Now() + budget;
  std::map<std::string, std::vector<size_t>> by_key;
  for (size_t i = 0; i < history.size(); ++i) {
    const Operation& op = history[i];
    if (op.outcome == Outcome::kOk && op.complete_ns < op.invoke_ns) {
      CheckResult bad;
      bad.key = op.key;
      bad.explanation =
          absl::StrCat("malformed history: op ", i, " completes before its invoke: ",
                       FormatOperation(op));
      return bad;
    }
    if (op.outcome == Outcome::kFailed) continue;
    if (op.outcome == Outcome::kUnknown && op.kind == OpKind::kRead) continue;
    by_key[op.key].push_back(i);
  }
  for (const auto& [key, indices] : by_key) {
    CheckResult r = KeyChecker(history, key, indices).Check(deadline);
    if (!r.linearizable) return r;
  }
  CheckResult ok;
  ok.linearizable = true;
  return ok;
}

std::string FormatOperation(const Operation& op) {
  std::string out = absl::StrCat("c", op.client, " ");
  const std::string key = absl::StrCat("\"", absl::CHexEscape(op.key), "\"");
  const bool ok = op.outcome == Outcome::kOk;
  switch (op.kind) {
    case OpKind::kRead:
      absl::StrAppend(&out, "read(", key, ")", ok ? absl::StrCat(" -> ", Quote(op.observed)) : "");
      break;
    case OpKind::kWrite:
      absl::StrAppend(&out, "write(", key, ", ", Quote(op.value), ")");
      break;
    case OpKind::kCas:
      absl::StrAppend(&out, "cas(", key, ", ", Quote(op.expected), " -> ", Quote(op.value), ")",
                      ok ? (op.cas_succeeded ? " -> true" : " -> false") : "");
      break;
    case OpKind::kDelete:
      absl::StrAppend(&out, "delete(", key, ")");
      break;
  }
  absl::StrAppend(&out, " ", OutcomeName(op.outcome), " [", FormatTime(op.invoke_ns), ", ",
                  op.outcome == Outcome::kUnknown ? "?" : FormatTime(op.complete_ns), "]");
  return out;
}

std::string FormatWindow(const std::vector<Operation>& history, const std::string& key,
                         int64_t from_ns, int64_t to_ns, int max_lines) {
  std::vector<const Operation*> in;
  for (const Operation& op : history) {
    if (!key.empty() && op.key != key) continue;
    const bool open = op.outcome == Outcome::kUnknown;
    if (op.invoke_ns > to_ns || (!open && op.complete_ns < from_ns)) continue;
    in.push_back(&op);
  }
  std::stable_sort(in.begin(), in.end(), [](const Operation* a, const Operation* b) {
    return a->invoke_ns < b->invoke_ns;
  });
  std::string out;
  const size_t shown = std::min(in.size(), static_cast<size_t>(std::max(max_lines, 0)));
  for (size_t i = 0; i < shown; ++i) absl::StrAppend(&out, "  ", FormatOperation(*in[i]), "\n");
  if (shown < in.size()) absl::StrAppend(&out, "  ... ", in.size() - shown, " more\n");
  return out;
}

HistoryRecorder::HistoryRecorder() : start_ns_(NowNs()) {}

int64_t HistoryRecorder::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t HistoryRecorder::Invoke(const Operation& op) {
  Operation recorded = Input(op.client, op.key, op.kind, op.value, op.expected);
  absl::MutexLock lock(&mu_);
  // Stamped under the lock so that indices are in invoke order.
  recorded.invoke_ns = NowNs() - start_ns_;
  ops_.push_back(std::move(recorded));
  completed_.push_back(false);
  return static_cast<int64_t>(ops_.size()) - 1;
}

int64_t HistoryRecorder::InvokeRead(int client, const std::string& key) {
  return Invoke(Input(client, key, OpKind::kRead, "", std::nullopt));
}

int64_t HistoryRecorder::InvokeWrite(int client, const std::string& key,
                                     const std::string& value) {
  return Invoke(Input(client, key, OpKind::kWrite, value, std::nullopt));
}

int64_t HistoryRecorder::InvokeCas(int client, const std::string& key, const Value& expected,
                                   const std::string& new_value) {
  return Invoke(Input(client, key, OpKind::kCas, new_value, expected));
}

int64_t HistoryRecorder::InvokeDelete(int client, const std::string& key) {
  return Invoke(Input(client, key, OpKind::kDelete, "", std::nullopt));
}

void HistoryRecorder::Complete(int64_t index, Outcome outcome, const Value& observed,
                               bool cas_succeeded) {
  // Stamped before waiting for the lock would be tighter, but a later stamp
  // only widens the window (never invents a violation); under the lock the
  // stamp is also never before this op's invoke.
  absl::MutexLock lock(&mu_);
  if (index < 0 || index >= static_cast<int64_t>(ops_.size()) || completed_[index]) {
    std::fprintf(stderr, "HistoryRecorder::Complete: bad or repeated index %lld\n",
                 static_cast<long long>(index));
    std::abort();
  }
  completed_[index] = true;
  Operation& op = ops_[index];
  op.complete_ns = NowNs() - start_ns_;
  op.outcome = outcome;
  if (outcome == Outcome::kOk) {
    op.observed = observed;
    op.cas_succeeded = cas_succeeded;
  }
}

std::vector<Operation> HistoryRecorder::History() const {
  absl::MutexLock lock(&mu_);
  return ops_;
}

}  // namespace ledgerkv::testing
