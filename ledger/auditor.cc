#include "ledger/auditor.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "ledger/entry_format.h"
#include "ledger/ledger_client.h"
#include "metadata/metadata_store.h"
#include "proto/metadata.pb.h"

namespace ledgerkv::ledger {

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
  // The key names a registered bookie, whatever its record says (an
  // unparsable one is still registered: never a reason to copy).
  for (const auto& kv : registered) live.insert(kv.key.substr(keys.BookiesPrefix().size()));
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> ledgers,
                   options_.store->List(keys.LedgersPrefix()));

  // Every unregistered bookie a ledger names, with the ledgers naming it.
  std::map<std::string, std::vector<std::pair<uint64_t, bool>>> naming;  // id, closed
  for (const auto& kv : ledgers) {
    uint64_t id = 0;
    if (!keys.ParseLedgerKey(kv.key, &id)) continue;
    meta::v1::LedgerMetadata md;
    // Unparsable: `ledgerkv ledger list` reports it; nothing to act on.
    if (!md.ParseFromString(kv.value)) continue;
    for (const std::string& b : BookiesNamed(md)) {
      if (!live.contains(b)) naming[b].emplace_back(id, md.state() == meta::v1::CLOSED);
    }
  }

  AuditResult result;
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
    for (const auto& [id, closed] : named_by) result.ledgers_not_closed += !closed;
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
    return result;
  }
  absl::flat_hash_map<std::string, std::string> failures;  // this pass's
  for (const std::string* bookie : lost) {
    for (const auto& [id, closed] : naming[*bookie]) {
      if (!closed) continue;  // counted above
      if (!keep_going()) return result;
      absl::StatusOr<ReplicationResult> replaced =
          options_.client->ReplaceBookie(id, *bookie, keep_going);
      if (absl::IsCancelled(replaced.status())) return result;  // asked to stop
      if (replaced.ok()) {
        ++result.ledgers_replaced;
        result.entries_copied += replaced->entries_copied;
        result.lines.push_back(absl::StrCat(
            "ledger ", id, ": lost bookie ", *bookie, " replaced by ",
            absl::StrJoin(replaced->replacements, ", "), ", ", replaced->entries_copied,
            " entries copied"));
        result.corrupt_copies_repaired += replaced->corrupt.repaired;
        result.corrupt_copies_unrepaired += replaced->corrupt.unrepaired;
        for (const std::string& line : replaced->corrupt.lines) result.lines.push_back(line);
      } else if (absl::IsNotFound(replaced.status())) {
        // Deleted meanwhile, or replaced by someone else: nothing left.
      } else if (absl::IsFailedPrecondition(replaced.status())) {
        ++result.ledgers_not_closed;  // reopened for recovery meanwhile
      } else {
        ++result.ledgers_failed;
        const std::string key = absl::StrCat(id, " ", *bookie);
        std::string why = replaced.status().ToString();
        auto known = failures_reported_.find(key);
        if (known == failures_reported_.end() || known->second != why) {
          result.lines.push_back(absl::StrCat("ledger ", id, ": replacing lost bookie ", *bookie,
                                              " failed (retried at every pass, logged again if "
                                              "the reason changes): ",
                                              why));
        }
        failures.emplace(key, std::move(why));
      }
    }
  }
  failures_reported_.swap(failures);
  return result;
}

}  // namespace ledgerkv::ledger
