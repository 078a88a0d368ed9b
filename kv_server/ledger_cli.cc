#include "kv_server/ledger_cli.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "ledger/entry_format.h"
#include "ledger/ledger_client.h"
#include "metadata/open_store.h"
#include "proto/metadata.pb.h"
#include "snapshot/manifest.h"
#include "wal/log_metadata.h"

namespace ledgerkv::kv {

const char kLedgerCliUsage[] =
    "  ledger --metadata URI [--cluster NAME] <list | show ID |\n"
    "         read ID [--from N] [--to M | --follow] | recover ID [--force] |\n"
    "         delete ID [--force] |\n"
    "         rereplicate (ID | --all) --bookie B | refill (ID | --all) --bookie B>\n"
    "      operator commands on ledgers. list: every ledger with state, E/Qw/Qa and last\n"
    "      entry. show: its metadata. read: entries N..M (default 0..LAC) without\n"
    "      recovery; --follow: then every entry as it is confirmed, until the ledger is\n"
    "      closed. recover [--force]: fence and close it (its writer, if alive,\n"
    "      fails for good), print its last entry id; refused for a log's open\n"
    "      segment (its range's owner writes there). delete [--force]: remove its\n"
    "      metadata (bookies reclaim the entries); refused for a ledger that is not\n"
    "      CLOSED, that a log still names as a segment or that a snapshot manifest\n"
    "      still lists, and for a log's or snapshot's ledger less than 5 minutes old\n"
    "      (--force: delete anyway, losing what they hold). rereplicate: copy what\n"
    "      bookie B holds of a CLOSED ledger (or of every CLOSED ledger naming B:\n"
    "      --all) to another bookie and name that one instead (B lost for good, or\n"
    "      being retired); exits 1 if any ledger still names B. refill: B was\n"
    "      re-provisioned under its id (disk replaced, cookie deleted); copy back onto\n"
    "      it what the CLOSED ledger (--all: every ledger naming B) recorded on its\n"
    "      earlier instance (the controller's audit does this by itself); exits 1 if\n"
    "      any failed. URI: etcd://HOST:PORT or\n"
    "      embedded:///DIR (an existing embedded store, not open in another process).\n";

namespace {

using meta::v1::LedgerMetadata;

// Entries fetched per Read call, so that a long ledger is not held in memory.
constexpr int64_t kReadBatch = 256;
// `delete` leaves a log's or snapshot's ledger younger than this alone
// (without --force): it may be about to be named.
constexpr absl::Duration kFreshLedgerAge = absl::Minutes(5);
// Bytes of each payload shown by `read`.
constexpr size_t kShownPayloadBytes = 64;

struct Output {
  std::string* out;
  std::string* err;

  int Fail(const absl::Status& status) {
    absl::StrAppend(err, "ledgerkv ledger: ", status.ToString(), "\n");
    return kLedgerCliExitFailure;
  }
  int Usage(absl::string_view message) {
    absl::StrAppend(err, "ledgerkv ledger: ", message, "\nusage:\n", kLedgerCliUsage);
    return kLedgerCliExitUsage;
  }
};

std::string StateName(meta::v1::LedgerState state) {
  switch (state) {
    case meta::v1::OPEN:
      return "OPEN";
    case meta::v1::IN_RECOVERY:
      return "IN_RECOVERY";
    case meta::v1::CLOSED:
      return "CLOSED";
    default:
      return absl::StrCat("UNKNOWN(", static_cast<int>(state), ")");
  }
}

// The last entry id is only known for a CLOSED ledger (an open one's LAC
// lives on the bookies).
std::string LastEntry(const LedgerMetadata& m) {
  return m.state() == meta::v1::CLOSED ? absl::StrCat(m.last_entry_id()) : "-";
}

std::string Show(const LedgerMetadata& m) {
  std::string s = absl::StrFormat(
      "ledger %d\n  state: %s\n  ensemble_size: %d  write_quorum: %d  ack_quorum: %d\n"
      "  last_entry_id: %s\n  length: %d\n  ctime_unix_ms: %d\n  segments:\n",
      m.id(), StateName(m.state()), m.ensemble_size(), m.write_quorum(), m.ack_quorum(),
      LastEntry(m), m.length(), m.ctime_unix_ms());
  for (const auto& seg : m.segments()) {
    absl::StrAppend(&s, "    from entry ", seg.first_entry_id(), ":");
    for (int i = 0; i < seg.bookies_size(); ++i) {
      absl::StrAppend(&s, " ", seg.bookies(i));
      if (i < seg.bookie_instances_size()) absl::StrAppend(&s, "(", seg.bookie_instances(i), ")");
    }
    absl::StrAppend(&s, "\n");
  }
  // Sorted: a proto map iterates in unspecified order.
  std::vector<std::pair<std::string, std::string>> custom(m.custom().begin(), m.custom().end());
  std::sort(custom.begin(), custom.end());
  absl::StrAppend(&s, "  custom:", custom.empty() ? " (none)" : "", "\n");
  for (const auto& [k, v] : custom) {
    absl::StrAppend(&s, "    ", absl::CEscape(k), " = ", absl::CEscape(v), "\n");
  }
  return s;
}

int List(metadata::MetadataStore* store, const std::string& cluster, Output& o) {
  const metadata::Keys keys(cluster);
  auto kvs = store->List(keys.LedgersPrefix());
  if (!kvs.ok()) return o.Fail(kvs.status());
  absl::StrAppend(o.out, absl::StrFormat("%-20s %-12s %-10s %s\n", "LEDGER", "STATE", "E/QW/QA",
                                         "LAST_ENTRY"));
  for (const auto& kv : *kvs) {
    uint64_t id = 0;
    if (!keys.ParseLedgerKey(kv.key, &id)) continue;  // not a ledger record
    LedgerMetadata m;
    if (!m.ParseFromString(kv.value)) {
      absl::StrAppend(o.err, "ledgerkv ledger: ", kv.key, ": unparsable metadata\n");
      continue;
    }
    absl::StrAppend(
        o.out, absl::StrFormat("%-20d %-12s %-10s %s\n", id, StateName(m.state()),
                               absl::StrCat(m.ensemble_size(), "/", m.write_quorum(), "/",
                                            m.ack_quorum()),
                               LastEntry(m)));
  }
  return 0;
}

void AppendEntries(const std::vector<ledger::LedgerEntry>& entries, std::string* out) {
  for (const auto& e : entries) {
    absl::string_view shown = e.payload;
    shown = shown.substr(0, kShownPayloadBytes);
    absl::StrAppend(out, "entry ", e.entry_id, " ", e.payload.size(), " bytes: ", absl::CEscape(shown),
                    "\n");
  }
}

// How long one wait for the LAC lasts before the follower asks again.
constexpr absl::Duration kFollowSlice = absl::Seconds(1);

// read --follow: entries from `from` on, as the LAC passes them, until the
// ledger is closed at or below what was printed.
int Follow(ledger::LedgerClient* client, uint64_t id, int64_t from, Output& o,
           const std::function<void()>& flush) {
  auto reader = client->OpenLedger(id, ledger::OpenMode::kNoRecovery);
  if (!reader.ok()) return o.Fail(reader.status());
  for (int64_t next = from;;) {
    auto lac = (*reader)->WaitForLac(next - 1, kFollowSlice);
    if (absl::IsOutOfRange(lac.status())) return 0;  // closed: nothing more will come
    if (absl::IsDeadlineExceeded(lac.status()) || absl::IsUnavailable(lac.status())) continue;
    if (!lac.ok()) return o.Fail(lac.status());  // deleted, or the store refused
    while (next <= *lac) {
      const int64_t batch_last = std::min(*lac, next + kReadBatch - 1);
      auto entries = (*reader)->Read(next, batch_last);
      if (absl::IsUnavailable(entries.status())) break;  // bookies restarting: wait again
      if (!entries.ok()) return o.Fail(entries.status());
      AppendEntries(*entries, o.out);
      next = batch_last + 1;
      if (flush) flush();
    }
  }
}

// `from` < 0: not given (from entry 0); `to` < 0: up to the last readable.
int Read(ledger::LedgerClient* client, uint64_t id, int64_t from, int64_t to, Output& o) {
  auto reader = client->OpenLedger(id, ledger::OpenMode::kNoRecovery);
  if (!reader.ok()) return o.Fail(reader.status());
  // An open ledger's reader starts with the LAC it learned when opening;
  // refresh once so "all" means everything confirmed now.
  int64_t last = (*reader)->last_readable();
  if (!(*reader)->closed()) {
    auto lac = (*reader)->ReadLac();
    if (!lac.ok()) return o.Fail(lac.status());
    last = *lac;
  }
  const bool from_given = from >= 0;
  if (!from_given) {
    // The default range 0..last of a ledger with nothing readable (closed
    // empty, or nothing confirmed yet) is empty: nothing to print.
    if (to < 0 && last < 0) return 0;
    from = 0;
  }
  if (from_given && from > last && (to < 0 || from <= to)) {
    // Nothing to print is not success: the operator asked for entries that
    // are not there (yet).
    return o.Fail(absl::OutOfRangeError(
        absl::StrCat("--from ", from, " is beyond the last readable entry ", last)));
  }
  if (to < 0) to = last;
  if (to > last) {
    return o.Fail(absl::OutOfRangeError(
        absl::StrCat("--to ", to, " is beyond the last readable entry ", last)));
  }
  for (int64_t first = from; first <= to; first += kReadBatch) {
    const int64_t batch_last = std::min(to, first + kReadBatch - 1);
    auto entries = (*reader)->Read(first, batch_last);
    if (!entries.ok()) return o.Fail(entries.status());
    AppendEntries(*entries, o.out);
  }
  return 0;
}

// Whether ledger `id` may be recovered without deposing a live writer the
// system relies on: an unclosed ledger that a log (not being deleted) names
// as its segment is most likely its range owner's log being written, and
// recovery fences that writer (the range stops and opens its log again).
// FAILED_PRECONDITION naming the log; an unreadable log record is refused
// too (try again, or --force). A CLOSED ledger, or one no log names, may be.
absl::Status CheckNotALiveLogSegment(metadata::MetadataStore& store, const std::string& cluster,
                                     ledger::LedgerClient* client, uint64_t id) {
  ASSIGN_OR_RETURN(LedgerMetadata m, client->GetLedgerMetadata(id));
  if (m.state() == meta::v1::CLOSED) return absl::OkStatus();
  auto log = m.custom().find("log");
  if (log == m.custom().end()) return absl::OkStatus();
  const std::string force = "; --force recovers it anyway";
  absl::StatusOr<wal::VersionedLog> record = wal::LoadLog(
      store, metadata::Keys(cluster).Log(log->second), log->second, /*include_deleting=*/true);
  if (absl::IsNotFound(record.status())) return absl::OkStatus();
  if (!record.ok()) {
    return absl::Status(record.status().code(),
                        absl::StrCat("cannot check whether log ", log->second,
                                     " is still written to ledger ", id, ": ",
                                     record.status().message(), force));
  }
  if (record->metadata.deleting()) return absl::OkStatus();
  for (const meta::v1::LogSegment& segment : record->metadata.segments()) {
    if (segment.ledger_id() == id) {
      return absl::FailedPreconditionError(absl::StrCat(
          "ledger ", id, " is ", StateName(m.state()), " and log ", log->second,
          " names it as its segment from seqno ", segment.first_seqno(),
          ": its range's owner may be writing to it, and recovery would fence that writer "
          "(the range stops and opens its log again)",
          force));
    }
  }
  return absl::OkStatus();
}

// Whether ledger `id` may be deleted without losing what someone still
// relies on: it must be CLOSED (an OPEN ledger may have a writer getting
// adds acknowledged, which the bookies' garbage collection would then
// reclaim), no log may name it as a segment (its records are the log's;
// the log would no longer open: DATA_LOSS), and no snapshot manifest may
// list it (a restore would fall back to an older snapshot, or lose what
// the truncated log no longer holds). FAILED_PRECONDITION says which; a
// reference that cannot be read is refused too (UNAVAILABLE and the like:
// try again, or --force).
absl::Status CheckUnused(metadata::MetadataStore& store, const std::string& cluster,
                         ledger::LedgerClient* client, uint64_t id) {
  ASSIGN_OR_RETURN(LedgerMetadata m, client->GetLedgerMetadata(id));
  const std::string force = "; --force deletes it anyway";
  if (m.state() != meta::v1::CLOSED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ledger ", id, " is ", StateName(m.state()),
        ": a writer may still be adding to it (recover it first to close it)", force));
  }
  const metadata::Keys keys(cluster);
  if (auto log = m.custom().find("log"); log != m.custom().end()) {
    absl::StatusOr<wal::VersionedLog> record =
        wal::LoadLog(store, keys.Log(log->second), log->second, /*include_deleting=*/true);
    if (!record.ok() && !absl::IsNotFound(record.status())) {
      return absl::Status(record.status().code(),
                          absl::StrCat("cannot check whether log ", log->second,
                                       " still names ledger ", id, ": ",
                                       record.status().message(), force));
    }
    // A log being deleted (its table dropped) is never opened again: its
    // segments may go.
    if (record.ok() && !record->metadata.deleting()) {
      for (const meta::v1::LogSegment& segment : record->metadata.segments()) {
        if (segment.ledger_id() == id) {
          return absl::FailedPreconditionError(absl::StrCat(
              "log ", log->second, " still names ledger ", id, " as its segment from seqno ",
              segment.first_seqno(), ": deleting it would lose the log's records", force));
        }
      }
    }
  }
  if (auto purpose = m.custom().find("purpose");
      purpose != m.custom().end() && purpose->second == "snapshot") {
    uint64_t range_id = 0;
    auto range = m.custom().find("range_id");
    if (range != m.custom().end() && absl::SimpleAtoi(range->second, &range_id)) {
      absl::StatusOr<snapshot::VersionedManifest> manifest = snapshot::LoadManifest(
          store, snapshot::ManifestKey(cluster, range_id), range_id);
      if (!manifest.ok()) {
        return absl::Status(manifest.status().code(),
                            absl::StrCat("cannot check whether range ", range_id,
                                         "'s snapshots still list ledger ", id, ": ",
                                         manifest.status().message(), force));
      }
      for (const meta::v1::SnapshotRecord& snap : manifest->manifest.snapshots()) {
        if (snap.ledger_id() == id) {
          return absl::FailedPreconditionError(absl::StrCat(
              "range ", range_id, "'s snapshot manifest still lists ledger ", id,
              " (snapshot at seqno ", snap.seqno(), ")", force));
        }
      }
    }
  }
  // A log's or snapshot's ledger that nothing names yet may be about to be
  // named: a segment or manifest CAS in flight, or one whose outcome its
  // writer is still settling (the orphan sweep waits for that too).
  const bool system = m.custom().contains("log") || m.custom().contains("purpose");
  const absl::Duration age = absl::Now() - absl::FromUnixMillis(m.ctime_unix_ms());
  if (system && age < kFreshLedgerAge) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ledger ", id, " of a log or snapshot was created ", absl::FormatDuration(age),
        " ago: the log or manifest may be about to name it (wait ",
        absl::FormatDuration(kFreshLedgerAge), ")", force));
  }
  return absl::OkStatus();
}

std::string Plural(int64_t n, const char* what) {
  return absl::StrCat(n, " ", what, n == 1 ? "" : "s");
}

bool NamesBookie(const LedgerMetadata& m, const std::string& bookie) {
  const std::vector<std::string> named = ledger::BookiesNamed(m);
  return std::binary_search(named.begin(), named.end(), bookie);
}

// The ledgers whose metadata names `bookie`; an unparsable record is
// counted in *unreadable (it may name it), and reported if `report`.
absl::StatusOr<std::vector<uint64_t>> LedgersNaming(metadata::MetadataStore& store,
                                                    const std::string& cluster,
                                                    const std::string& bookie, Output& o,
                                                    bool report, int* unreadable) {
  const metadata::Keys keys(cluster);
  ASSIGN_OR_RETURN(std::vector<metadata::KeyValue> kvs, store.List(keys.LedgersPrefix()));
  std::vector<uint64_t> ids;
  *unreadable = 0;
  for (const auto& kv : kvs) {
    uint64_t id = 0;
    if (!keys.ParseLedgerKey(kv.key, &id)) continue;
    LedgerMetadata m;
    if (!m.ParseFromString(kv.value)) {
      if (report) absl::StrAppend(o.err, "ledgerkv ledger: ", kv.key, ": unparsable metadata\n");
      ++*unreadable;
      continue;
    }
    if (NamesBookie(m, bookie)) ids.push_back(id);
  }
  return ids;
}

// The arguments of `rereplicate` and `refill`: (ID | --all) --bookie B.
struct BookieCommand {
  bool all = false;
  uint64_t id = 0;
  bool have_id = false;
  std::string bookie;
};

// Parses command[1..] (command[0] is the verb); a usage error's exit code.
std::optional<int> ParseBookieCommand(const std::vector<std::string>& command, Output& o,
                                      BookieCommand* c) {
  const std::string& verb = command[0];
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (a == "--all") {
      c->all = true;
    } else if (a == "--bookie") {
      if (i + 1 >= command.size() || command[i + 1].empty()) {
        return o.Usage("--bookie needs a bookie id");
      }
      c->bookie = command[++i];
    } else if (!c->have_id && absl::SimpleAtoi(a, &c->id)) {
      c->have_id = true;
    } else {
      return o.Usage(absl::StrCat(verb, ": unexpected argument \"", a, "\""));
    }
  }
  if (c->all == c->have_id) {
    return o.Usage(absl::StrCat(verb, " needs a ledger id or --all, not both"));
  }
  if (c->bookie.empty()) return o.Usage(absl::StrCat(verb, " needs --bookie B"));
  return std::nullopt;
}

// The corrupt copies a run met on other bookies: a line each under the
// ledger's line, and the unrepaired ones counted on stderr too. Neither
// changes the exit status.
void PrintCorruptCopies(uint64_t ledger_id, const ledger::CorruptRepairs& corrupt, Output& o) {
  for (const std::string& line : corrupt.lines) absl::StrAppend(o.out, "  ", line, "\n");
  if (corrupt.unrepaired > 0) {
    absl::StrAppend(o.err, "ledgerkv ledger: ledger ", ledger_id, ": ", corrupt.unrepaired,
                    corrupt.unrepaired == 1 ? " corrupt copy" : " corrupt copies",
                    " on other bookies could not be repaired (see above)\n");
  }
}

// `refill (ID | --all) --bookie B`: command[0] is the verb. B was
// re-provisioned under its id; copies back onto its current instance what
// the ledgers recorded on an earlier one. Prints a line per ledger as it
// goes (`flush`); exits 0 when every ledger naming B records its current
// instance (or none).
int Refill(metadata::MetadataStore* store, const std::string& cluster,
           const std::vector<std::string>& command, Output& o,
           const std::function<void()>& flush) {
  BookieCommand c;
  if (std::optional<int> usage = ParseBookieCommand(command, o, &c)) return *usage;
  ledger::ClientOptions options;
  options.metadata = store;
  options.cluster = cluster;
  auto client = ledger::LedgerClient::Create(options);
  if (!client.ok()) return o.Fail(client.status());
  // Only a running bookie can be refilled (a typo must not read as done).
  if (absl::StatusOr<metadata::VersionedValue> registered =
          store->Get(metadata::Keys(cluster).Bookie(c.bookie));
      !registered.ok()) {
    return o.Fail(absl::IsNotFound(registered.status())
                      ? absl::FailedPreconditionError(absl::StrCat(
                            "bookie ", c.bookie, " is not registered in cluster ", cluster,
                            ": start it first (a bookie that is gone is replaced: "
                            "`ledgerkv ledger rereplicate`)"))
                      : registered.status());
  }
  std::vector<uint64_t> ids;
  int unreadable = 0;
  if (c.have_id) {
    ids.push_back(c.id);
  } else {
    auto listed = LedgersNaming(*store, cluster, c.bookie, o, /*report=*/true, &unreadable);
    if (!listed.ok()) return o.Fail(listed.status());
    ids = *std::move(listed);
  }
  int refilled = 0, current = 0, failed = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint64_t ledger_id = ids[k];
    auto result = (*client)->RefillBookie(ledger_id, c.bookie);
    if (result.ok()) {
      ++refilled;
      absl::StrAppend(o.out, "ledger ", ledger_id, ": bookie ", c.bookie, " refilled in ",
                      Plural(result->segments_changed, "segment"), ", ", result->entries_copied,
                      result->entries_copied == 1 ? " entry" : " entries", " copied back\n");
      PrintCorruptCopies(ledger_id, result->corrupt, o);
      if (flush) flush();
      continue;
    }
    // NOT_FOUND: the ledger is gone, or records no earlier instance of B.
    absl::Status failure = result.status();
    if (absl::IsNotFound(result.status())) {
      absl::StatusOr<LedgerMetadata> now = (*client)->GetLedgerMetadata(ledger_id);
      if (now.ok() && !c.all && !NamesBookie(*now, c.bookie)) {
        // A ledger id given that does not name B is the operator's mistake
        // (with --all, one moved off B meanwhile is done).
        failure = absl::NotFoundError(absl::StrCat("does not name bookie ", c.bookie));
      } else if (now.ok()) {
        // Nothing recorded on an earlier instance (a concurrent run, or an
        // earlier run whose last reply was lost): done. Only counted with
        // --all, where most ledgers naming B usually are so.
        failure = absl::OkStatus();
        ++current;
        if (!c.all) {
          absl::StrAppend(o.out, "ledger ", ledger_id, ": nothing to refill (",
                          result.status().message(), ")\n");
        }
      } else if (c.all && absl::IsNotFound(now.status())) {
        failure = absl::OkStatus();
        absl::StrAppend(o.out, "ledger ", ledger_id, ": deleted meanwhile\n");
      } else if (!absl::IsNotFound(now.status())) {
        failure = now.status();
      }
    }
    if (!failure.ok()) {
      ++failed;
      absl::StrAppend(o.err, "ledgerkv ledger: ledger ", ledger_id, ": ", failure.ToString(),
                      "\n");
    }
    if (flush) flush();
    if (c.all && absl::IsUnavailable(failure)) {
      // B (or a replica) cannot be reached now: each further ledger would
      // wait out its deadline for the same answer.
      const size_t left = ids.size() - k - 1;
      if (left > 0) {
        absl::StrAppend(o.err, "ledgerkv ledger: stopped; ", left,
                        left == 1 ? " ledger" : " ledgers", " not tried (run again)\n");
        failed += static_cast<int>(left);
      }
      break;
    }
  }
  if (c.all) {
    absl::StrAppend(o.out, Plural(refilled, "ledger"), " refilled onto bookie ", c.bookie, ", ",
                    current, " recording its current instance already, ", failed, " failed",
                    unreadable > 0 ? absl::StrCat(" (and ", unreadable, " unreadable)") : "",
                    "\n");
  }
  return failed == 0 && unreadable == 0 ? 0 : kLedgerCliExitFailure;
}

// `rereplicate (ID | --all) --bookie B`: command[0] is the verb. Prints a
// line per ledger as it goes (`flush`).
int Rereplicate(metadata::MetadataStore* store, const std::string& cluster,
                const std::vector<std::string>& command, Output& o,
                const std::function<void()>& flush) {
  BookieCommand c;
  if (std::optional<int> usage = ParseBookieCommand(command, o, &c)) return *usage;
  const bool all = c.all;
  const bool have_id = c.have_id;
  const uint64_t id = c.id;
  const std::string& bookie = c.bookie;

  ledger::ClientOptions options;
  options.metadata = store;
  options.cluster = cluster;
  auto client = ledger::LedgerClient::Create(options);
  if (!client.ok()) return o.Fail(client.status());

  // Exit 0 tells the operator the bookie may be retired: a bookie id that
  // no ledger names and the cluster never knew (no cookie, not registered)
  // is a typo or the wrong --cluster, not a bookie with nothing to move.
  const auto unknown_bookie = [&]() -> absl::Status {
    const metadata::Keys keys(cluster);
    for (const std::string& key : {keys.Cookie(bookie), keys.Bookie(bookie)}) {
      absl::StatusOr<metadata::VersionedValue> got = store->Get(key);
      if (got.ok()) return absl::OkStatus();
      if (!absl::IsNotFound(got.status())) return got.status();
    }
    return absl::NotFoundError(absl::StrCat(
        "no ledger names bookie ", bookie, " and cluster ", cluster,
        " has no cookie or registration for it: a mistyped id, or another --cluster?"));
  };
  std::vector<uint64_t> ids;
  int unreadable = 0;
  if (have_id) {
    ids.push_back(id);
  } else {
    auto listed = LedgersNaming(*store, cluster, bookie, o, /*report=*/false, &unreadable);
    if (!listed.ok()) return o.Fail(listed.status());
    ids = *std::move(listed);
    if (ids.empty() && unreadable == 0) {
      if (absl::Status known = unknown_bookie(); !known.ok()) return o.Fail(known);
    }
  }
  int replaced = 0, failed = 0;
  for (uint64_t ledger_id : ids) {
    auto result = (*client)->ReplaceBookie(ledger_id, bookie);
    if (absl::IsNotFound(result.status())) {
      // No longer naming the bookie (a concurrent run, or an earlier run
      // whose last reply was lost): done. Deleted: done with --all; a
      // ledger id given that does not exist is the operator's mistake.
      auto now = (*client)->GetLedgerMetadata(ledger_id);
      if (now.ok() && !NamesBookie(*now, bookie)) {
        if (absl::Status known = unknown_bookie(); !known.ok()) {
          ++failed;
          absl::StrAppend(o.err, "ledgerkv ledger: ", known.ToString(), "\n");
        } else {
          absl::StrAppend(o.out, "ledger ", ledger_id, ": does not name bookie ", bookie, "\n");
        }
      } else if (all && absl::IsNotFound(now.status())) {
        absl::StrAppend(o.out, "ledger ", ledger_id, ": deleted meanwhile\n");
      } else {
        ++failed;
        absl::StrAppend(o.err, "ledgerkv ledger: ledger ", ledger_id, ": ",
                        (now.ok() ? result.status() : now.status()).ToString(), "\n");
      }
    } else if (!result.ok()) {
      ++failed;
      absl::StrAppend(o.err, "ledgerkv ledger: ledger ", ledger_id, ": ",
                      result.status().ToString(), "\n");
    } else {
      ++replaced;
      absl::StrAppend(o.out, "ledger ", ledger_id, ": bookie ", bookie, " replaced by ",
                      absl::StrJoin(result->replacements, ", "), " in ",
                      Plural(result->segments_changed, "segment"), ", ", result->entries_copied,
                      result->entries_copied == 1 ? " entry" : " entries", " copied\n");
      // The exit status says whether the bookie still holds copies nobody
      // else has, whatever corrupt copies were met on other bookies.
      PrintCorruptCopies(ledger_id, result->corrupt, o);
    }
    if (flush) flush();
  }
  if (!all) return failed == 0 ? 0 : kLedgerCliExitFailure;
  // Listed again: ledgers created meanwhile (a live bookie can still be
  // chosen) or moved onto it by a concurrent run count too.
  auto still = LedgersNaming(*store, cluster, bookie, o, /*report=*/true, &unreadable);
  if (!still.ok()) return o.Fail(still.status());
  absl::StrAppend(o.out, Plural(replaced, "ledger"), " moved off bookie ", bookie, ", ",
                  still->size(), " still naming it",
                  unreadable > 0 ? absl::StrCat(" (and ", unreadable, " unreadable)") : "",
                  "\n");
  return still->empty() && unreadable == 0 ? 0 : kLedgerCliExitFailure;
}

}  // namespace

int RunLedgerCommand(metadata::MetadataStore* store, const std::string& cluster,
                     const std::vector<std::string>& command, std::string* out, std::string* err,
                     const std::function<void()>& flush) {
  Output o{out, err};
  if (command.empty()) return o.Usage("missing command");
  const std::string& verb = command[0];
  if (verb == "list") {
    if (command.size() != 1) return o.Usage("list takes no arguments");
    return List(store, cluster, o);
  }
  if (verb == "rereplicate") return Rereplicate(store, cluster, command, o, flush);
  if (verb == "refill") return Refill(store, cluster, command, o, flush);
  if (verb != "show" && verb != "read" && verb != "recover" && verb != "delete") {
    return o.Usage(absl::StrCat("unknown command \"", verb, "\""));
  }
  if (command.size() < 2) return o.Usage(absl::StrCat(verb, " needs a ledger id"));
  uint64_t id = 0;
  if (!absl::SimpleAtoi(command[1], &id)) {
    return o.Usage(absl::StrCat("bad ledger id \"", command[1], "\""));
  }
  int64_t from = -1;  // -1: not given (entry 0, and an empty ledger prints nothing)
  int64_t to = -1;    // -1: up to the last readable entry
  bool follow = false;
  bool force = false;
  // "--from N", "--to M", "--follow"; delete's "--force".
  for (size_t i = 2; i < command.size(); ++i) {
    const std::string& a = command[i];
    if (verb == "read" && a == "--follow") {
      follow = true;
      continue;
    }
    if ((verb == "delete" || verb == "recover") && a == "--force") {
      force = true;
      continue;
    }
    if (verb != "read" || (a != "--from" && a != "--to")) {
      return o.Usage(absl::StrCat(verb, ": unexpected argument \"", a, "\""));
    }
    int64_t* target = a == "--from" ? &from : &to;
    if (i + 1 >= command.size() || !absl::SimpleAtoi(command[i + 1], target) || *target < 0) {
      return o.Usage(absl::StrCat(a, " needs a non-negative entry id"));
    }
    ++i;
  }
  if (to >= 0 && to < from) return o.Usage("--to is below --from");
  if (follow && to >= 0) return o.Usage("--follow and --to exclude each other");

  ledger::ClientOptions options;
  options.metadata = store;
  options.cluster = cluster;
  auto client = ledger::LedgerClient::Create(options);
  if (!client.ok()) return o.Fail(client.status());

  if (verb == "show") {
    auto m = (*client)->GetLedgerMetadata(id);
    if (!m.ok()) return o.Fail(m.status());
    absl::StrAppend(out, Show(*m));
    return 0;
  }
  if (verb == "read") {
    return follow ? Follow(client->get(), id, std::max<int64_t>(from, 0), o, flush)
                  : Read(client->get(), id, from, to, o);
  }
  if (verb == "recover") {
    if (!force) {
      if (absl::Status live = CheckNotALiveLogSegment(*store, cluster, client->get(), id);
          !live.ok()) {
        return o.Fail(live);
      }
    }
    auto reader = (*client)->OpenLedger(id, ledger::OpenMode::kRecover);
    if (!reader.ok()) return o.Fail(reader.status());
    const LedgerMetadata m = (*reader)->metadata();
    absl::StrAppend(out, "ledger ", id, " ", StateName(m.state()), " last_entry_id ",
                    m.last_entry_id(), "\n");
    return 0;
  }
  // delete
  if (!force) {
    if (absl::Status in_use = CheckUnused(*store, cluster, client->get(), id); !in_use.ok()) {
      return o.Fail(in_use);
    }
  }
  absl::Status deleted = (*client)->DeleteLedger(id);
  if (!deleted.ok()) return o.Fail(deleted);
  absl::StrAppend(out, "ledger ", id, " deleted\n");
  return 0;
}

int RunLedgerCli(const std::vector<std::string>& args) {
  std::string metadata_uri;
  std::string cluster = "default";
  std::vector<std::string> command;
  std::string out;
  std::string err;
  Output o{&out, &err};
  int code = -1;
  for (size_t i = 0; i < args.size() && code < 0; ++i) {
    const std::string& a = args[i];
    if (a == "--metadata" || a == "--cluster") {
      if (i + 1 >= args.size()) {
        code = o.Usage(a + " needs a value");
        break;
      }
      (a == "--metadata" ? metadata_uri : cluster) = args[++i];
    } else if (a == "--help" || a == "-h") {
      absl::FPrintF(stdout, "usage:\n%s", kLedgerCliUsage);
      return 0;
    } else {
      command.push_back(a);
    }
  }
  if (code < 0 && metadata_uri.empty()) code = o.Usage("--metadata is required");
  if (code < 0 && cluster.empty()) code = o.Usage("--cluster must not be empty");
  if (code < 0 && command.empty()) code = o.Usage("missing command");
  if (code < 0) {
    // A mistyped embedded:// directory must not become a new, empty store.
    metadata::OpenStoreOptions open;
    open.embedded.must_exist = true;
    auto store = metadata::OpenMetadataStore(metadata_uri, open);
    if (!store.ok()) {
      code = o.Fail(store.status());
    } else {
      // --follow and rereplicate print as they go; other commands print
      // once at the end.
      auto flush = [&out, &err]() {
        std::fwrite(out.data(), 1, out.size(), stdout);
        std::fflush(stdout);
        out.clear();
        std::fwrite(err.data(), 1, err.size(), stderr);
        err.clear();
      };
      code = RunLedgerCommand(store->get(), cluster, command, &out, &err, flush);
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fwrite(err.data(), 1, err.size(), stderr);
  std::fflush(stdout);
  return code;
}

}  // namespace ledgerkv::kv
