#include "ledger/replica_read.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ledger/entry_format.h"
#include "ledger/rpc_gather.h"

namespace ledgerkv::ledger {
namespace {

using bookie::v1::Code;
using bookie::v1::Entry;
using bookie::v1::ReadRequest;
using bookie::v1::ReadResponse;
using ReadGather = Gather<ReadRequest, ReadResponse>;

// A round reads at most this many chunks (of up to max_entries_per_read_rpc
// entries each) with at most kMaxReadsPerRound RPCs, so a long catch-up read
// keeps several bookies (and their disks) busy at once without flooding them.
constexpr int kMaxChunksPerRound = 8;
constexpr int kMaxReadsPerRound = 64;

// What the replicas said about one entry so far.
struct EntryReads {
  bool have = false;
  uint64_t tried = 0;  // ensemble indices that answered without a good copy
  int no_such = 0;
  int corrupt = 0;
  uint64_t corrupt_at = 0;  // ensemble indices that answered this entry's copy corrupt
  int errors = 0;
  // Ensemble indices whose read of this entry was cancelled because it was
  // slower than speculative_read_timeout. Not a try: the entry's outcome
  // must not depend on a bookie's speed, so such a bookie is still asked
  // again (and then waited for) when no other replica can settle the entry.
  uint64_t speculated = 0;
  std::string last_problem;
};

struct ReadPlan {
  int index = 0;  // ensemble index asked
  int64_t lo = 0, hi = 0;
};

std::string CodeName(Code code) { return bookie::v1::Code_Name(code); }

absl::Status Unresolved(uint64_t ledger_id, int64_t entry_id, const EntryReads& r) {
  const std::string what = absl::StrCat("entry ", ledger_id, ":", entry_id, ": ");
  // A replica that could not be read may hold an intact copy: only when
  // every replica of the write set answered (corrupt or absent) is the entry
  // known to be lost. Otherwise the caller may retry later (L10: a corrupt
  // copy is never absence, and an unanswered replica is never loss).
  if (r.errors > 0) {
    return absl::UnavailableError(absl::StrCat(what, "no replica could be read intact (",
                                               r.errors, " unreadable, ", r.corrupt, " corrupt, ",
                                               r.no_such, " missing; last: ", r.last_problem, ")"));
  }
  if (r.corrupt > 0) {
    return absl::DataLossError(absl::StrCat(what, "no intact replica (", r.corrupt, " corrupt, ",
                                            r.no_such, " missing; last: ", r.last_problem, ")"));
  }
  return absl::DataLossError(
      absl::StrCat(what, "every replica (", r.no_such, ") says it does not hold the entry"));
}

// Starts every call of `calls` (a Read each); a bookie that cannot be
// resolved fails its call at once with UNAVAILABLE.
void StartReads(ClientCore& core, ReadGather& gather, const std::vector<ReadGather::Call*>& calls) {
  for (ReadGather::Call* call : calls) {
    auto conn = core.pool.ForBookie(call->bookie_id);
    if (!conn.ok()) {
      gather.Fail(call, grpc::Status(grpc::StatusCode::UNAVAILABLE, conn.status().ToString()));
      continue;
    }
    gather.Start(call, *std::move(conn), core.options.rpc_timeout,
                 [](auto* stub, auto* ctx, auto* req, auto* resp, auto cb) {
                   stub->async()->Read(ctx, req, resp, std::move(cb));
                 });
  }
}

// Waits for a round's calls. From speculative_read_timeout on, and again
// after every answer, cancels each call still unanswered whose every entry
// (of those it was asked for) was never given up on with this bookie and
// has another replica left to try: not tried, not given up on, not marked
// slow, and with no unanswered or failed call in this round. The other
// calls run to their deadline. Returns, by tag, the calls it cancelled (one
// may still have answered first: its status says which).
std::vector<bool> AwaitRoundSpeculating(ClientCore& core, ReadGather& gather,
                                        const std::vector<ReadGather::Call*>& calls,
                                        const std::vector<ReadPlan>& plans,
                                        const std::map<int64_t, EntryReads>& outstanding,
                                        const std::vector<bool>& slow, int E, int Qw) {
  std::vector<bool> cancelled(calls.size(), false);
  const absl::Duration timeout = core.options.speculative_read_timeout;
  if (gather.AwaitAllFor(timeout)) return cancelled;  // InfiniteDuration: speculation off
  auto cancellable = [&](const ReadPlan& plan, const std::vector<bool>& unusable) {
    const int i = plan.index;
    const uint64_t bit = uint64_t{1} << i;
    for (int64_t e = plan.lo; e <= plan.hi; ++e) {
      auto o = outstanding.find(e);
      if (o == outstanding.end() || !InWriteSet(e, i, E, Qw) || (o->second.tried & bit)) {
        continue;  // not asked of this bookie
      }
      const EntryReads& r = o->second;
      if (r.speculated & bit) return false;  // given up on once already
      bool elsewhere = false;
      for (int j : WriteSet(e, E, Qw)) {
        const uint64_t other = uint64_t{1} << j;
        elsewhere |= j != i && !unusable[j] && !(r.tried & other) && !(r.speculated & other);
      }
      if (!elsewhere) return false;
    }
    return true;
  };
  std::vector<bool> pending(calls.size());
  for (;;) {
    // A snapshot under mu(); the decision (which walks the entries) is
    // taken without it, so gRPC's callback threads are not held up. A call
    // that completes meanwhile is cancelled to no effect.
    size_t done = 0;
    std::vector<bool> unusable = slow;
    {
      absl::MutexLock l(&gather.mu());
      for (const ReadGather::Call* call : calls) {
        pending[call->tag] = !call->done;
        done += call->done;
        if (!call->done || !call->status.ok() || call->response.code() != Code::OK) {
          unusable[plans[call->tag].index] = true;
        }
      }
    }
    if (done == calls.size()) break;
    for (ReadGather::Call* call : calls) {
      if (!pending[call->tag] || cancelled[call->tag] || !cancellable(plans[call->tag], unusable)) {
        continue;
      }
      cancelled[call->tag] = true;
      // Without mu(): gRPC may run the callback inline from TryCancel.
      call->ctx.TryCancel();
    }
    // Until the next answer (a cancelled call ends at once): it may make
    // another replica usable for a call still waiting.
    gather.Await([&] {
      size_t now = 0;
      for (const ReadGather::Call* call : calls) now += call->done;
      return now > done;
    });
  }
  return cancelled;
}

// Reads first..last (those `wanted` returns true for, if set), all within
// `segment`, into out[e - out_base].
absl::Status ReadSegmentRange(ClientCore& core, const meta::v1::LedgerMetadata& metadata,
                              int segment_index, int64_t first, int64_t last, int64_t out_base,
                              std::vector<Entry>& out, const std::function<bool(int64_t)>& wanted,
                              std::vector<CorruptCopy>* corrupt_found) {
  const meta::v1::Segment& segment = metadata.segments(segment_index);
  const int E = metadata.ensemble_size();
  const int Qw = metadata.write_quorum();
  const uint64_t ledger_id = metadata.id();
  const int cap = std::max(1, core.options.max_entries_per_read_rpc);
  std::map<int64_t, EntryReads> outstanding;
  for (int64_t e = first; e <= last; ++e) {
    if (!wanted || wanted(e)) outstanding[e];
  }

  while (!outstanding.empty()) {
    // Plan a round: consecutive chunks of at most `cap` outstanding entries;
    // in each chunk, repeatedly ask the bookie that can serve most of the
    // still-unassigned entries (ties rotate with the chunk number, so with
    // E == Qw successive chunks go to different bookies). Bookies that did
    // not answer a recent read are asked only for what no other replica
    // left to try holds (SlowBookies). (LedgerRereplicationTest's corrupt
    // copy tests rely on this order to meet a corrupt copy before an
    // intact one: change them with it.)
    std::vector<bool> slow(E);
    for (int i = 0; i < E; ++i) slow[i] = core.slow_bookies.IsSlow(segment.bookies(i));
    std::vector<ReadPlan> plans;
    auto it = outstanding.begin();
    for (int chunk = 0; it != outstanding.end() && chunk < kMaxChunksPerRound; ++chunk) {
      std::vector<int64_t> unassigned;
      const int64_t chunk_start = it->first;
      while (it != outstanding.end() && it->first < chunk_start + cap) {
        unassigned.push_back(it->first);
        ++it;
      }
      while (!unassigned.empty()) {
        // First pass: bookies not slow, for entries they were neither tried
        // nor given up on for. Second pass: any untried replica.
        std::vector<int> fresh(E, 0), untried(E, 0);
        for (int64_t e : unassigned) {
          const EntryReads& r = outstanding[e];
          for (int i : WriteSet(e, E, Qw)) {
            const uint64_t bit = uint64_t{1} << i;
            if (r.tried & bit) continue;
            ++untried[i];
            if (!slow[i] && !(r.speculated & bit)) ++fresh[i];
          }
        }
        int best = -1;
        bool second_pass = false;
        for (int pass = 0; pass < 2 && best < 0; ++pass) {
          const std::vector<int>& count = pass == 0 ? fresh : untried;
          for (int k = 0; k < E; ++k) {
            const int i = (chunk + k) % E;
            if (count[i] > 0 && (best < 0 || count[i] > count[best])) best = i;
          }
          second_pass = pass == 1;
        }
        if (best < 0) return Unresolved(ledger_id, unassigned.front(), outstanding[unassigned.front()]);
        const uint64_t best_bit = uint64_t{1} << best;
        // One read per bookie per chunk, even where the bookie does not
        // hold every entry of its span (with E > Qw it holds runs of Qw
        // entries out of every E): it answers NO_SUCH_ENTRY for each id in
        // between, which the answer loop below ignores for ids outside the
        // bookie's write set. A read per run instead cost ~2 RPCs per 3
        // entries with E=3, Qw=2.
        std::vector<int64_t> rest;
        for (int64_t e : unassigned) {
          const EntryReads& r = outstanding[e];
          if (!InWriteSet(e, best, E, Qw) || (r.tried & best_bit) ||
              (!second_pass && (r.speculated & best_bit))) {
            rest.push_back(e);
          } else if (!plans.empty() && plans.back().index == best && plans.back().lo + cap > e) {
            plans.back().hi = e;
          } else {
            plans.push_back(ReadPlan{best, e, e});
          }
        }
        unassigned = std::move(rest);
      }
      if (static_cast<int>(plans.size()) >= kMaxReadsPerRound) break;
    }

    auto gather = ReadGather::Make();
    std::vector<ReadGather::Call*> calls;
    for (size_t p = 0; p < plans.size(); ++p) {
      const int i = plans[p].index;
      ReadGather::Call* call = gather->Add(static_cast<int>(p), segment.bookies(i));
      call->request.set_expected_instance_id(InstanceOf(segment, i));
      call->request.set_ledger_id(ledger_id);
      call->request.set_first_entry_id(plans[p].lo);
      call->request.set_count(static_cast<int32_t>(plans[p].hi - plans[p].lo + 1));
      call->request.set_max_bytes(core.options.max_bytes_per_read_rpc);
      calls.push_back(call);
    }
    StartReads(core, *gather, calls);
    const std::vector<bool> speculated =
        AwaitRoundSpeculating(core, *gather, calls, plans, outstanding, slow, E, Qw);

    for (ReadGather::Call* call : calls) {
      const ReadPlan& plan = plans[call->tag];
      const int i = plan.index;
      const uint64_t bit = uint64_t{1} << i;
      auto fail_assigned = [&](bool corrupt, const std::string& problem) {
        for (int64_t e = plan.lo; e <= plan.hi; ++e) {
          auto o = outstanding.find(e);
          if (o == outstanding.end() || !InWriteSet(e, i, E, Qw) || (o->second.tried & bit)) {
            continue;
          }
          o->second.tried |= bit;
          // Not in corrupt_at: a request-level answer does not say which
          // copies are corrupt (bookies answer CORRUPT per entry).
          (corrupt ? o->second.corrupt : o->second.errors)++;
          o->second.last_problem = problem;
        }
      };
      if (speculated[call->tag] && call->status.error_code() == grpc::StatusCode::CANCELLED) {
        // Given up on for now: slow, so that the next rounds ask the other
        // replicas first; not tried, so that it is asked again (and waited
        // for) if they cannot settle an entry.
        core.slow_bookies.Mark(call->bookie_id);
        for (int64_t e = plan.lo; e <= plan.hi; ++e) {
          auto o = outstanding.find(e);
          if (o != outstanding.end() && InWriteSet(e, i, E, Qw) && !(o->second.tried & bit)) {
            o->second.speculated |= bit;
          }
        }
        continue;
      }
      NoteCallOutcome(core, *call);
      if (!call->status.ok()) {
        fail_assigned(false, absl::StrCat("bookie ", call->bookie_id, ": ",
                                          call->status.error_message()));
        continue;
      }
      if (call->response.code() == Code::NO_SUCH_LEDGER) {
        for (int64_t e = plan.lo; e <= plan.hi; ++e) {
          auto o = outstanding.find(e);
          if (o == outstanding.end() || !InWriteSet(e, i, E, Qw) || (o->second.tried & bit)) {
            continue;
          }
          o->second.tried |= bit;
          o->second.no_such++;
          o->second.last_problem = absl::StrCat("bookie ", call->bookie_id, ": NO_SUCH_LEDGER");
        }
        continue;
      }
      if (call->response.code() != Code::OK) {
        fail_assigned(call->response.code() == Code::CORRUPT,
                      absl::StrCat("bookie ", call->bookie_id, ": ",
                                   CodeName(call->response.code())));
        continue;
      }
      for (const auto& result : call->response.results()) {
        const int64_t e = result.entry_id();
        if (e < plan.lo || e > plan.hi) continue;
        auto o = outstanding.find(e);
        if (o == outstanding.end()) continue;
        EntryReads& reads = o->second;
        // An id of a plan's span that this bookie was not asked for (not
        // in its write set, or tried with it already): only an intact copy
        // counts; its other answers say nothing new.
        const bool ours = InWriteSet(e, i, E, Qw) && !(reads.tried & bit);
        if (result.code() == Code::OK) {
          absl::Status verified = VerifyEntry(result.entry(), ledger_id, e, call->bookie_id);
          if (verified.ok()) {
            out[e - out_base] = result.entry();
            if (corrupt_found != nullptr) {
              for (int k = 0; k < E; ++k) {
                if (reads.corrupt_at & (uint64_t{1} << k)) {
                  corrupt_found->push_back(CorruptCopy{e, segment_index, k});
                }
              }
            }
            outstanding.erase(o);
            continue;
          }
          if (!ours) continue;
          reads.corrupt++;
          reads.corrupt_at |= bit;
          reads.last_problem = verified.ToString();
        } else if (!ours) {
          continue;
        } else if (result.code() == Code::NO_SUCH_ENTRY || result.code() == Code::NO_SUCH_LEDGER) {
          reads.no_such++;
          reads.last_problem = absl::StrCat("bookie ", call->bookie_id, ": ", CodeName(result.code()));
        } else if (result.code() == Code::CORRUPT) {
          reads.corrupt++;
          reads.corrupt_at |= bit;
          reads.last_problem = absl::StrCat("bookie ", call->bookie_id, ": CORRUPT");
        } else {
          reads.errors++;
          reads.last_problem = absl::StrCat("bookie ", call->bookie_id, ": ", CodeName(result.code()));
        }
        reads.tried |= bit;
      }
      // Entries past a short (max_bytes) answer stay untried with this
      // bookie and are asked for again next round. But a bookie always
      // answers the first id asked for: an answer without it (empty, or
      // only ids not asked of it) would be planned again forever. Count it
      // as an error for every entry the bookie was asked for.
      auto first = outstanding.find(plan.lo);
      if (first != outstanding.end() && !(first->second.tried & bit)) {
        fail_assigned(false, absl::StrCat("bookie ", call->bookie_id,
                                          " returned no result for entry ", plan.lo));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Entry>> ReadReplicas(ClientCore& core,
                                                const meta::v1::LedgerMetadata& metadata,
                                                int64_t first, int64_t last,
                                                const std::function<bool(int64_t)>& wanted,
                                                std::vector<CorruptCopy>* corrupt) {
  std::vector<Entry> out(static_cast<size_t>(last - first + 1));
  for (int s = 0; s < metadata.segments_size(); ++s) {
    const meta::v1::Segment& segment = metadata.segments(s);
    const int64_t seg_first = segment.first_entry_id();
    const int64_t seg_last = s + 1 < metadata.segments_size()
                                 ? metadata.segments(s + 1).first_entry_id() - 1
                                 : INT64_MAX;
    const int64_t lo = std::max(first, seg_first);
    const int64_t hi = std::min(last, seg_last);
    if (lo > hi) continue;
    absl::Status status = ReadSegmentRange(core, metadata, s, lo, hi, first, out, wanted, corrupt);
    if (!status.ok()) return status;
  }
  return out;
}

absl::StatusOr<Entry> ReadEntryFromAnyReplica(ClientCore& core,
                                              const meta::v1::LedgerMetadata& metadata,
                                              int64_t entry_id) {
  const int E = metadata.ensemble_size();
  const int Qw = metadata.write_quorum();
  const uint64_t ledger_id = metadata.id();
  int s = metadata.segments_size() - 1;
  while (s > 0 && metadata.segments(s).first_entry_id() > entry_id) --s;
  const meta::v1::Segment& segment = metadata.segments(s);

  auto gather = ReadGather::Make();
  std::vector<ReadGather::Call*> calls;
  for (int i : WriteSet(entry_id, E, Qw)) {
    ReadGather::Call* call = gather->Add(i, segment.bookies(i));
    call->request.set_expected_instance_id(InstanceOf(segment, i));
    call->request.set_ledger_id(ledger_id);
    call->request.set_first_entry_id(entry_id);
    call->request.set_count(1);
    call->request.set_max_bytes(core.options.max_bytes_per_read_rpc);
    calls.push_back(call);
  }
  StartReads(core, *gather, calls);
  // The call's intact copy of the entry, or nullptr. An intact copy from
  // any replica ends the wait.
  const auto intact = [&](const ReadGather::Call& call) -> const Entry* {
    if (!call.done || !call.status.ok() || call.response.code() != Code::OK) return nullptr;
    for (const auto& result : call.response.results()) {
      if (result.entry_id() == entry_id && result.code() == Code::OK &&
          VerifyEntry(result.entry(), ledger_id, entry_id, call.bookie_id).ok()) {
        return &result.entry();
      }
    }
    return nullptr;
  };
  gather->Await([&] {
    return std::any_of(calls.begin(), calls.end(),
                       [&](ReadGather::Call* c) { return intact(*c) != nullptr; });
  });
  // Every call is done here, or one has an intact copy (read under mu()).
  absl::MutexLock l(&gather->mu());
  EntryReads reads;
  for (ReadGather::Call* call : calls) {
    if (!call->done) continue;  // another replica answered; cancelled with the gather
    NoteCallOutcome(core, *call);
    if (!call->status.ok()) {
      reads.errors++;
      reads.last_problem = absl::StrCat("bookie ", call->bookie_id, ": ", call->status.error_message());
      continue;
    }
    if (const Entry* copy = intact(*call)) return *copy;
    Code code = call->response.code();
    bool answered = code != Code::OK;
    if (code == Code::OK) {
      for (const auto& result : call->response.results()) {
        if (result.entry_id() != entry_id) continue;
        answered = true;
        code = result.code() == Code::OK ? Code::CORRUPT : result.code();  // OK: failed to verify
      }
    }
    if (!answered) {
      // A reply without the entry is no proof of absence (only a positive
      // NO_SUCH_ENTRY is): the replica could not be read.
      reads.errors++;
      reads.last_problem = absl::StrCat("bookie ", call->bookie_id, " returned no result for it");
      continue;
    }
    if (code == Code::NO_SUCH_ENTRY || code == Code::NO_SUCH_LEDGER) {
      reads.no_such++;
    } else if (code == Code::CORRUPT) {
      reads.corrupt++;
    } else {
      reads.errors++;
    }
    reads.last_problem = absl::StrCat("bookie ", call->bookie_id, ": ", CodeName(code));
  }
  return Unresolved(ledger_id, entry_id, reads);
}

absl::StatusOr<int64_t> ReadLacFromBookies(ClientCore& core,
                                           const meta::v1::LedgerMetadata& metadata,
                                           int64_t wait_if_lac_at_most, absl::Duration wait) {
  using LacGather = Gather<bookie::v1::ReadLacRequest, bookie::v1::ReadLacResponse>;
  const meta::v1::Segment& segment = metadata.segments(metadata.segments_size() - 1);
  const bool long_poll = wait_if_lac_at_most >= -1 && wait > absl::ZeroDuration();
  auto gather = LacGather::Make();
  std::vector<LacGather::Call*> calls;
  for (int i = 0; i < segment.bookies_size(); ++i) {
    LacGather::Call* call = gather->Add(i, segment.bookies(i));
    call->request.set_expected_instance_id(InstanceOf(segment, i));
    call->request.set_ledger_id(metadata.id());
    call->request.set_fence(false);
    call->request.set_wait_if_lac_at_most(long_poll ? wait_if_lac_at_most : -2);
    call->request.set_wait_timeout_ms(
        long_poll ? static_cast<int32_t>(absl::ToInt64Milliseconds(wait)) : 0);
    calls.push_back(call);
  }
  const absl::Duration timeout = core.options.rpc_timeout + (long_poll ? wait : absl::ZeroDuration());
  for (LacGather::Call* call : calls) {
    auto conn = core.pool.ForBookie(call->bookie_id);
    if (!conn.ok()) {
      gather->Fail(call, grpc::Status(grpc::StatusCode::UNAVAILABLE, conn.status().ToString()));
      continue;
    }
    gather->Start(call, *std::move(conn), timeout,
                  [](auto* stub, auto* ctx, auto* req, auto* resp, auto cb) {
                    stub->async()->ReadLac(ctx, req, resp, std::move(cb));
                  });
  }
  auto answered = [](const LacGather::Call* call) {
    return call->done && call->status.ok() &&
           (call->response.code() == Code::OK || call->response.code() == Code::NO_SUCH_LEDGER);
  };
  const int64_t floor = segment.first_entry_id() - 1;
  int64_t lac = floor;
  int replies = 0;
  std::string last_problem = "no bookies";
  // A long poll ends at the first LAC above the caller's.
  const auto above = [&] {
    if (!long_poll) return false;
    for (const LacGather::Call* call : calls) {
      if (answered(call) && call->response.lac() > wait_if_lac_at_most) return true;
    }
    return false;
  };
  const auto any_answer = [&] {
    return std::any_of(calls.begin(), calls.end(), answered);
  };
  // Otherwise the highest LAC of all is wanted, but every LAC a bookie
  // reports was true: once one answered, a silent bookie gets
  // speculative_read_timeout more, not the rest of its deadline.
  gather->Await([&] { return above() || any_answer(); });
  gather->AwaitFor(above, core.options.speculative_read_timeout);  // at once if above() holds
  {
    absl::MutexLock l(&gather->mu());
    for (const LacGather::Call* call : calls) {
      if (!call->done) continue;
      if (answered(call)) {
        ++replies;
        lac = std::max(lac, call->response.code() == Code::OK ? call->response.lac() : int64_t{-1});
      } else if (!call->status.ok()) {
        if (call->status.error_code() == grpc::StatusCode::UNAVAILABLE) {
          core.pool.Forget(call->bookie_id);
        }
        last_problem = absl::StrCat("bookie ", call->bookie_id, ": ", call->status.error_message());
      } else {
        last_problem = absl::StrCat("bookie ", call->bookie_id, ": ",
                                    CodeName(call->response.code()));
      }
    }
  }
  if (replies == 0) {
    return absl::UnavailableError(absl::StrCat("cannot read the LAC of ledger ", metadata.id(),
                                               ": no bookie answered (", last_problem, ")"));
  }
  return lac;
}

}  // namespace ledgerkv::ledger
