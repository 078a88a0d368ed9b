#include "ledger/rereplicate.h"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/fault_point.h"
#include "base/status_macros.h"
#include "ledger/client_core.h"
#include "ledger/entry_format.h"
#include "ledger/placement.h"
#include "ledger/replica_read.h"
#include "ledger/rpc_gather.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

using AddGather = Gather<bookie::v1::AddRequest, bookie::v1::AddResponse>;

// A run restarts from the metadata at most this often when it changes
// under it (a concurrent run, or the ledger deleted meanwhile).
constexpr int kAttempts = 5;
// Replacements tried for one segment before giving up.
constexpr int kReplacementTries = 3;

// Adds `entries` (raw, as read) to `bookie` with the recovery flag, in
// requests bounded like a writer's; every one must be stored. `role` names
// the bookie in errors. `wait_for_ready`: each request waits (until its
// deadline) for a channel that is backing off after a failed connection,
// rather than failing at once: for a bookie known to be up that may have
// restarted at the address this client last saw it go down.
absl::Status CopyTo(ClientCore& core, const BookieInfo& bookie,
                    const std::vector<bookie::v1::Entry>& entries,
                    const char* role = "replacement bookie", bool wait_for_ready = false) {
  size_t i = 0;
  while (i < entries.size()) {
    auto gather = AddGather::Make();
    AddGather::Call* call = gather->Add(0, bookie.bookie_id);
    call->request.set_expected_instance_id(bookie.instance_id);
    call->request.set_recovery(true);
    if (wait_for_ready) call->ctx.set_wait_for_ready(true);
    int64_t bytes = 0;
    for (; i < entries.size(); ++i) {
      const int64_t size = static_cast<int64_t>(entries[i].payload().size());
      if (call->request.entries_size() > 0 &&
          (bytes + size > core.options.max_bytes_per_add_rpc ||
           call->request.entries_size() >= core.options.max_entries_per_add_rpc)) {
        break;
      }
      *call->request.add_entries() = entries[i];
      bytes += size;
    }
    auto conn = core.pool.ForBookie(bookie.bookie_id);
    if (!conn.ok()) {
      return absl::UnavailableError(
          absl::StrCat(role, " ", bookie.bookie_id, ": ", conn.status().message()));
    }
    gather->Start(call, *std::move(conn), core.options.rpc_timeout,
                  [](auto* stub, auto* ctx, auto* req, auto* resp, auto cb) {
                    stub->async()->Add(ctx, req, resp, std::move(cb));
                  });
    gather->Await([] { return false; });  // until the call is done
    absl::MutexLock l(&gather->mu());
    // A replacement that could not be reached is forgotten and marked slow,
    // so that the next try (or the next ledger) does not reuse its channel.
    NoteCallOutcome(core, *call);
    if (!call->status.ok()) {
      return absl::UnavailableError(absl::StrCat(role, " ", bookie.bookie_id, ": ",
                                                 call->status.error_message()));
    }
    const auto& results = call->response.results();
    if (results.size() != call->request.entries_size()) {
      return absl::UnavailableError(absl::StrCat(role, " ", bookie.bookie_id,
                                                 " answered ", results.size(), " results for ",
                                                 call->request.entries_size(), " entries"));
    }
    for (int k = 0; k < results.size(); ++k) {
      if (results[k].code() != bookie::v1::OK ||
          results[k].entry_id() != call->request.entries(k).entry_id()) {
        return absl::UnavailableError(absl::StrCat(
            role, " ", bookie.bookie_id, ": entry ",
            call->request.entries(k).entry_id(), ": ", bookie::v1::Code_Name(results[k].code())));
      }
    }
  }
  return absl::OkStatus();
}

// What became of each corrupt copy met during a run, by (segment, bookie,
// entry). A copy is met again when its window is read again (a replacement
// passed over, a CAS lost); the last outcome counts, so a copy is reported
// once.
struct RepairLog {
  enum class Outcome { kRepaired, kUnrepaired, kLeft };
  struct Entry {
    Outcome outcome;
    std::string why;  // kUnrepaired
  };
  std::map<std::tuple<int, std::string, int64_t>, Entry> copies;

  // Counts and one line per segment, bookie and outcome.
  CorruptRepairs Summary(uint64_t ledger_id) const {
    CorruptRepairs out;
    std::map<std::tuple<int, std::string, Outcome, std::string>, std::vector<int64_t>> groups;
    for (const auto& [key, entry] : copies) {
      const auto& [segment, bookie, entry_id] = key;
      groups[{segment, bookie, entry.outcome, entry.why}].push_back(entry_id);
      if (entry.outcome == Outcome::kRepaired) ++out.repaired;
      if (entry.outcome == Outcome::kUnrepaired) ++out.unrepaired;
    }
    for (const auto& [group, ids] : groups) {
      const auto& [segment, bookie, outcome, why] = group;
      std::string line =
          absl::StrCat("ledger ", ledger_id, ": bookie ", bookie, " held a corrupt copy of ",
                       ids.size() == 1 ? "entry " : "entries ", absl::StrJoin(ids, ", "));
      switch (outcome) {
        case Outcome::kRepaired:
          absl::StrAppend(&line, ": repaired from an intact copy");
          break;
        case Outcome::kUnrepaired:
          absl::StrAppend(&line, ": NOT repaired: ", why);
          break;
        case Outcome::kLeft:
          absl::StrAppend(&line, ": left, the bookie is being replaced");
          break;
      }
      out.lines.push_back(std::move(line));
    }
    return out;
  }
};

// Re-adds the intact copies of `found` (corrupt copies met while reading
// entries lo.. of one segment; `read` holds them, read[e - lo]) to the
// bookies that answered them corrupt, with the recovery flag: the bookie
// keeps the latest write of an entry, so it serves the intact bytes from
// then on. The copy on the bookie being replaced (ensemble index
// `replaced`) is left: it is no longer named once the run ends.
void RepairCorruptCopies(ClientCore& core, const meta::v1::LedgerMetadata& md, int replaced,
                         int64_t lo, const std::vector<bookie::v1::Entry>& read,
                         const std::vector<CorruptCopy>& found, RepairLog* log) {
  std::map<std::pair<int, int>, std::vector<int64_t>> by_bookie;  // (segment, index)
  for (const CorruptCopy& c : found) by_bookie[{c.segment, c.index}].push_back(c.entry_id);
  for (auto& [where, ids] : by_bookie) {
    const auto [s, index] = where;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    const meta::v1::Segment& segment = md.segments(s);
    RepairLog::Entry outcome{RepairLog::Outcome::kLeft, ""};
    if (index != replaced) {
      std::vector<bookie::v1::Entry> intact;
      for (int64_t e : ids) intact.push_back(read[static_cast<size_t>(e - lo)]);
      absl::Status repaired = CopyTo(
          core, BookieInfo{segment.bookies(index), "", InstanceOf(segment, index)}, intact, "bookie");
      outcome = repaired.ok() ? RepairLog::Entry{RepairLog::Outcome::kRepaired, ""}
                              : RepairLog::Entry{RepairLog::Outcome::kUnrepaired,
                                                 std::string(repaired.message())};
    }
    for (int64_t e : ids) log->copies[{s, segment.bookies(index), e}] = outcome;
  }
}

// Copies the entries of segment `s` whose write set holds ensemble index
// `index` to `bookie`, and repairs the corrupt copies met on the way
// (RepairCorruptCopies). Returns how many entries it copied. *to_failed:
// the error came from `bookie` (another replacement may do), not from
// reading.
absl::StatusOr<int64_t> CopySlot(ClientCore& core, const meta::v1::LedgerMetadata& md, int s,
                                 int index, const BookieInfo& bookie,
                                 const std::function<bool()>& keep_going, bool* to_failed,
                                 RepairLog* repairs, const char* role = "replacement bookie",
                                 bool wait_for_ready = false) {
  *to_failed = false;
  const int E = md.ensemble_size(), Qw = md.write_quorum();
  const int64_t first = md.segments(s).first_entry_id();
  const int64_t last = s + 1 < md.segments_size() ? md.segments(s + 1).first_entry_id() - 1
                                                  : md.last_entry_id();
  // Entries per read, so that about four read RPCs' worth of bytes is held
  // at a time (entries of a ledger of large blobs are read a few at once).
  const int64_t entries = md.last_entry_id() + 1;
  const int64_t average = entries > 0 ? std::max<int64_t>(1, md.length() / entries) : 1;
  const int64_t window =
      std::clamp<int64_t>(4 * core.options.max_bytes_per_read_rpc / average, 1,
                          std::max(1, core.options.max_entries_per_read_rpc));
  int64_t copied = 0;
  for (int64_t lo = first; lo <= last; lo += window) {
    const int64_t hi = std::min(last, lo + window - 1);
    if (keep_going && !keep_going()) {
      return absl::CancelledError(
          absl::StrCat("re-replication of ", Describe(md), " stopped by its caller"));
    }
    // Only the entries whose write set holds `index` (with E > Qw, runs of
    // Qw out of every E): an entry the lost bookie never held is not its
    // copy to move, and one unreadable there must not stop the others.
    const auto ours = [index, E, Qw](int64_t e) { return InWriteSet(e, index, E, Qw); };
    std::vector<CorruptCopy> corrupt;
    absl::StatusOr<std::vector<bookie::v1::Entry>> read =
        ReadReplicas(core, md, lo, hi, ours, &corrupt);
    if (!read.ok()) {
      return absl::Status(read.status().code(),
                          absl::StrCat("reading entries ", lo, "..", hi, " of ", Describe(md),
                                       " held at ensemble index ", index, ": ",
                                       read.status().message()));
    }
    if (!corrupt.empty()) RepairCorruptCopies(core, md, index, lo, *read, corrupt, repairs);
    std::vector<bookie::v1::Entry> mine;
    for (int64_t e = lo; e <= hi; ++e) {
      if (ours(e)) mine.push_back(std::move((*read)[static_cast<size_t>(e - lo)]));
    }
    if (absl::Status written = CopyTo(core, bookie, mine, role, wait_for_ready);
        !written.ok()) {
      *to_failed = true;
      return written;
    }
    copied += static_cast<int64_t>(mine.size());
  }
  return copied;
}

// `earlier` as it is registered now, if it is still writable and the same
// instance (placement's rules for a replacement); its current address.
std::optional<BookieInfo> StillUsable(ClientCore& core, const BookieInfo& earlier) {
  absl::StatusOr<metadata::VersionedValue> got =
      core.store->Get(core.keys.Bookie(earlier.bookie_id));
  if (!got.ok()) return std::nullopt;
  meta::v1::BookieRegistration registration;
  if (!registration.ParseFromString(got->value) || registration.read_only() ||
      registration.address().empty() || registration.instance_id() != earlier.instance_id) {
    return std::nullopt;
  }
  return BookieInfo{earlier.bookie_id, registration.address(), registration.instance_id()};
}

// Bookie `bookie_id` as it is registered now: the instance a refill
// writes to. Read-only is no bar: a bookie over its disk watermark still
// takes recovery adds.
absl::StatusOr<BookieInfo> RegisteredInstance(ClientCore& core, const std::string& bookie_id) {
  absl::StatusOr<metadata::VersionedValue> got = core.store->Get(core.keys.Bookie(bookie_id));
  if (absl::IsNotFound(got.status())) {
    return absl::UnavailableError(absl::StrCat(
        "bookie ", bookie_id, " is not registered: there is no instance to refill (a bookie "
        "that is gone is replaced: `ledgerkv ledger rereplicate`)"));
  }
  if (!got.ok()) {
    return absl::UnavailableError(absl::StrCat("reading the registration of bookie ", bookie_id,
                                               ": ", got.status().message()));
  }
  meta::v1::BookieRegistration registration;
  if (!registration.ParseFromString(got->value) || registration.address().empty() ||
      registration.instance_id().empty()) {
    return absl::UnavailableError(absl::StrCat("the registration of bookie ", bookie_id,
                                               " names no address or no instance id"));
  }
  return BookieInfo{bookie_id, registration.address(), registration.instance_id()};
}

// What a run does for each segment naming the bookie.
enum class Mode {
  kReplace,  // copy its slot to another bookie and name that one
  kRefill,   // copy its slot back to its current instance, if re-provisioned
};

// ReplaceBookieInLedger (or RefillBookieInLedger), but the corrupt copies
// met are left in *repairs, whatever the outcome.
absl::StatusOr<ReplicationResult> ReplaceBookieInLedgerLogging(
    ClientCore& core, uint64_t id, const std::string& bookie_id, Mode mode,
    const std::function<bool()>& keep_going, RepairLog* repairs) {
  // The replacement each segment got in an attempt whose CAS lost: the next
  // attempt writes to it again (the same bytes), rather than leaving
  // unnamed copies on one more bookie.
  absl::flat_hash_map<int, BookieInfo> earlier;
  const char* const doing = mode == Mode::kReplace ? "replacing" : "refilling";
  for (int attempt = 0;; ++attempt) {
    ASSIGN_OR_RETURN(VersionedLedger loaded, LoadLedger(core, id));
    const meta::v1::LedgerMetadata& md = loaded.metadata;
    // A refill's target, read again at each attempt (the bookie may have
    // been re-provisioned once more meanwhile). A ledger with nothing to
    // refill is NOT_FOUND whatever its state.
    std::optional<BookieInfo> current;
    if (mode == Mode::kRefill) {
      ASSIGN_OR_RETURN(current, RegisteredInstance(core, bookie_id));
      const auto now = [&](const std::string& b) -> const std::string* {
        return b == bookie_id ? &current->instance_id : nullptr;
      };
      if (BookiesReprovisioned(md, now).empty()) {
        return absl::NotFoundError(absl::StrCat(Describe(md),
                                                " records no earlier instance of bookie ",
                                                bookie_id, " than its current one, ",
                                                current->instance_id));
      }
      core.pool.Learn(current->bookie_id, current->address);
    }
    if (md.state() != meta::v1::CLOSED) {
      return absl::FailedPreconditionError(absl::StrCat(
          Describe(md), " is not CLOSED: its writer replaces failed bookies itself (recover "
                        "the ledger first if its writer is gone)"));
    }
    meta::v1::LedgerMetadata next = md;
    ReplicationResult result;
    for (int s = 0; s < md.segments_size(); ++s) {
      const meta::v1::Segment& segment = md.segments(s);
      const auto named = std::find(segment.bookies().begin(), segment.bookies().end(), bookie_id);
      if (named == segment.bookies().end()) continue;
      const int index = static_cast<int>(named - segment.bookies().begin());
      absl::StatusOr<BookieInfo> chosen;
      absl::StatusOr<int64_t> copied;
      if (mode == Mode::kRefill) {
        // Only segments that recorded an earlier instance: their copies
        // are gone. One that recorded none ("") is never judged stale.
        if (!IsEarlierInstance(segment, index, current->instance_id)) continue;
        chosen = *current;
        bool to_failed = false;
        // Registered, so up: a channel of this client's that saw it go
        // down (before its re-provisioning) may still be backing off.
        copied = CopySlot(core, md, s, index, *chosen, keep_going, &to_failed, repairs,
                          "re-provisioned bookie", /*wait_for_ready=*/true);
      }
      absl::flat_hash_set<std::string> exclude(segment.bookies().begin(), segment.bookies().end());
      // A replacement that fails its adds (down, read-only, just restarted
      // and not reachable yet) is passed over for another.
      std::string failed_before;  // the replacements passed over
      for (int tries = 0; mode == Mode::kReplace && tries < kReplacementTries; ++tries) {
        auto before = earlier.find(s);
        std::optional<BookieInfo> again;
        if (tries == 0 && before != earlier.end() && !exclude.contains(before->second.bookie_id)) {
          again = StillUsable(core, before->second);
        }
        if (again.has_value()) {
          chosen = *std::move(again);
        } else {
          chosen = core.placement.ChooseReplacement(exclude);
        }
        if (!chosen.ok()) {
          return absl::UnavailableError(absl::StrCat("cannot replace bookie ", bookie_id, " in ",
                                                     Describe(md), ": ", chosen.status().message(),
                                                     failed_before));
        }
        core.pool.Learn(chosen->bookie_id, chosen->address);
        bool to_failed = false;
        copied = CopySlot(core, md, s, index, *chosen, keep_going, &to_failed, repairs);
        if (copied.ok() || !to_failed) break;
        absl::StrAppend(&failed_before, "; passed over: ", copied.status().message());
        exclude.insert(chosen->bookie_id);
      }
      if (!copied.ok()) return copied.status();
      meta::v1::Segment* changed = next.mutable_segments(s);
      changed->set_bookies(index, chosen->bookie_id);
      while (changed->bookie_instances_size() < changed->bookies_size()) {
        changed->add_bookie_instances("");
      }
      changed->set_bookie_instances(index, chosen->instance_id);
      ++result.segments_changed;
      result.entries_copied += *copied;
      result.replacements.push_back(chosen->bookie_id);
      earlier[s] = *chosen;
    }
    if (result.segments_changed == 0) {
      return absl::NotFoundError(
          absl::StrCat(Describe(md), " does not name bookie ", bookie_id));
    }
    // Named only now that every copy is stored. Tests change the metadata
    // here (the CAS then loses), or lose the reply of a CAS that landed.
    static_cast<void>(LEDGERKV_FAULT("ledger.rereplicate.before_cas", std::to_string(id)));
    absl::StatusOr<metadata::Version> stored = StoreLedger(core, next, loaded.version);
    if (stored.ok() && LEDGERKV_FAULT("ledger.rereplicate.reply_lost")) {
      stored = absl::UnavailableError("fault point ledger.rereplicate.reply_lost");
    }
    if (stored.ok()) return result;
    // ABORTED: the metadata moved, ours (a reply lost) or another change.
    // UNAVAILABLE: the outcome is unknown. Either way, look.
    absl::StatusOr<VersionedLedger> reread = LoadLedger(core, id);
    if (reread.ok() && SameLedger(reread->metadata, next)) return result;
    if (absl::IsNotFound(reread.status())) return reread.status();  // deleted meanwhile
    if (!reread.ok()) {
      return absl::UnavailableError(absl::StrCat(
          doing, " bookie ", bookie_id, " in ", Describe(md), ": ", stored.status().message(),
          "; whether the metadata now names the copies is unknown (reading it back: ",
          reread.status().message(), "); run again"));
    }
    if (!absl::IsAborted(stored.status()) && !absl::IsUnavailable(stored.status())) {
      return absl::Status(stored.status().code(),
                          absl::StrCat(doing, " bookie ", bookie_id, " in ", Describe(md), ": ",
                                       stored.status().message()));
    }
    // Moved on (perhaps after ours landed): start over; a ledger that no
    // longer names the bookie then says NOT_FOUND.
    if (attempt + 1 >= kAttempts) {
      return absl::UnavailableError(absl::StrCat(doing, " bookie ", bookie_id, " in ledger ",
                                                 id, ": its metadata kept changing"));
    }
  }
}

// Either mode, with the corrupt copies it met reported.
absl::StatusOr<ReplicationResult> RunReporting(ClientCore& core, uint64_t id,
                                               const std::string& bookie_id, Mode mode,
                                               const std::function<bool()>& keep_going) {
  RepairLog repairs;
  absl::StatusOr<ReplicationResult> result =
      ReplaceBookieInLedgerLogging(core, id, bookie_id, mode, keep_going, &repairs);
  if (repairs.copies.empty()) return result;
  CorruptRepairs summary = repairs.Summary(id);
  if (result.ok()) {
    result->corrupt = std::move(summary);
    return result;
  }
  // The move failed, but its repairs happened: say so with the error.
  return absl::Status(result.status().code(),
                      absl::StrCat(result.status().message(), " (before that: ",
                                   absl::StrJoin(summary.lines, "; "), ")"));
}

}  // namespace

absl::StatusOr<ReplicationResult> ReplaceBookieInLedger(ClientCore& core, uint64_t id,
                                                        const std::string& bookie_id,
                                                        const std::function<bool()>& keep_going) {
  return RunReporting(core, id, bookie_id, Mode::kReplace, keep_going);
}

absl::StatusOr<ReplicationResult> RefillBookieInLedger(ClientCore& core, uint64_t id,
                                                       const std::string& bookie_id,
                                                       const std::function<bool()>& keep_going) {
  return RunReporting(core, id, bookie_id, Mode::kRefill, keep_going);
}

}  // namespace ledgerkv::ledger
