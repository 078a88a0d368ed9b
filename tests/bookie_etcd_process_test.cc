// `ledgerkv bookie --metadata etcd://...` against a real etcd (Debian's
// etcd-server): the bookie registers itself with its instance id under an
// etcd lease, so a killed bookie drops out of placement once the lease
// expires; a clean stop removes it at once; and a wiped data directory
// cannot rejoin under the same id (cookie).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "metadata/etcd_test_util.h"
#include "metadata/metadata_store.h"
#include "metadata/open_store.h"
#include "proto/metadata.pb.h"
#include "tests/process_util.h"

namespace ledgerkv {
namespace {

using testing::BinaryPath;
using testing::FreePort;
using testing::Process;
using testing::TempDir;

class BookieEtcdProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto etcd = metadata::testing::EtcdProcess::Start();
    if (!etcd.ok() && absl::IsFailedPrecondition(etcd.status())) {
      GTEST_SKIP() << etcd.status();
    }
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::move(*etcd);
    auto store = metadata::OpenMetadataStore(etcd_->Uri());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  std::unique_ptr<Process> StartBookie(const std::string& dir, const std::string& listen) {
    auto p = Process::Start({BinaryPath("kv_server/ledgerkv"), "bookie", "--data-dir", dir,
                             "--listen", listen, "--bookie-id", "bookie-a", "--metadata",
                             etcd_->Uri()},
                            "listening on");
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  // The registrations under bookies/ in etcd.
  std::vector<meta::v1::BookieRegistration> Registered() {
    std::vector<meta::v1::BookieRegistration> out;
    auto kvs = store_->List(keys_.BookiesPrefix());
    EXPECT_TRUE(kvs.ok()) << kvs.status();
    if (!kvs.ok()) return out;
    for (const auto& kv : *kvs) {
      meta::v1::BookieRegistration reg;
      EXPECT_TRUE(reg.ParseFromString(kv.value)) << kv.key;
      out.push_back(reg);
    }
    return out;
  }

  // Waits up to `timeout` until Registered() has `n` entries.
  bool WaitForRegistrations(size_t n, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (Registered().size() == n) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return Registered().size() == n;
  }

  metadata::Keys keys_{"default"};
  std::unique_ptr<metadata::testing::EtcdProcess> etcd_;
  std::unique_ptr<metadata::MetadataStore> store_;
};

TEST_F(BookieEtcdProcessTest, RegistersWithItsInstanceIdAndLeavesWhenKilledOrStopped) {
  TempDir dir;
  const std::string listen = absl::StrCat("127.0.0.1:", FreePort());
  auto bookie = StartBookie(dir.path() + "/b", listen);
  ASSERT_NE(bookie, nullptr);
  // "bookie <id> listening on <addr> instance <instance id>"
  std::vector<std::string> words = absl::StrSplit(bookie->ready_line(), ' ');
  ASSERT_GE(words.size(), 7u) << bookie->ready_line();

  ASSERT_TRUE(WaitForRegistrations(1, absl::Seconds(10)));
  meta::v1::BookieRegistration reg = Registered()[0];
  EXPECT_EQ(reg.bookie_id(), "bookie-a");
  EXPECT_EQ(reg.address(), listen);
  EXPECT_EQ(reg.instance_id(), words[6]);
  EXPECT_FALSE(reg.read_only());

  // kill -9: nobody revokes the lease; etcd expires it (TTL 10 s).
  bookie->Kill();
  EXPECT_TRUE(WaitForRegistrations(0, absl::Seconds(20)))
      << "a dead bookie must drop out of placement once its lease expires";

  // Restart on the same data: same instance, registered again; a clean
  // stop revokes the lease at once.
  bookie = StartBookie(dir.path() + "/b", listen);
  ASSERT_NE(bookie, nullptr);
  ASSERT_TRUE(WaitForRegistrations(1, absl::Seconds(10)));
  EXPECT_EQ(Registered()[0].instance_id(), words[6]);
  EXPECT_EQ(bookie->Terminate(), 0) << bookie->LogTail();
  EXPECT_TRUE(WaitForRegistrations(0, absl::Seconds(3)));
}

TEST_F(BookieEtcdProcessTest, WipedDataDirCannotRejoinUnderTheSameId) {
  TempDir dir;
  const std::string listen = absl::StrCat("127.0.0.1:", FreePort());
  auto bookie = StartBookie(dir.path() + "/b", listen);
  ASSERT_NE(bookie, nullptr);
  ASSERT_EQ(bookie->Terminate(), 0) << bookie->LogTail();
  // Same id, fresh directory: the cookie in etcd names the old instance.
  auto p = Process::Start({BinaryPath("kv_server/ledgerkv"), "bookie", "--data-dir",
                           dir.path() + "/fresh", "--listen", listen, "--bookie-id", "bookie-a",
                           "--metadata", etcd_->Uri()},
                          "listening on", absl::Seconds(15));
  ASSERT_FALSE(p.ok()) << "a wiped bookie rejoined under its old id";
  EXPECT_NE(p.status().message().find("cookie"), std::string::npos) << p.status();
}

}  // namespace
}  // namespace ledgerkv
