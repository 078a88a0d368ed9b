#include "ledger/auditor.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ledger/entry_format.h"
#include "ledger/ledger_client.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {
namespace {

// Ends the key of a refill's failure in Auditor::failures_reported_.
constexpr char kRefillSuffix[] = " refill";

}  // namespace

Auditor::Auditor(AuditorOptions options) : options_(std::move(options)) {}

absl::StatusOr<AuditResult> Auditor::Pass(absl::Time now,
                                          const std::function<bool()>& keep_going) {
  if (!(options_.max_lost_fraction >= 0 && options_.max_lost_fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("AuditorOptions.max_lost_fraction ",
                                                   options_.max_lost_fraction,
                                                   " is not in [0, 1]"));
  }
  const metadata::Keys keys(options_.cluster);
  // Registrations first: a bookie that registers between the two listings
  // is at worst seen missing once more; one listed after the ledgers could
  // miss a ledger placed on it meanwhile, which names a registered bookie
  // anyway.
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> registered,
                   options_.store->List(keys.BookiesPrefix()));
  absl::flat_hash_set<std::string> live;
  // The instance each registered bookie runs as, where its record says.
  absl::flat_hash_map<std::string, std::string> instance_of;
  // The key names a registered bookie, whatever its record says (an
  // unparsable one is still registered: never a reason to copy).
  for (const auto& kv : registered) {
    std::string id = kv.key.substr(keys.BookiesPrefix().size());
    meta::v1::BookieRegistration registration;
    if (registration.ParseFromString(kv.value) && !registration.instance_id().empty()) {
      instance_of[id] = registration.instance_id();
    }
    live.insert(std::move(id));
  }
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> ledgers,
                   options_.store->List(keys.LedgersPrefix()));

  // Every unregistered bookie a ledger names, with the ledgers naming it.
  std::map<std::string, std::vector<std::pair<uint64_t, bool>>> naming;  // id, closed
  // Every registered bookie some segment recorded an earlier instance of
  // (re-provisioned under its id: those copies are gone), likewise.
  std::map<std::string, std::vector<std::pair<uint64_t, bool>>> stale;
  for (const auto& kv : ledgers) {
    uint64_t id = 0;
    if (!keys.ParseLedgerKey(kv.key, &id)) continue;
    meta::v1::LedgerMetadata md;
    // Unparsable: `ledgerkv ledger list` reports it; nothing to act on.
    if (!md.ParseFromString(kv.value)) continue;
    const bool closed = md.state() == meta::v1::CLOSED;
    for (const std::string& b : BookiesNamed(md)) {
      if (!live.contains(b)) naming[b].emplace_back(id, closed);
    }
    const auto current = [&instance_of](const std::string& b) -> const std::string* {
      auto it = instance_of.find(b);
      return it == instance_of.end() ? nullptr : &it->second;
    };
    for (const std::string& b : BookiesReprovisioned(md, current)) {
      stale[b].emplace_back(id, closed);
    }
  }

  AuditResult result;
  // Ledgers left because they are not CLOSED, each counted once.
  absl::flat_hash_set<uint64_t> not_closed;
  for (auto it = missing_since_.begin(); it != missing_since_.end();) {
    auto next = std::next(it);
    if (!naming.contains(it->first)) missing_since_.erase(it);  // back, or named no more
    it = next;
  }
  std::vector<const std::string*> lost;
  // Missing bookies, lost or not yet, that closed ledgers name: the ones
  // whose absence would make copies. (One named only by open ledgers has
  // nothing to copy and may stay named for long: it is not counted.)
  size_t missing_with_copies = 0;
  for (const auto& [bookie, named_by] : naming) {
    result.missing.push_back(bookie);
    const absl::Time since = missing_since_.try_emplace(bookie, now).first->second;
    bool names_closed = false;
    for (const auto& [id, closed] : named_by) names_closed |= closed;
    missing_with_copies += names_closed;
    if (now - since < options_.grace) continue;
    result.lost.push_back(bookie);
    lost.push_back(&bookie);
    for (const auto& [id, closed] : named_by) {
      if (!closed) not_closed.insert(id);
    }
  }
  for (const auto& [bookie, named_by] : stale) {
    result.reprovisioned.push_back(bookie);
    // Its writer's next add there fails and changes the ensemble (to the
    // bookie's new instance or a spare): the entries before stay a copy
    // short until the ledger is closed and refilled.
    for (const auto& [id, closed] : named_by) {
      if (!closed) not_closed.insert(id);
    }
  }
  // Registered bookies and missing ones are disjoint (`naming` holds only
  // unregistered ones). Missing ones still within their grace count: when
  // sessions expire a little apart, the first lost must not be copied
  // before the others are seen.
  const size_t known = live.size() + naming.size();
  const double fraction = options_.max_lost_fraction;
  if (!lost.empty() && missing_with_copies > 0 &&
      static_cast<double>(missing_with_copies) > fraction * static_cast<double>(known)) {
    result.held_off = absl::StrCat(
        missing_with_copies, " of the ", known,
        " bookies known are missing with copies to move, more than ", fraction * 100,
        "%: nothing is copied until fewer are (a view that wrong is more likely etcd's or this "
        "controller's than the cluster's); `ledgerkv ledger rereplicate` copies by hand");
    // Refills below still run: a registration naming a new instance is a
    // bookie that answers, not an absence, and they copy only onto it.
    lost.clear();
  }
  // This pass's; a pass asked to stop keeps the last complete one's. A
  // held-off pass tried no replacement: their failures stay reported.
  absl::flat_hash_map<std::string, std::string> failures;
  if (!result.held_off.empty()) {
    for (const auto& [key, why] : failures_reported_) {
      if (!absl::EndsWith(key, kRefillSuffix)) failures.emplace(key, why);
    }
  }
  const bool completed = [&] {
    for (const std::string* bookie : lost) {
      for (const auto& [id, closed] : naming[*bookie]) {
        if (!closed) continue;  // counted above
        if (!keep_going() ||
            !CopyOne(id, *bookie, false, keep_going, &result, &failures, &not_closed)) {
          return false;
        }
      }
    }
    for (const auto& [bookie, named_by] : stale) {
      // After one failed refill the bookie's other ledgers wait for the
      // next pass: its adds wait for a channel up to their deadline, and a
      // bookie registered but unreachable would cost that per ledger.
      bool failed_here = false;
      for (const auto& [id, closed] : named_by) {
        if (!closed) continue;  // counted above
        if (failed_here) {
          ++result.ledgers_failed;
          const std::string key = absl::StrCat(id, " ", bookie, kRefillSuffix);
          auto known = failures_reported_.find(key);
          failures[key] = known != failures_reported_.end() ? known->second : "not tried";
          continue;
        }
        const int failed_before = result.ledgers_failed;
        if (!keep_going() ||
            !CopyOne(id, bookie, true, keep_going, &result, &failures, &not_closed)) {
          return false;
        }
        failed_here = result.ledgers_failed > failed_before;
      }
    }
    return true;
  }();
  if (completed) failures_reported_.swap(failures);
  result.ledgers_not_closed = static_cast<int>(not_closed.size());
  return result;
}

bool Auditor::CopyOne(uint64_t id, const std::string& bookie, bool refill,
                      const std::function<bool()>& keep_going, AuditResult* result,
                      absl::flat_hash_map<std::string, std::string>* failures,
                      absl::flat_hash_set<uint64_t>* not_closed) {
  absl::StatusOr<ReplicationResult> done =
      refill ? options_.client->RefillBookie(id, bookie, keep_going)
             : options_.client->ReplaceBookie(id, bookie, keep_going);
  if (absl::IsCancelled(done.status())) return false;  // asked to stop
  const std::string key = absl::StrCat(id, " ", bookie, refill ? kRefillSuffix : "");
  if (done.ok()) {
    ++(refill ? result->ledgers_refilled : result->ledgers_replaced);
    (refill ? result->entries_refilled : result->entries_copied) += done->entries_copied;
    result->lines.push_back(
        refill ? absl::StrCat("ledger ", id, ": bookie ", bookie,
                              " was re-provisioned (its earlier instance's copies are gone): ",
                              done->entries_copied, " entries copied back onto it")
               : absl::StrCat("ledger ", id, ": lost bookie ", bookie, " replaced by ",
                              absl::StrJoin(done->replacements, ", "), ", ",
                              done->entries_copied, " entries copied"));
    result->corrupt_copies_repaired += done->corrupt.repaired;
    result->corrupt_copies_unrepaired += done->corrupt.unrepaired;
    for (const std::string& line : done->corrupt.lines) result->lines.push_back(line);
  } else if (absl::IsNotFound(done.status())) {
    // Deleted meanwhile, or replaced or refilled by someone else.
  } else if (absl::IsFailedPrecondition(done.status())) {
    not_closed->insert(id);  // reopened for recovery meanwhile
  } else {
    ++result->ledgers_failed;
    std::string why = done.status().ToString();
    auto known = failures_reported_.find(key);
    if (known == failures_reported_.end() || known->second != why) {
      result->lines.push_back(absl::StrCat(
          "ledger ", id, refill ? ": refilling re-provisioned bookie " : ": replacing lost bookie ",
          bookie, " failed (retried at every pass, logged again if the reason changes): ", why));
    }
    (*failures)[key] = std::move(why);
  }
  return true;
}

}  // namespace ledgerkv::ledger
