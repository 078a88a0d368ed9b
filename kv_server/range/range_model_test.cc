// Model test: random writes against a Range and against a std::map that
// follows docs/kv-api.md, with close/reopen, crashes, snapshots and wiped
// local state in between; after every step the whole range must equal the
// model (values, versions, create/mod revisions, revision, counters).
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kv_server/range/range_test_util.h"

namespace ledgerkv::kv::testing {
namespace {

struct ModelKv {
  std::string value;
  int64_t create = 0;
  int64_t mod = 0;
  int64_t version = 0;
};

class Model {
 public:
  int64_t revision() const { return revision_; }
  const std::map<std::string, ModelKv>& kvs() const { return kvs_; }
  const ModelKv* Find(const std::string& k) const {
    auto it = kvs_.find(k);
    return it == kvs_.end() ? nullptr : &it->second;
  }
  // Starts a change; all writes until Commit share one revision.
  void Begin() { next_ = revision_ + 1; changed_ = false; }
  void Set(const std::string& k, const std::string& v) {
    ModelKv& kv = kvs_[k];
    if (kv.version == 0) kv.create = next_;
    kv.value = v;
    kv.mod = next_;
    ++kv.version;
    changed_ = true;
  }
  void Erase(const std::string& k) {
    if (kvs_.erase(k) > 0) changed_ = true;
  }
  void Commit() {
    if (changed_) revision_ = next_;
  }

 private:
  std::map<std::string, ModelKv> kvs_;
  int64_t revision_ = 0;
  int64_t next_ = 0;
  bool changed_ = false;
};

void ExpectEqual(Range& range, const Model& model, int step) {
  auto scan = range.Scan(ScanSpec{});
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(scan->kvs.size(), model.kvs().size()) << "step " << step;
  size_t i = 0;
  int64_t bytes = 0;
  for (const auto& [k, kv] : model.kvs()) {
    const v1::KeyValue& got = scan->kvs[i++];
    EXPECT_EQ(got.key(), k) << "step " << step;
    EXPECT_EQ(got.value(), kv.value) << "step " << step << " key " << k;
    EXPECT_EQ(got.create_revision(), kv.create) << "step " << step << " key " << k;
    EXPECT_EQ(got.mod_revision(), kv.mod) << "step " << step << " key " << k;
    EXPECT_EQ(got.version(), kv.version) << "step " << step << " key " << k;
    bytes += static_cast<int64_t>(k.size() + kv.value.size());
  }
  EXPECT_EQ(scan->revision, model.revision()) << "step " << step;
  const RangeStats stats = range.stats();
  EXPECT_EQ(stats.revision, model.revision()) << "step " << step;
  EXPECT_EQ(stats.key_count, static_cast<int64_t>(model.kvs().size())) << "step " << step;
  EXPECT_EQ(stats.bytes, bytes) << "step " << step;
}

TEST_F(RangeTest, RandomWritesWithRestartsMatchAModel) {
  std::mt19937 rng(20261202);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto key = [&]() { return absl::StrCat("k", pick(16)); };
  RangeOptions options = Options();
  options.log.roll_bytes = 4 << 10;
  LKV_ASSIGN_OR_FAIL(auto range, Open(options));
  Model model;
  constexpr int kSteps = 400;
  for (int step = 0; step < kSteps; ++step) {
    const int op = pick(100);
    if (op < 30) {  // put, sometimes conditional
      const std::string k = key();
      const std::string v = pick(2) == 0 ? absl::StrCat(pick(1000)) : absl::StrCat("v", step);
      v1::PutRequest put = PutReq(k, v);
      const ModelKv* cur = model.Find(k);
      const int64_t version = cur != nullptr ? cur->version : 0;
      bool holds = true;
      if (pick(3) == 0) {
        const int64_t expected = pick(2) == 0 ? version : version + 1;
        put.set_expected_version(expected);
        holds = expected == version;
      }
      auto r = Put(*range, put);
      ASSERT_EQ(r.ok(), holds) << "step " << step << " " << r.status();
      if (holds) {
        model.Begin();
        model.Set(k, v);
        model.Commit();
      }
    } else if (op < 45) {  // delete one key or a range
      model.Begin();
      if (pick(2) == 0) {
        const std::string k = key();
        auto r = Delete(*range, DelReq(k));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(r->deleted(), model.Find(k) != nullptr ? 1 : 0);
        model.Erase(k);
      } else {
        std::string a = key(), b = key();
        if (a > b) std::swap(a, b);
        if (a == b) b += "~";
        auto r = Delete(*range, DelReq(a, b));
        ASSERT_TRUE(r.ok()) << r.status();
        int64_t n = 0;
        for (auto it = model.kvs().lower_bound(a); it != model.kvs().end() && it->first < b;) {
          const std::string victim = (it++)->first;
          model.Erase(victim);
          ++n;
        }
        EXPECT_EQ(r->deleted(), n) << "step " << step;
      }
      model.Commit();
    } else if (op < 70) {  // increment
      const std::string k = key();
      const int64_t delta = pick(21) - 10;
      const ModelKv* cur = model.Find(k);
      int64_t base = 0;
      const bool number = cur == nullptr || absl::SimpleAtoi(cur->value, &base);
      auto r = Increment(*range, k, delta);
      ASSERT_EQ(r.ok(), number) << "step " << step << " " << r.status();
      if (number) {
        EXPECT_EQ(r->value(), base + delta);
        model.Begin();
        model.Set(k, absl::StrCat(base + delta));
        model.Commit();
      }
    } else if (op < 95) {  // txn: compare a version, then put+delete or put
      const std::string c = key(), x = key(), y = key();
      const ModelKv* cur = model.Find(c);
      const int64_t version = cur != nullptr ? cur->version : 0;
      const int64_t operand = pick(2) == 0 ? version : version + 1;
      v1::TxnRequest txn;
      v1::Compare* cmp = txn.add_compares();
      cmp->set_key(c);
      cmp->set_target(v1::Compare::VERSION);
      cmp->set_result(v1::Compare::EQUAL);
      cmp->set_number(operand);
      *txn.add_success()->mutable_put() = PutReq(x, absl::StrCat("t", step));
      *txn.add_success()->mutable_delete_() = DelReq(y);
      txn.add_failure()->mutable_get()->set_key(x);
      auto r = Txn(*range, txn);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->succeeded(), operand == version) << "step " << step;
      model.Begin();
      if (r->succeeded()) {
        model.Set(x, absl::StrCat("t", step));
        model.Erase(y);
      }
      model.Commit();
      EXPECT_EQ(r->header().revision(), model.revision()) << "step " << step;
    } else {  // a lifecycle event
      const int event = pick(4);
      if (event == 0) {
        LKV_ASSERT_OK(range->Close());
        range.reset();
      } else if (event == 1) {
        range.reset();  // crash
      } else if (event == 2) {
        LKV_ASSERT_OK(range->SnapshotNow());
      } else {
        LKV_ASSERT_OK(range->Close());
        range.reset();
        std::filesystem::remove_all(options.data_dir);
      }
      if (range == nullptr) {
        LKV_ASSIGN_OR_FAIL(range, Open(options));
      }
    }
    ExpectEqual(*range, model, step);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace ledgerkv::kv::testing
