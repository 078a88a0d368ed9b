#include "tests/cluster_util.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "metadata/open_store.h"

namespace ledgerkv::testing {
namespace {

namespace meta = ::ledgerkv::meta::v1;

}  // namespace

absl::StatusOr<std::unique_ptr<TestCluster>> TestCluster::Start(const ClusterFlags& flags) {
  std::unique_ptr<TestCluster> c(new TestCluster());
  c->flags_ = flags;
  auto etcd = metadata::testing::EtcdProcess::Start();
  if (!etcd.ok()) return etcd.status();
  c->etcd_ = std::move(*etcd);
  auto store = metadata::OpenMetadataStore(c->etcd_->Uri());
  if (!store.ok()) return store.status();
  c->store_ = std::move(*store);
  for (int i = 0; i < flags.bookies; ++i) {
    c->bookies_.push_back({absl::StrCat("bookie-", i), absl::StrCat("127.0.0.1:", FreePort()),
                           absl::StrCat(c->dir_.path(), "/bookie-", i), nullptr});
    if (absl::Status s = c->StartBookie(i); !s.ok()) return s;
  }
  for (int i = 0; i < flags.servers; ++i) {
    const std::string address = absl::StrCat("127.0.0.1:", FreePort());
    c->servers_.push_back(
        {address, address, absl::StrCat(c->dir_.path(), "/server-", i), nullptr});
    if (absl::Status s = c->StartServer(i); !s.ok()) return s;
  }
  absl::StatusOr<uint64_t> range = absl::DeadlineExceededError("no table default");
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!range.ok() && absl::Now() < deadline) {
    range = c->DefaultRange();
    if (!range.ok()) absl::SleepFor(absl::Milliseconds(100));
  }
  if (!range.ok()) return range.status();
  absl::StatusOr<meta::RangeAssignment> owner = c->WaitForOwner(*range, "", absl::Seconds(30));
  if (!owner.ok()) return owner.status();
  return c;
}

TestCluster::~TestCluster() {
  // Servers first: they would otherwise spend their shutdown on dead bookies.
  for (auto& s : servers_) s.process.reset();
  for (auto& b : bookies_) b.process.reset();
}

absl::Status TestCluster::StartBookie(int i) {
  Node& b = bookies_[i];
  auto p = Process::Start({BinaryPath("kv_server/ledgerkv"), "bookie", "--data-dir", b.dir,
                           "--listen", b.address, "--bookie-id", b.id, "--metadata",
                           etcd_->Uri()},
                          "listening on");
  if (!p.ok()) return p.status();
  b.process = std::move(*p);
  return absl::OkStatus();
}

absl::Status TestCluster::StartServer(int i) {
  Node& s = servers_[i];
  s.process.reset();
  std::vector<std::string> args = {
      BinaryPath("kv_server/ledgerkv"), "server", "--data-dir", s.dir, "--listen", s.address,
      "--metadata", etcd_->Uri(), "--lease-ttl-s", absl::StrCat(flags_.lease_ttl_s),
      "--ensemble", absl::StrCat(flags_.ensemble), "--write-quorum",
      absl::StrCat(flags_.write_quorum), "--ack-quorum", absl::StrCat(flags_.ack_quorum)};
  if (flags_.orphan_sweep_period_s > 0) {
    args.insert(args.end(),
                {"--orphan-sweep-period-s", absl::StrCat(flags_.orphan_sweep_period_s)});
  }
  if (flags_.orphan_min_age_s > 0) {
    args.insert(args.end(), {"--orphan-min-age-s", absl::StrCat(flags_.orphan_min_age_s)});
  }
  if (flags_.rereplicate_after_s > 0) {
    args.insert(args.end(), {"--rereplicate-after-s", absl::StrCat(flags_.rereplicate_after_s)});
  } else if (flags_.rereplicate_after_s < 0) {
    args.push_back("--no-rereplicate");
  }
  std::vector<std::string> env;
  if (!flags_.server_faults.empty()) env.push_back("LEDGERKV_FAULTS=" + flags_.server_faults);
  auto p = Process::Start(args, "serving on", absl::Seconds(60), std::move(env));
  if (!p.ok()) return p.status();
  s.process = std::move(*p);
  return absl::OkStatus();
}

absl::StatusOr<int> TestCluster::AddServer() {
  const int i = static_cast<int>(servers_.size());
  const std::string address = absl::StrCat("127.0.0.1:", FreePort());
  servers_.push_back({address, address, absl::StrCat(dir_.path(), "/server-", i), nullptr});
  if (absl::Status s = StartServer(i); !s.ok()) return s;
  return i;
}

void TestCluster::KillServer(int i) { servers_[i].process->Kill(); }
void TestCluster::StopServer(int i) { servers_[i].process->Stop(); }
void TestCluster::ContinueServer(int i) { servers_[i].process->Continue(); }
int TestCluster::TerminateServer(int i) { return servers_[i].process->Terminate(); }
void TestCluster::KillBookie(int i) { bookies_[i].process->Kill(); }

std::string TestCluster::Endpoints() const {
  std::vector<std::string> all;
  for (const Node& s : servers_) all.push_back(s.address);
  return absl::StrJoin(all, ",");
}

int TestCluster::ServerIndex(const std::string& id) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<uint64_t> TestCluster::DefaultRange() {
  auto got = store_->Get(keys_.Table("default"));
  if (!got.ok()) return got.status();
  meta::TableMetadata table;
  if (!table.ParseFromString(got->value) || table.ranges_size() != 1) {
    return absl::DataLossError("table default does not parse or has more than one range");
  }
  return table.ranges(0).range_id();
}

absl::StatusOr<meta::RangeAssignment> TestCluster::Assignment(uint64_t range_id) {
  auto got = store_->Get(keys_.Assignment(range_id));
  if (!got.ok()) return got.status();
  meta::RangeAssignment a;
  if (!a.ParseFromString(got->value)) return absl::DataLossError("assignment does not parse");
  return a;
}

absl::StatusOr<meta::RangeAssignment> TestCluster::WaitForOwner(uint64_t range_id,
                                                                const std::string& not_owner,
                                                                absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::StatusOr<meta::RangeAssignment> a = absl::NotFoundError("no assignment yet");
  while (absl::Now() < deadline) {
    a = Assignment(range_id);
    if (a.ok() && a->server_id() != not_owner) return a;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "range ", range_id, " not assigned away from '", not_owner, "' within ",
      absl::FormatDuration(timeout), "; last: ",
      a.ok() ? a->ShortDebugString() : a.status().ToString()));
}

absl::StatusOr<uint64_t> TestCluster::CurrentLogLedger(uint64_t range_id) {
  auto log = store_->Get(keys_.Log(absl::StrCat("range-", range_id)));
  if (!log.ok()) return log.status();
  meta::LogMetadata lm;
  if (!lm.ParseFromString(log->value) || lm.segments_size() == 0) {
    return absl::DataLossError("log metadata does not parse or has no ledger");
  }
  return lm.segments(lm.segments_size() - 1).ledger_id();
}

absl::StatusOr<std::vector<std::string>> TestCluster::CurrentLogEnsemble(uint64_t range_id) {
  absl::StatusOr<uint64_t> id = CurrentLogLedger(range_id);
  if (!id.ok()) return id.status();
  auto ledger = store_->Get(keys_.Ledger(*id));
  if (!ledger.ok()) return ledger.status();
  meta::LedgerMetadata md;
  if (!md.ParseFromString(ledger->value) || md.segments_size() == 0) {
    return absl::DataLossError("ledger metadata does not parse");
  }
  const meta::Segment& last = md.segments(md.segments_size() - 1);
  return std::vector<std::string>(last.bookies().begin(), last.bookies().end());
}

absl::StatusOr<std::string> TestCluster::RunLedgerkv(const std::vector<std::string>& args) {
  std::string command = BinaryPath("kv_server/ledgerkv");
  for (const std::string& a : args) absl::StrAppend(&command, " '", a, "'");
  const std::string err_path = dir_.path() + "/cli.err";
  absl::StrAppend(&command, " 2>", err_path);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("popen failed");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string err;
    if (FILE* f = std::fopen(err_path.c_str(), "r")) {
      while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) err.append(buf.data(), n);
      std::fclose(f);
    }
    return absl::InternalError(absl::StrCat(command, " exited with ", status, ": ", err, out));
  }
  return out;
}

std::string TestCluster::LogTails(size_t bytes) const {
  std::string out;
  for (const Node& s : servers_) {
    if (s.process != nullptr) {
      absl::StrAppend(&out, "\n--- server ", s.id, " ---\n", s.process->LogTail(bytes));
    }
  }
  for (const Node& b : bookies_) {
    if (b.process != nullptr) {
      absl::StrAppend(&out, "\n--- ", b.id, " ---\n", b.process->LogTail(bytes / 2));
    }
  }
  absl::StrAppend(&out, "\n--- etcd ---\n", etcd_->LogTail(bytes / 2));
  return out;
}

int CountUnreadable(const std::string& endpoints,
                    const std::map<std::string, std::string>& expected) {
  client::ClientOptions o;
  o.endpoint = endpoints;
  o.default_deadline = absl::Seconds(10);
  o.max_attempts = 10;
  auto c = client::KvClient::Create(o);
  if (!c.ok()) {
    ADD_FAILURE() << c.status();
    return static_cast<int>(expected.size());
  }
  int missing = 0;
  for (const auto& [key, value] : expected) {
    ledgerkv::v1::GetRequest get;
    get.set_table("default");
    get.set_key(key);
    auto got = (*c)->Get(get);
    if (got.ok() && got->found() && got->kv().value() == value) continue;
    if (++missing <= 5) {
      ADD_FAILURE() << "acknowledged write " << key << "=" << value << " not readable: "
                    << (got.ok() ? (got->found() ? "value " + got->kv().value() : "not found")
                                 : got.status().ToString());
    }
  }
  return missing;
}

}  // namespace ledgerkv::testing
