#include "ledger/recovery.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/fault_point.h"
#include "ledger/entry_format.h"
#include "ledger/replica_read.h"
#include "ledger/rpc_gather.h"

namespace ledgerkv::ledger {
namespace {

using bookie::v1::Code;
using bookie::v1::Entry;
using LacGather = Gather<bookie::v1::ReadLacRequest, bookie::v1::ReadLacResponse>;
using ReadGather = Gather<bookie::v1::ReadRequest, bookie::v1::ReadResponse>;
using AddGather = Gather<bookie::v1::AddRequest, bookie::v1::AddResponse>;

// Recovery restarts from step 1 at most this often when another recoverer
// changes the metadata under it.
constexpr int kMaxAttempts = 5;

std::string Problem(const std::string& bookie_id, const grpc::Status& status) {
  return absl::StrCat("bookie ", bookie_id, ": ", status.error_message(), " (gRPC code ",
                      static_cast<int>(status.error_code()), ")");
}

std::string Problem(const std::string& bookie_id, Code code) {
  return absl::StrCat("bookie ", bookie_id, ": ", bookie::v1::Code_Name(code));
}

// Recovery notes its calls as reads do (NoteCallOutcome), so that the reads
// that follow it (a log replay) plan around a bookie it could not reach. A
// call still running when recovery moves on without it was only slower
// than the quorum it needed and is not marked (re-adds mark the ones still
// running after their grace period themselves, ReAdd).

// Starts `call` on its bookie, or fails it when the bookie cannot be resolved.
template <typename G, typename Invoke>
void StartOn(ClientCore& core, G& gather, typename G::Call* call, absl::Duration timeout,
             Invoke invoke) {
  auto conn = core.pool.ForBookie(call->bookie_id);
  if (!conn.ok()) {
    gather.Fail(call, grpc::Status(grpc::StatusCode::UNAVAILABLE, conn.status().ToString()));
    return;
  }
  gather.Start(call, *std::move(conn), timeout, invoke);
}

// What step 2 established.
struct Fenced {
  int64_t max_lac = -1;       // the highest LAC among the fenced replies
  std::vector<bool> confirmed;  // per ensemble index: the fence is known durable there
};

// Step 2.
absl::StatusOr<Fenced> FenceLastSegment(ClientCore& core, const meta::v1::LedgerMetadata& md) {
  const meta::v1::Segment& segment = md.segments(md.segments_size() - 1);
  const int E = md.ensemble_size(), Qw = md.write_quorum(), Qa = md.ack_quorum();
  const int needed = Qw - Qa + 1;
  auto gather = LacGather::Make();
  std::vector<LacGather::Call*> calls;
  for (int i = 0; i < E; ++i) {
    LacGather::Call* call = gather->Add(i, segment.bookies(i));
    call->request.set_expected_instance_id(InstanceOf(segment, i));
    call->request.set_ledger_id(md.id());
    call->request.set_fence(true);
    call->request.set_wait_if_lac_at_most(-2);
    calls.push_back(call);
  }
  for (LacGather::Call* call : calls) {
    StartOn(core, *gather, call, core.options.rpc_timeout,
            [](auto* stub, auto* ctx, auto* req, auto* resp, auto cb) {
              stub->async()->ReadLac(ctx, req, resp, std::move(cb));
            });
  }
  auto fenced = [](const LacGather::Call* call) {
    return call->done && call->status.ok() &&
           (call->response.code() == Code::OK || call->response.code() == Code::NO_SUCH_LEDGER) &&
           call->response.fenced();
  };
  // The write quorum (starting index) with the fewest fenced replies.
  auto weakest = [&](int* count) {
    int worst = 0, worst_count = Qw + 1;
    for (int first = 0; first < E; ++first) {
      int n = 0;
      for (int k = 0; k < Qw; ++k) n += fenced(calls[(first + k) % E]) ? 1 : 0;
      if (n < worst_count) {
        worst = first;
        worst_count = n;
      }
    }
    *count = worst_count;
    return worst;
  };
  // Proceed as soon as the condition holds: a bookie that never answers
  // must not stall recovery when the others suffice.
  const bool enough = gather->Await([&] {
    int n;
    weakest(&n);
    return n >= needed;
  });
  absl::MutexLock l(&gather->mu());
  for (const LacGather::Call* call : calls) NoteCallOutcome(core, *call);
  if (!enough) {
    int n;
    const int first = weakest(&n);
    std::vector<std::string> problems;
    for (const LacGather::Call* call : calls) {
      if (fenced(call)) continue;
      if (!call->status.ok()) {
        problems.push_back(Problem(call->bookie_id, call->status));
      } else if (!call->response.fenced() && call->response.code() == Code::OK) {
        problems.push_back(absl::StrCat("bookie ", call->bookie_id, ": did not confirm the fence"));
      } else {
        problems.push_back(Problem(call->bookie_id, call->response.code()));
      }
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot fence ", Describe(md), ": the write quorum starting at ensemble index ", first,
        " has ", n, " fenced replies, ", needed, " needed (", absl::StrJoin(problems, "; "),
        "); retry recovery later"));
  }
  Fenced out;
  out.confirmed.resize(E, false);
  for (int i = 0; i < E; ++i) {
    if (!fenced(calls[i])) continue;
    out.confirmed[i] = true;
    if (calls[i]->response.code() == Code::OK) {
      out.max_lac = std::max(out.max_lac, calls[i]->response.lac());
    }
  }
  return out;
}

// What one scan of the forward-read replies decided.
struct Scan {
  enum Kind { kWait, kAbsent, kMore, kError } kind = kWait;
  int decided = 0;        // leading entries of the window that exist
  absl::Status error;     // kError
};

// Step 3. Returns the entries after `start` that exist, in order, up to the
// first absent one. `fenced[i]`: the fence of ensemble index i is known to
// be durable (from step 2); reads to the other bookies carry the fence flag
// until one of them succeeds, so that a bookie whose fence reply was lost is
// fenced before its "no such entry" counts. A fenced read costs the bookie a
// journal record and an fdatasync, so it is not repeated on every window.
absl::StatusOr<std::vector<Entry>> ReadForward(ClientCore& core,
                                               const meta::v1::LedgerMetadata& md,
                                               int64_t start, std::vector<bool> fenced) {
  const meta::v1::Segment& segment = md.segments(md.segments_size() - 1);
  const int E = md.ensemble_size(), Qw = md.write_quorum(), Qa = md.ack_quorum();
  const int absent_after = Qw - Qa + 1;
  const int window = std::max(1, core.options.max_entries_per_read_rpc);
  std::vector<Entry> recovered;
  int64_t next = start + 1;
  // A window is decided as soon as the entries are, often before a slow
  // bookie's fenced read returns (its fence costs it an fdatasync). Its
  // outcome still confirms the fence when it arrives: remember the call.
  struct FenceInFlight {
    std::shared_ptr<ReadGather> gather;
    const ReadGather::Call* call = nullptr;
  };
  std::vector<FenceInFlight> in_flight(E);
  auto confirms = [](const ReadGather::Call& call) {
    // The fence runs before the read: any request-level answer other than
    // READ_ONLY / INSTANCE_MISMATCH means it is durable.
    return call.done && call.status.ok() &&
           (call.response.code() == Code::OK || call.response.code() == Code::NO_SUCH_LEDGER);
  };
  for (;;) {
    for (int i = 0; i < E; ++i) {
      if (in_flight[i].gather == nullptr) continue;
      bool finished;
      {
        absl::MutexLock l(&in_flight[i].gather->mu());
        finished = in_flight[i].call->done;
        if (finished && confirms(*in_flight[i].call)) fenced[i] = true;
        NoteCallOutcome(core, *in_flight[i].call);
      }
      // Outside its mu(): this may destroy the Gather, which locks it.
      if (finished) in_flight[i] = FenceInFlight();
    }
    auto gather = ReadGather::Make();
    std::vector<ReadGather::Call*> calls;
    for (int i = 0; i < E; ++i) {
      ReadGather::Call* call = gather->Add(i, segment.bookies(i));
      call->request.set_expected_instance_id(InstanceOf(segment, i));
      call->request.set_ledger_id(md.id());
      call->request.set_first_entry_id(next);
      call->request.set_count(window);
      call->request.set_fence(!fenced[i]);
      call->request.set_max_bytes(core.options.max_bytes_per_read_rpc);
      calls.push_back(call);
    }
    for (ReadGather::Call* call : calls) {
      StartOn(core, *gather, call, core.options.rpc_timeout,
              [](auto* stub, auto* ctx, auto* req, auto* resp, auto cb) {
                stub->async()->Read(ctx, req, resp, std::move(cb));
              });
    }
    // found[k] = an intact copy of entry next+k (pointer into a response).
    std::vector<const Entry*> found;
    auto scan = [&]() -> Scan {
      found.clear();
      std::vector<absl::flat_hash_map<int64_t, const bookie::v1::ReadResult*>> by_id(E);
      for (int i = 0; i < E; ++i) {
        const ReadGather::Call* call = calls[i];
        if (!call->done || !call->status.ok() || call->response.code() != Code::OK) continue;
        for (const auto& result : call->response.results()) by_id[i][result.entry_id()] = &result;
      }
      Scan out;
      for (int k = 0; k < window; ++k) {
        const int64_t e = next + k;
        const Entry* copy = nullptr;
        int no_such = 0;
        // Copies that failed their checksum (the bookie's or ours): they
        // will not read intact on another attempt. Any other problem (an
        // unreachable bookie, an I/O error) may pass.
        int corrupt = 0;
        bool pending = false, unanswered = false, transient = false;
        std::string problem;
        for (int i : WriteSet(e, E, Qw)) {
          const ReadGather::Call* call = calls[i];
          if (!call->done) {
            pending = true;
          } else if (!call->status.ok()) {
            problem = Problem(call->bookie_id, call->status);
            transient = true;
          } else if (call->response.code() == Code::NO_SUCH_LEDGER) {
            ++no_such;
          } else if (call->response.code() != Code::OK) {
            problem = Problem(call->bookie_id, call->response.code());
            transient = true;
          } else if (auto it = by_id[i].find(e); it == by_id[i].end()) {
            // A short answer (max_bytes) ends before e: ask again from e.
            // An answer without the very first entry asked for is an error,
            // or we would ask forever.
            if (k == 0) {
              problem = absl::StrCat("bookie ", call->bookie_id, ": no result for entry ", e);
              transient = true;
            } else {
              unanswered = true;
            }
          } else if (it->second->code() == Code::OK) {
            absl::Status verified = VerifyEntry(it->second->entry(), md.id(), e, call->bookie_id);
            if (verified.ok()) {
              copy = &it->second->entry();
            } else {
              problem = verified.ToString();
              ++corrupt;
            }
          } else if (it->second->code() == Code::NO_SUCH_ENTRY ||
                     it->second->code() == Code::NO_SUCH_LEDGER) {
            ++no_such;
          } else {
            problem = Problem(call->bookie_id, it->second->code());
            if (it->second->code() == Code::CORRUPT) {
              ++corrupt;
            } else {
              transient = true;
            }
          }
          if (copy != nullptr) break;
        }
        if (copy != nullptr) {
          found.push_back(copy);
          out.decided = k + 1;
          continue;
        }
        if (no_such >= absent_after) {
          out.kind = Scan::kAbsent;
        } else if (pending) {
          out.kind = Scan::kWait;
        } else if (unanswered) {
          out.kind = Scan::kMore;
        } else if (!transient) {
          // Every replica answered: too few say "absent" to call it so (it
          // may have been acknowledged), and every other copy is corrupt.
          // The entry is lost (L10: not absent), and the ledger cannot be
          // closed (unless a later attempt learns a LAC past it).
          out.kind = Scan::kError;
          out.error = absl::DataLossError(absl::StrCat(
              "recovery of ", Describe(md), ": entry ", e, " has no intact replica (", corrupt,
              " corrupt, ", no_such, " missing, ", absent_after,
              " missing needed to call it absent; last problem: ", problem,
              "); it may have been acknowledged, so the ledger cannot be closed"));
        } else {
          out.kind = Scan::kError;
          out.error = absl::UnavailableError(absl::StrCat(
              "recovery of ", Describe(md), " cannot tell whether entry ", e,
              " exists: ", no_such, " of ", absent_after,
              " replies needed to call it absent, last problem: ", problem,
              "; nothing was truncated, retry recovery later"));
        }
        return out;
      }
      out.kind = Scan::kMore;
      return out;
    };
    gather->Await([&] { return scan().kind != Scan::kWait; });
    // Gathers replaced in in_flight below are destroyed after mu() is
    // released (declared before the lock): a Gather's destructor cancels
    // and waits under its own mutex.
    std::vector<FenceInFlight> retired;
    Scan result;
    {
      absl::MutexLock l(&gather->mu());
      for (int i = 0; i < E; ++i) {
        const ReadGather::Call* call = calls[i];
        NoteCallOutcome(core, *call);
        if (!call->request.fence()) continue;
        if (confirms(*call)) {
          fenced[i] = true;
        } else if (!call->done) {
          retired.push_back(std::move(in_flight[i]));
          in_flight[i] = FenceInFlight{gather, call};
        }
      }
      result = scan();
      for (const Entry* copy : found) recovered.push_back(*copy);
    }
    if (result.kind != Scan::kMore) {
      // Fencing reads of earlier windows that have ended since are noted
      // like every call (the ones still running are cancelled on return).
      for (const FenceInFlight& f : in_flight) {
        if (f.gather == nullptr) continue;
        absl::MutexLock l(&f.gather->mu());
        NoteCallOutcome(core, *f.call);
      }
    }
    switch (result.kind) {
      case Scan::kAbsent:
        return recovered;
      case Scan::kError:
        return result.error;
      case Scan::kWait:  // cannot happen once Await returned; treat as an error
        return absl::UnavailableError("recovery read ended without an answer");
      case Scan::kMore:
        next += result.decided;
        break;
    }
  }
}

// Step 4. Re-adds `entries` to their write sets with the recovery flag until
// each has Qa acks. Replaced bookies are written into *segment (a copy of
// the last segment) and *changed is set. A replacement is only named if it
// acked something the Qa count relies on: one that failed its re-adds (in
// the round that completed the others) gives its place back to the bookie
// it replaced, so the closing segment never names a bookie that received
// nothing it is named for.
// The replicas beyond Qa get ClientOptions::recovery_readd_grace more.

absl::Status ReAdd(ClientCore& core, const meta::v1::LedgerMetadata& md,
                   const std::vector<Entry>& entries, meta::v1::Segment* segment,
                   bool* changed) {
  const int E = md.ensemble_size(), Qw = md.write_quorum(), Qa = md.ack_quorum();
  *segment = md.segments(md.segments_size() - 1);
  while (segment->bookie_instances_size() < E) segment->add_bookie_instances("");
  const meta::v1::Segment original = *segment;
  // Every bookie the segment named, and every replacement tried, as the
  // instance it was (Exclusions): the same bookie re-provisioned since, as
  // a new instance, may still take a failed one's place.
  absl::flat_hash_set<std::pair<std::string, std::string>> tried;
  for (int i = 0; i < E; ++i) tried.insert({segment->bookies(i), segment->bookie_instances(i)});
  std::vector<uint64_t> acked(entries.size(), 0);
  auto done = [&] {
    for (uint64_t mask : acked) {
      if (std::popcount(mask) < Qa) return false;
    }
    return true;
  };
  std::string last_problem;
  for (int round = 0; round <= E + 1 && !done(); ++round) {
    auto gather = AddGather::Make();
    std::vector<std::pair<AddGather::Call*, std::vector<size_t>>> calls;
    for (int i = 0; i < E; ++i) {
      AddGather::Call* call = nullptr;
      int64_t bytes = 0;
      for (size_t k = 0; k < entries.size(); ++k) {
        if (!InWriteSet(entries[k].entry_id(), i, E, Qw) || (acked[k] & (uint64_t{1} << i))) {
          continue;
        }
        const int64_t size = static_cast<int64_t>(entries[k].payload().size());
        if (call == nullptr || bytes + size > core.options.max_bytes_per_add_rpc ||
            call->request.entries_size() >= core.options.max_entries_per_add_rpc) {
          call = gather->Add(i, segment->bookies(i));
          call->request.set_expected_instance_id(segment->bookie_instances(i));
          call->request.set_recovery(true);
          calls.emplace_back(call, std::vector<size_t>());
          bytes = 0;
        }
        *call->request.add_entries() = entries[k];
        calls.back().second.push_back(k);
        bytes += size;
      }
    }
    for (auto& [call, ks] : calls) {
      StartOn(core, *gather, call, core.options.rpc_timeout,
              [](auto* stub, auto* ctx, auto* req, auto* resp, auto cb) {
                stub->async()->Add(ctx, req, resp, std::move(cb));
              });
    }
    // Done once every entry has Qa acks from the calls answered so far (or
    // every call answered): a slow or hung bookie of the write set must not
    // hold recovery up once the others gave each entry its Qa acks. The
    // rest get a short grace, so that a healthy replica a little slower
    // than the fastest Qa still acks its copies (Qw of them, not just Qa);
    // calls still in flight after it are cancelled with the gather, and
    // their bookies marked slow, so that the reads after recovery plan
    // around them at once. A replacement among them has acked nothing, so
    // it gives its place back below.
    auto enough = [&] {
      std::vector<uint64_t> now = acked;
      for (const auto& [call, ks] : calls) {
        if (!call->done || !call->status.ok()) continue;
        const uint64_t bit = uint64_t{1} << call->tag;
        // Bookies answer one result per entry, in request order (an answer
        // out of order only counts once every call is done, below).
        const auto& results = call->response.results();
        for (size_t j = 0; j < ks.size() && j < static_cast<size_t>(results.size()); ++j) {
          const auto& result = results[static_cast<int>(j)];
          if (result.code() == Code::OK && result.entry_id() == entries[ks[j]].entry_id()) {
            now[ks[j]] |= bit;
          }
        }
      }
      return std::all_of(now.begin(), now.end(),
                         [&](uint64_t mask) { return std::popcount(mask) >= Qa; });
    };
    if (gather->Await(enough)) {
      gather->AwaitAllFor(std::min(core.options.rpc_timeout, core.options.recovery_readd_grace));
    }
    absl::flat_hash_set<int> failed;
    {
      absl::MutexLock l(&gather->mu());
      for (auto& [call, ks] : calls) {
        if (!call->done) {  // cancelled with the gather
          core.slow_bookies.Mark(call->bookie_id);
          continue;
        }
        const int i = call->tag;
        NoteCallOutcome(core, *call);
        if (!call->status.ok()) {
          failed.insert(i);
          last_problem = Problem(call->bookie_id, call->status);
          continue;
        }
        absl::flat_hash_map<int64_t, Code> codes;
        for (const auto& result : call->response.results()) codes[result.entry_id()] = result.code();
        for (size_t k : ks) {
          auto it = codes.find(entries[k].entry_id());
          if (it != codes.end() && it->second == Code::OK) {
            acked[k] |= uint64_t{1} << i;
          } else {
            failed.insert(i);
            last_problem = it == codes.end()
                               ? absl::StrCat("bookie ", call->bookie_id, ": no result")
                               : Problem(call->bookie_id, it->second);
          }
        }
      }
    }
    if (done()) break;
    if (failed.empty()) {
      return absl::UnavailableError(absl::StrCat("recovery of ", Describe(md),
                                                 ": re-adds made no progress"));
    }
    // Replace each failed bookie. The replacement gets the entries in the
    // next round, before the closing CAS names it in the metadata.
    for (int i : failed) {
      // A bookie takes back only its own index: one named at another index,
      // now or originally (the give-back below may restore it), is
      // excluded whatever its instance.
      Exclusions exclude;
      for (int j = 0; j < E; ++j) {
        if (j == i) continue;
        exclude.ExcludeId(segment->bookies(j));
        exclude.ExcludeId(original.bookies(j));
      }
      for (const auto& [id, instance] : tried) exclude.ExcludeInstance(id, instance);
      auto chosen = core.placement.ChooseReplacement(exclude);
      if (!chosen.ok()) {
        return absl::UnavailableError(absl::StrCat(
            "recovery of ", Describe(md), ": cannot replace bookie ", segment->bookies(i), " (",
            last_problem, "): ", chosen.status().message()));
      }
      core.pool.Learn(chosen->bookie_id, chosen->address);
      core.pool.WaitUntilReachable(chosen->address);  // as the writer's
      tried.insert({chosen->bookie_id, chosen->instance_id});
      segment->set_bookies(i, chosen->bookie_id);
      segment->set_bookie_instances(i, chosen->instance_id);
      for (uint64_t& mask : acked) mask &= ~(uint64_t{1} << i);
      *changed = true;
    }
  }
  if (!done()) {
    return absl::UnavailableError(absl::StrCat("recovery of ", Describe(md),
                                               ": could not re-add the recovered entries (",
                                               last_problem, ")"));
  }
  // Give back the places of replacements that lack some of their entries,
  // where every entry keeps Qa acks from the bookies that stay named.
  *changed = false;
  for (int i = 0; i < E; ++i) {
    if (segment->bookies(i) == original.bookies(i) &&
        segment->bookie_instances(i) == original.bookie_instances(i)) {
      continue;
    }
    const uint64_t bit = uint64_t{1} << i;
    bool complete = true;
    for (size_t k = 0; k < entries.size(); ++k) {
      if (InWriteSet(entries[k].entry_id(), i, E, Qw) && !(acked[k] & bit)) complete = false;
    }
    std::vector<uint64_t> without = acked;
    for (uint64_t& mask : without) mask &= ~bit;
    const bool still_done = std::all_of(without.begin(), without.end(),
                                        [&](uint64_t mask) { return std::popcount(mask) >= Qa; });
    if (!complete && still_done) {
      segment->set_bookies(i, original.bookies(i));
      segment->set_bookie_instances(i, original.bookie_instances(i));
      acked = std::move(without);
    } else {
      *changed = true;
    }
  }
  return absl::OkStatus();
}

// Steps 2-5 on a ledger already IN_RECOVERY. ABORTED: the metadata changed
// under us (another recoverer), start over.
absl::StatusOr<VersionedLedger> RecoverOnce(ClientCore& core, const VersionedLedger& loaded) {
  const meta::v1::LedgerMetadata& md = loaded.metadata;
  const meta::v1::Segment& last_segment = md.segments(md.segments_size() - 1);

  auto fenced = FenceLastSegment(core, md);
  if (!fenced.ok()) return fenced.status();
  const int64_t start = std::max(fenced->max_lac, last_segment.first_entry_id() - 1);

  uint64_t length = 0;
  if (start >= 0) {
    // Confirmed, so it exists; read it for the ledger length up to it.
    auto confirmed = ReadEntryFromAnyReplica(core, md, start);
    if (!confirmed.ok()) {
      const absl::Status& s = confirmed.status();
      return absl::Status(absl::IsDataLoss(s) ? s.code() : absl::StatusCode::kUnavailable,
                          absl::StrCat("recovery of ", Describe(md), ": cannot read confirmed entry ",
                                       start, ": ", s.message()));
    }
    length = CumulativeLength(*confirmed);
  }

  auto recovered = ReadForward(core, md, start, std::move(fenced->confirmed));
  if (!recovered.ok()) return recovered.status();
  const int64_t last = start + static_cast<int64_t>(recovered->size());
  if (!recovered->empty()) length = CumulativeLength(recovered->back());

  meta::v1::LedgerMetadata closed = md;
  if (!recovered->empty()) {
    meta::v1::Segment segment;
    bool changed = false;
    absl::Status added = ReAdd(core, md, *recovered, &segment, &changed);
    if (!added.ok()) return added;
    if (changed) {
      if (last_segment.first_entry_id() == start + 1) {
        *closed.mutable_segments(closed.segments_size() - 1) = segment;
      } else {
        segment.set_first_entry_id(start + 1);
        *closed.add_segments() = segment;
      }
    }
  }
  closed.set_state(meta::v1::CLOSED);
  closed.set_last_entry_id(last);
  closed.set_length(length);

  // Only observed (tests hold one recoverer here while another finishes).
  static_cast<void>(LEDGERKV_FAULT("ledger.recovery.before_close", std::to_string(md.id())));
  auto stored = StoreLedger(core, closed, loaded.version);
  if (stored.ok()) return VersionedLedger{std::move(closed), *stored};
  if (!absl::IsAborted(stored.status())) {
    return absl::UnavailableError(absl::StrCat("recovery of ", Describe(md),
                                               ": cannot close: ", stored.status().message()));
  }
  auto reread = LoadLedger(core, md.id());
  if (!reread.ok()) return reread.status();
  // Another recoverer closed it first: its result stands (L9). Or our own
  // write landed and only its reply was lost.
  if (reread->metadata.state() == meta::v1::CLOSED) return reread;
  return absl::AbortedError(absl::StrCat("metadata of ledger ", md.id(), " changed during recovery"));
}

}  // namespace

absl::StatusOr<VersionedLedger> RecoverLedger(ClientCore& core, uint64_t id) {
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    auto loaded = LoadLedger(core, id);
    if (!loaded.ok()) return loaded.status();
    if (loaded->metadata.state() == meta::v1::CLOSED) return loaded;
    if (loaded->metadata.state() == meta::v1::OPEN) {
      meta::v1::LedgerMetadata in_recovery = loaded->metadata;
      in_recovery.set_state(meta::v1::IN_RECOVERY);
      auto stored = StoreLedger(core, in_recovery, loaded->version);
      if (absl::IsAborted(stored.status())) continue;  // raced the writer or another recoverer
      if (!stored.ok()) {
        return absl::UnavailableError(absl::StrCat("cannot start recovery of ledger ", id, ": ",
                                                   stored.status().message()));
      }
      loaded = VersionedLedger{std::move(in_recovery), *stored};
    }
    auto recovered = RecoverOnce(core, *loaded);
    if (recovered.ok() || !absl::IsAborted(recovered.status())) return recovered;
  }
  return absl::UnavailableError(absl::StrCat(
      "recovery of ledger ", id, " gave up: its metadata kept changing under it"));
}

}  // namespace ledgerkv::ledger
