// Cluster mode under storage and coordination faults, with real processes
// (Debian's etcd, `ledgerkv bookie`, `ledgerkv server`):
// - kill -9 of one of 4 bookies under load with E=3, Qw=3, Qa=2: writes
//   continue (the writer replaces the bookie), nothing acknowledged is lost;
// - etcd killed and restarted under load: the cluster stalls, then recovers
//   by itself, nothing acknowledged is lost.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/cluster_util.h"

namespace ledgerkv {
namespace {

using testing::AckedWriter;
using testing::ClusterFlags;
using testing::TestCluster;

class ClusterFaultProcessTest : public ::testing::Test {
 protected:
  void StartCluster(const ClusterFlags& flags) {
    auto c = TestCluster::Start(flags);
    if (!c.ok() && absl::IsFailedPrecondition(c.status())) GTEST_SKIP() << c.status();
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto range = cluster_->DefaultRange();
    ASSERT_TRUE(range.ok()) << range.status();
    range_ = *range;
  }

  void TearDown() override {
    if (HasFailure() && cluster_ != nullptr) ADD_FAILURE() << cluster_->LogTails();
  }

  // With `writer` putting, kills (-9) the first bookie of the ensemble of
  // the range log's current ledger, then waits for `more` acknowledged puts
  // (the writer replaced the bookie). Sets ensemble_, ledger_ and victim_.
  void KillTheLogsFirstBookieUnderLoad(AckedWriter& writer, int more) {
    ASSERT_TRUE(writer.WaitForMore(50, absl::Seconds(30))) << "writes do not go through";
    auto ensemble = cluster_->CurrentLogEnsemble(range_);
    ASSERT_TRUE(ensemble.ok()) << ensemble.status();
    ASSERT_EQ(ensemble->size(), 3u);
    ensemble_ = *ensemble;
    auto ledger = cluster_->CurrentLogLedger(range_);
    ASSERT_TRUE(ledger.ok()) << ledger.status();
    ledger_ = *ledger;
    victim_ = ensemble_[0];
    int victim_index = -1;
    for (int i = 0; i < cluster_->bookie_count(); ++i) {
      if (cluster_->bookie_id(i) == victim_) victim_index = i;
    }
    ASSERT_GE(victim_index, 0) << victim_;
    cluster_->KillBookie(victim_index);
    ASSERT_TRUE(writer.WaitForMore(more, absl::Seconds(30)))
        << "writes stopped after one bookie of the ensemble died";
  }

  std::unique_ptr<TestCluster> cluster_;
  uint64_t range_ = 0;
  std::vector<std::string> ensemble_;
  uint64_t ledger_ = 0;
  std::string victim_;
};

TEST_F(ClusterFaultProcessTest, BookieKill9UnderLoad_E3Qw3Qa2_WritesContinueNothingLost) {
  ClusterFlags flags;
  flags.bookies = 4;
  StartCluster(flags);
  if (cluster_ == nullptr) return;

  AckedWriter writer(cluster_->Endpoints());
  KillTheLogsFirstBookieUnderLoad(writer, 200);
  if (HasFatalFailure()) return;
  const std::string& victim = victim_;
  writer.Stop();
  EXPECT_EQ(testing::CountUnreadable(cluster_->Endpoints(), writer.Acked()), 0)
      << "of " << writer.acked();

  // The operator's view of the ledger: a new segment without the dead
  // bookie (the writer replaced it), unless the log rolled to a new ledger
  // placed on live bookies only.
  auto shown = cluster_->RunLedgerkv(
      {"ledger", "--metadata", cluster_->MetadataUri(), "show", absl::StrCat(ledger_)});
  ASSERT_TRUE(shown.ok()) << shown.status();
  std::vector<std::string> segments;
  for (absl::string_view line : absl::StrSplit(*shown, '\n')) {
    if (absl::StrContains(line, "from entry ")) segments.emplace_back(line);
  }
  ASSERT_GE(segments.size(), 1u) << *shown;
  EXPECT_EQ(segments.size(), 2u) << "expected one ensemble change:\n" << *shown;
  EXPECT_FALSE(absl::StrContains(segments.back(), victim + "(")) << *shown;
  auto now = cluster_->CurrentLogEnsemble(range_);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(std::count(now->begin(), now->end(), victim), 0);
}

// Automatic re-replication (docs/ledger-protocol.md, "Re-replication"): a
// bookie killed for good is replaced in the log's closed ledger by the
// controller's auditor, with no operator, once it has been unregistered
// for --rereplicate-after-s.
TEST_F(ClusterFaultProcessTest, ALostBookieIsReplacedInClosedLedgersWithoutAnOperator) {
  ClusterFlags flags;
  flags.bookies = 4;
  flags.servers = 1;
  flags.rereplicate_after_s = 2;
  StartCluster(flags);
  if (cluster_ == nullptr) return;

  AckedWriter writer(cluster_->Endpoints());
  KillTheLogsFirstBookieUnderLoad(writer, 100);
  if (HasFatalFailure()) return;
  const std::string& victim = victim_;
  writer.Stop();
  // A clean stop closes the log's ledger; the restarted server leads.
  EXPECT_EQ(cluster_->TerminateServer(0), 0);
  ASSERT_TRUE(cluster_->StartServer(0).ok());

  auto load = [&]() -> absl::StatusOr<meta::v1::LedgerMetadata> {
    auto got = cluster_->store().Get(cluster_->keys().Ledger(ledger_));
    if (!got.ok()) return got.status();
    meta::v1::LedgerMetadata md;
    if (!md.ParseFromString(got->value)) return absl::DataLossError("unparsable");
    return md;
  };
  auto names_victim = [&](const meta::v1::LedgerMetadata& md) {
    for (const auto& segment : md.segments()) {
      if (std::count(segment.bookies().begin(), segment.bookies().end(), victim) > 0) {
        return true;
      }
    }
    return false;
  };
  auto md = load();
  ASSERT_TRUE(md.ok()) << md.status();
  ASSERT_EQ(md->state(), meta::v1::CLOSED) << md->ShortDebugString();
  ASSERT_TRUE(names_victim(*md)) << "nothing to re-replicate: " << md->ShortDebugString();
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && md.ok() && names_victim(*md)) {
    absl::SleepFor(absl::Milliseconds(250));
    md = load();
  }
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_FALSE(names_victim(*md)) << "still names the lost bookie " << victim << ": "
                                  << md->ShortDebugString();
  EXPECT_EQ(md->state(), meta::v1::CLOSED);
  EXPECT_EQ(testing::CountUnreadable(cluster_->Endpoints(), writer.Acked()), 0)
      << "of " << writer.acked();

  // The replacement holds the copies it is named for: with the first
  // segment's other two bookies gone as well, every entry of that segment
  // still reads back. (Later segments are not the auditor's: their last
  // copy on the spare may have been on its way when the writer closed.)
  const std::string replacement = [&] {
    for (const std::string& b : md->segments(0).bookies()) {
      if (std::count(ensemble_.begin(), ensemble_.end(), b) == 0) return b;
    }
    return std::string();
  }();
  ASSERT_FALSE(replacement.empty()) << md->ShortDebugString();
  for (int i = 0; i < flags.bookies; ++i) {
    const std::string& b = cluster_->bookie_id(i);
    if (b != victim && b != replacement) cluster_->KillBookie(i);
  }
  const int64_t last =
      md->segments_size() > 1 ? md->segments(1).first_entry_id() - 1 : md->last_entry_id();
  ASSERT_GE(last, 0) << md->ShortDebugString();
  auto read = cluster_->RunLedgerkv({"ledger", "--metadata", cluster_->MetadataUri(), "read",
                                     absl::StrCat(ledger_), "--to", absl::StrCat(last)});
  ASSERT_TRUE(read.ok()) << read.status();
  const int64_t lines = std::count(read->begin(), read->end(), '\n');
  EXPECT_EQ(lines, last + 1) << *read;
}

TEST_F(ClusterFaultProcessTest, EtcdRestartUnderLoad_StallsThenRecoversNothingLost) {
  StartCluster(ClusterFlags{});
  if (cluster_ == nullptr) return;

  AckedWriter writer(cluster_->Endpoints());
  ASSERT_TRUE(writer.WaitForMore(50, absl::Seconds(30))) << "writes do not go through";

  // Down for longer than the lease: servers must stop trusting their lease
  // (and give their ranges up) rather than carry on blindly.
  cluster_->etcd().Stop();
  absl::SleepFor(absl::Seconds(6));
  const int before_restart = writer.acked();
  ASSERT_TRUE(cluster_->etcd().Restart().ok());

  ASSERT_TRUE(writer.WaitForMore(100, absl::Seconds(45)))
      << "writes did not resume after etcd came back (" << writer.acked() << " acknowledged, "
      << before_restart << " before the restart)";
  writer.Stop();
  EXPECT_EQ(testing::CountUnreadable(cluster_->Endpoints(), writer.Acked()), 0)
      << "of " << writer.acked();
  auto status = cluster_->RunLedgerkv({"cluster", "--metadata", cluster_->MetadataUri(), "status"});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(absl::StrContains(*status, "servers: 2")) << *status;
  EXPECT_TRUE(absl::StrContains(*status, "owner_live=yes")) << *status;
}

}  // namespace
}  // namespace ledgerkv
