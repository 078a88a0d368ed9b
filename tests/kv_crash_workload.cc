#include "tests/kv_crash_workload.h"

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/kv_process_util.h"

namespace ledgerkv::testing {

namespace v1 = ::ledgerkv::v1;

namespace {

constexpr const char* kKindNames[] = {"inc", "put", "txn", "group"};
constexpr int kGroupSize = 5;

std::string Token(int64_t n) { return absl::StrCat("tok-", n); }
std::string PutKey(const std::string& p, int64_t n) { return absl::StrFormat("%sput/%06d", p, n); }
std::string GroupPrefix(const std::string& p, int64_t g) {
  return absl::StrFormat("%sg/%06d/", p, g);
}
// The first key after every key that starts with `prefix` (prefix's last
// byte is '/', so bumping it to '0' is enough).
std::string PrefixEnd(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

}  // namespace

CrashWorkload::CrashWorkload(std::string table, std::string prefix, int threads_per_kind)
    : table_(std::move(table)), prefix_(std::move(prefix)) {
  for (int kind = kInc; kind <= kGroup; ++kind) {
    for (int i = 0; i < threads_per_kind; ++i) {
      auto w = std::make_unique<Writer>();
      w->kind = static_cast<Kind>(kind);
      w->index = i;
      w->key_prefix = absl::StrCat(prefix_, kKindNames[kind], "-", i, "/");
      writers_.push_back(std::move(w));
    }
  }
}

CrashWorkload::~CrashWorkload() { StopAndJoin(); }

void CrashWorkload::Start(std::shared_ptr<grpc::Channel> channel) {
  channel_ = std::move(channel);
  for (auto& w : writers_) threads_.emplace_back([this, w = w.get()] { Run(w); });
}

void CrashWorkload::StopAndJoin() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

absl::Status CrashWorkload::WaitForAcks(int64_t n, absl::Duration timeout) {
  const absl::Time start = absl::Now();
  for (;;) {
    const std::vector<absl::Status> errors = Errors();
    if (!errors.empty()) {
      std::string all;
      for (const absl::Status& e : errors) {
        absl::StrAppend(&all, all.empty() ? "" : "; ", e.ToString());
      }
      return absl::AbortedError(
          absl::StrCat(errors.size(), " writer(s) stopped on an error: ", all));
    }
    const Writer* slowest = nullptr;
    int64_t fewest = n;
    for (auto& w : writers_) {
      absl::MutexLock l(&w->mu);
      if (w->acked < fewest) {
        fewest = w->acked;
        slowest = w.get();
      }
    }
    if (slowest == nullptr) return absl::OkStatus();
    if (absl::Now() - start >= timeout) {
      return absl::DeadlineExceededError(
          absl::StrCat("writers too slow: after ", absl::FormatDuration(timeout), " ",
                       slowest->key_prefix, " has ", fewest, " of ", n, " acknowledged writes"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::vector<absl::Status> CrashWorkload::Errors() const {
  std::vector<absl::Status> out;
  for (auto& w : writers_) {
    absl::MutexLock l(&w->mu);
    if (!w->error.ok()) {
      out.push_back(
          absl::Status(w->error.code(), absl::StrCat(w->key_prefix, ": ", w->error.message())));
    }
  }
  return out;
}

int64_t CrashWorkload::TotalAcked() const {
  int64_t total = 0;
  for (auto& w : writers_) {
    absl::MutexLock l(&w->mu);
    total += w->acked;
  }
  return total;
}

int CrashWorkload::InFlight() const {
  int n = 0;
  for (auto& w : writers_) {
    absl::MutexLock l(&w->mu);
    n += w->in_flight ? 1 : 0;
  }
  return n;
}

int64_t CrashWorkload::MaxAckedRevision() const {
  int64_t max = 0;
  for (auto& w : writers_) {
    absl::MutexLock l(&w->mu);
    max = std::max(max, w->max_revision);
  }
  return max;
}

void CrashWorkload::Run(Writer* w) {
  auto stub = v1::KV::NewStub(channel_);
  while (!stop_) {
    int64_t n;
    {
      absl::MutexLock l(&w->mu);
      n = w->acked + 1;
      w->in_flight = true;
    }
    int64_t revision = 0;
    absl::Status s = DoOp(*stub, w, n, &revision);
    absl::MutexLock l(&w->mu);
    if (!s.ok()) {
      w->error = s;  // in_flight stays true: the outcome is unknown
      return;
    }
    w->in_flight = false;
    w->acked = n;
    w->max_revision = std::max(w->max_revision, revision);
    if (w->kind == kPut) w->put_revisions.push_back(revision);
  }
}

absl::Status CrashWorkload::DoOp(v1::KV::Stub& stub, Writer* w, int64_t n, int64_t* revision) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(20));
  const std::string& p = w->key_prefix;
  switch (w->kind) {
    case kInc: {
      v1::IncrementRequest req;
      req.set_table(table_);
      req.set_key(p + "ctr");
      req.set_delta(1);
      v1::IncrementResponse resp;
      grpc::Status s = stub.Increment(&ctx, req, &resp);
      if (!s.ok()) return ToAbsl(s);
      EXPECT_EQ(resp.value(), n) << p << ": only this writer increments its counter";
      *revision = resp.header().revision();
      return absl::OkStatus();
    }
    case kPut: {
      v1::PutRequest req;
      req.set_table(table_);
      req.set_key(PutKey(p, n));
      req.set_value(Token(n) + std::string(put_padding_, '.'));
      v1::PutResponse resp;
      grpc::Status s = stub.Put(&ctx, req, &resp);
      if (!s.ok()) return ToAbsl(s);
      *revision = resp.header().revision();
      return absl::OkStatus();
    }
    case kTxn: {
      v1::TxnRequest req;
      req.set_table(table_);
      v1::Compare* c = req.add_compares();
      c->set_key(p + "a");
      c->set_target(v1::Compare::VERSION);
      c->set_result(v1::Compare::EQUAL);
      c->set_number(n - 1);
      for (const char* k : {"a", "b"}) {
        v1::PutRequest* put = req.add_success()->mutable_put();
        put->set_key(p + k);
        put->set_value(Token(n));
      }
      v1::IncrementRequest* inc = req.add_success()->mutable_increment();
      inc->set_key(p + "c");
      inc->set_delta(1);
      req.add_failure()->mutable_get()->set_key(p + "a");
      v1::TxnResponse resp;
      grpc::Status s = stub.Txn(&ctx, req, &resp);
      if (!s.ok()) return ToAbsl(s);
      EXPECT_TRUE(resp.succeeded()) << p << " op " << n << ": " << resp.ShortDebugString();
      EXPECT_EQ(resp.results_size(), 3);
      if (resp.results_size() == 3) {
        EXPECT_EQ(resp.results(2).increment().value(), n);
      }
      *revision = resp.header().revision();
      if (!resp.succeeded()) return absl::InternalError("txn compare failed");
      return absl::OkStatus();
    }
    case kGroup: {
      int64_t g = (n + 1) / 2;
      if (n % 2 == 1) {
        v1::TxnRequest req;
        req.set_table(table_);
        for (int i = 0; i < kGroupSize; ++i) {
          v1::PutRequest* put = req.add_success()->mutable_put();
          put->set_key(absl::StrCat(GroupPrefix(p, g), i));
          put->set_value(Token(g));
        }
        v1::TxnResponse resp;
        grpc::Status s = stub.Txn(&ctx, req, &resp);
        if (!s.ok()) return ToAbsl(s);
        EXPECT_TRUE(resp.succeeded());
        *revision = resp.header().revision();
        return absl::OkStatus();
      }
      v1::DeleteRequest req;
      req.set_table(table_);
      req.set_key(GroupPrefix(p, g));
      req.set_end(PrefixEnd(GroupPrefix(p, g)));
      v1::DeleteResponse resp;
      grpc::Status s = stub.Delete(&ctx, req, &resp);
      if (!s.ok()) return ToAbsl(s);
      EXPECT_EQ(resp.deleted(), kGroupSize) << p << " group " << g;
      *revision = resp.header().revision();
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown kind");
}

void CrashWorkload::Verify(const std::map<std::string, v1::KeyValue>& state,
                           int64_t revision) const {
  EXPECT_GE(revision, MaxAckedRevision()) << "the revision went back below an acknowledged write";
  for (const auto& w : writers_) VerifyWriter(*w, state, revision);
}

void CrashWorkload::VerifyWriter(const Writer& w, const std::map<std::string, v1::KeyValue>& state,
                                 int64_t revision) const {
  int64_t acked;
  bool in_flight;
  std::vector<int64_t> put_revisions;
  {
    absl::MutexLock l(&w.mu);
    acked = w.acked;
    in_flight = w.in_flight;
    put_revisions = w.put_revisions;
  }
  const std::string& p = w.key_prefix;
  SCOPED_TRACE(absl::StrCat(p, " acked ", acked, in_flight ? " + 1 in flight" : ""));
  std::map<std::string, v1::KeyValue> mine;
  for (auto it = state.lower_bound(p); it != state.end() && absl::StartsWith(it->first, p); ++it) {
    mine.insert(*it);
    EXPECT_LE(it->second.create_revision(), it->second.mod_revision()) << KvString(it->second);
    EXPECT_LE(it->second.mod_revision(), revision) << KvString(it->second);
    EXPECT_GE(it->second.create_revision(), 1) << KvString(it->second);
  }
  // `n` outcomes are allowed: acked, or acked + 1 when a write was in flight.
  auto allowed = [&](int64_t n) { return n == acked || (in_flight && n == acked + 1); };
  // Takes `key` out of `mine` (what is left at the end was unexpected).
  std::vector<std::unique_ptr<v1::KeyValue>> taken;
  auto take = [&](const std::string& key) -> const v1::KeyValue* {
    auto it = mine.find(key);
    if (it == mine.end()) return nullptr;
    taken.push_back(std::make_unique<v1::KeyValue>(std::move(it->second)));
    mine.erase(it);
    return taken.back().get();
  };
  switch (w.kind) {
    case kInc: {
      const v1::KeyValue* kv = take(p + "ctr");
      int64_t v = 0;
      if (kv != nullptr) {
        ASSERT_TRUE(absl::SimpleAtoi(kv->value(), &v)) << KvString(*kv);
        EXPECT_EQ(kv->version(), v) << KvString(*kv);
      }
      EXPECT_TRUE(allowed(v)) << "counter " << v;
      break;
    }
    case kPut: {
      int64_t present = 0;
      int64_t last_mod = 0;
      for (int64_t n = 1;; ++n) {
        const v1::KeyValue* kv = take(PutKey(p, n));
        if (kv == nullptr) break;
        present = n;
        EXPECT_EQ(kv->value(), Token(n) + std::string(put_padding_, '.')) << KvString(*kv);
        EXPECT_EQ(kv->version(), 1) << KvString(*kv);
        EXPECT_EQ(kv->create_revision(), kv->mod_revision()) << KvString(*kv);
        EXPECT_GT(kv->mod_revision(), last_mod) << "puts of one writer keep their order";
        last_mod = kv->mod_revision();
        if (n <= static_cast<int64_t>(put_revisions.size())) {
          EXPECT_LE(kv->mod_revision(), put_revisions[n - 1]) << KvString(*kv);
        }
      }
      EXPECT_TRUE(allowed(present)) << "puts 1.." << present << " present";
      break;
    }
    case kTxn: {
      const v1::KeyValue* a = take(p + "a");
      const v1::KeyValue* b = take(p + "b");
      const v1::KeyValue* c = take(p + "c");
      int64_t m = 0;
      if (c != nullptr) {
        ASSERT_TRUE(absl::SimpleAtoi(c->value(), &m)) << KvString(*c);
      }
      EXPECT_TRUE(allowed(m)) << "txn counter " << m;
      if (m == 0) {
        EXPECT_EQ(a, nullptr) << "half a txn: " << KvString(*a);
        EXPECT_EQ(b, nullptr) << "half a txn: " << KvString(*b);
      } else {
        ASSERT_NE(a, nullptr) << "half a txn: c=" << m;
        ASSERT_NE(b, nullptr) << "half a txn: c=" << m;
        EXPECT_EQ(a->value(), Token(m)) << "half a txn: " << KvString(*a) << " c=" << m;
        EXPECT_EQ(b->value(), Token(m)) << "half a txn: " << KvString(*b) << " c=" << m;
        for (const v1::KeyValue* kv : {a, b, c}) {
          EXPECT_EQ(kv->version(), m) << KvString(*kv);
          EXPECT_EQ(kv->mod_revision(), c->mod_revision()) << "one txn, one revision";
        }
      }
      break;
    }
    case kGroup: {
      std::set<int64_t> groups;
      for (int64_t g = 1; 2 * g - 1 <= acked + 1; ++g) groups.insert(g);
      for (const auto& [key, kv] : std::map<std::string, v1::KeyValue>(mine)) {
        int64_t g = 0;
        std::string rest = key.substr(p.size());
        if (!absl::StartsWith(rest, "g/") || !absl::SimpleAtoi(rest.substr(2, 6), &g)) {
          ADD_FAILURE() << "unexpected key " << KvString(kv);
          continue;
        }
        groups.insert(g);
      }
      for (int64_t g : groups) {
        int present = 0;
        int64_t mod = -1;
        for (int i = 0; i < kGroupSize; ++i) {
          const v1::KeyValue* kv = take(absl::StrCat(GroupPrefix(p, g), i));
          if (kv == nullptr) continue;
          ++present;
          EXPECT_EQ(kv->value(), Token(g)) << KvString(*kv);
          if (mod >= 0) {
            EXPECT_EQ(kv->mod_revision(), mod) << "one txn, one revision";
          }
          mod = kv->mod_revision();
        }
        EXPECT_TRUE(present == 0 || present == kGroupSize)
            << "group " << g << " partly present (" << present << " of " << kGroupSize << ")";
        const int64_t put_op = 2 * g - 1;
        const int64_t delete_op = 2 * g;
        bool may_be_present = (acked == put_op) || (allowed(put_op) && acked == put_op - 1);
        bool may_be_absent = acked >= delete_op || acked < put_op || allowed(delete_op);
        if (present > 0) {
          EXPECT_TRUE(may_be_present) << "group " << g << " present";
        }
        if (present == 0) {
          EXPECT_TRUE(may_be_absent) << "acknowledged group " << g << " lost";
        }
      }
      break;
    }
  }
  for (const auto& [key, kv] : mine) ADD_FAILURE() << "unexpected key " << KvString(kv);
}

}  // namespace ledgerkv::testing
