#include "tests/kv_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::testing {

namespace v1 = ::ledgerkv::v1;

v1::KeyValue KvModel::ToKv(const std::string& key, const Entry& e) const {
  v1::KeyValue kv;
  kv.set_key(key);
  kv.set_value(e.value);
  kv.set_create_revision(e.create_revision);
  kv.set_mod_revision(e.mod_revision);
  kv.set_version(e.version);
  return kv;
}

void KvModel::Write(const std::string& key, std::string value, int64_t revision) {
  auto [it, created] = kvs_.try_emplace(key);
  Entry& e = it->second;
  if (created) {
    e.create_revision = revision;
    e.version = 0;
  }
  e.value = std::move(value);
  e.mod_revision = revision;
  ++e.version;
}

absl::StatusOr<v1::PutResponse> KvModel::Put(const v1::PutRequest& req) {
  auto it = kvs_.find(req.key());
  const Entry* cur = it == kvs_.end() ? nullptr : &it->second;
  if (req.has_expected_version() && req.expected_version() != (cur == nullptr ? 0 : cur->version)) {
    return absl::FailedPreconditionError("version");
  }
  if (req.has_expected_mod_revision() &&
      (cur == nullptr || req.expected_mod_revision() != cur->mod_revision)) {
    return absl::FailedPreconditionError("mod revision");
  }
  v1::PutResponse resp;
  if (req.prev_kv() && cur != nullptr) *resp.mutable_prev_kv() = ToKv(req.key(), *cur);
  Write(req.key(), req.value(), ++revision_);
  resp.mutable_header()->set_revision(revision_);
  return resp;
}

v1::DeleteResponse KvModel::Delete(const v1::DeleteRequest& req) {
  v1::DeleteResponse resp;
  std::vector<std::string> victims;
  if (req.end().empty()) {
    if (kvs_.count(req.key())) victims.push_back(req.key());
  } else {
    for (auto it = kvs_.lower_bound(req.key()); it != kvs_.end() && it->first < req.end(); ++it) {
      victims.push_back(it->first);
    }
  }
  if (!victims.empty()) ++revision_;
  for (const auto& k : victims) {
    if (req.prev_kv()) *resp.add_prev_kvs() = ToKv(k, kvs_[k]);
    kvs_.erase(k);
  }
  resp.set_deleted(static_cast<int64_t>(victims.size()));
  resp.mutable_header()->set_revision(revision_);
  return resp;
}

absl::StatusOr<int64_t> KvModel::Incremented(const std::string& key, int64_t delta) const {
  int64_t current = 0;
  auto it = kvs_.find(key);
  if (it != kvs_.end() && !absl::SimpleAtoi(it->second.value, &current)) {
    return absl::FailedPreconditionError("not a number");
  }
  int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next)) return absl::OutOfRangeError("overflow");
  return next;
}

absl::StatusOr<v1::IncrementResponse> KvModel::Increment(const v1::IncrementRequest& req) {
  absl::StatusOr<int64_t> next = Incremented(req.key(), req.delta());
  if (!next.ok()) return next.status();
  Write(req.key(), absl::StrCat(*next), ++revision_);
  v1::IncrementResponse resp;
  resp.set_value(*next);
  resp.mutable_header()->set_revision(revision_);
  return resp;
}

bool KvModel::CompareHolds(const v1::Compare& c) const {
  auto it = kvs_.find(c.key());
  const Entry* e = it == kvs_.end() ? nullptr : &it->second;
  int cmp = 0;  // actual <=> operand
  if (c.target() == v1::Compare::VALUE) {
    if (e == nullptr) return false;  // etcd: a value compare on a missing key fails
    int r = e->value.compare(c.value());
    cmp = r < 0 ? -1 : (r > 0 ? 1 : 0);
  } else {
    int64_t actual = 0;
    if (e != nullptr) {
      actual = c.target() == v1::Compare::VERSION           ? e->version
               : c.target() == v1::Compare::CREATE_REVISION ? e->create_revision
                                                            : e->mod_revision;
    }
    cmp = actual < c.number() ? -1 : (actual > c.number() ? 1 : 0);
  }
  switch (c.result()) {
    case v1::Compare::EQUAL:
      return cmp == 0;
    case v1::Compare::NOT_EQUAL:
      return cmp != 0;
    case v1::Compare::LESS:
      return cmp < 0;
    case v1::Compare::GREATER:
      return cmp > 0;
    default:
      return false;
  }
}

absl::StatusOr<v1::TxnResponse> KvModel::Txn(const v1::TxnRequest& req) {
  bool succeeded = true;
  for (const auto& c : req.compares()) succeeded = succeeded && CompareHolds(c);
  const auto& ops = succeeded ? req.success() : req.failure();
  // Errors first (nothing is applied), then whether anything changes.
  bool writes = false;
  for (const auto& op : ops) {
    if (op.has_increment()) {
      absl::StatusOr<int64_t> next = Incremented(op.increment().key(), op.increment().delta());
      if (!next.ok()) return next.status();
      writes = true;
    } else if (op.has_put()) {
      writes = true;
    } else if (op.has_delete_()) {
      const auto& d = op.delete_();
      if (d.end().empty()) {
        writes = writes || kvs_.count(d.key()) > 0;
      } else {
        auto it = kvs_.lower_bound(d.key());
        writes = writes || (it != kvs_.end() && it->first < d.end());
      }
    }
  }
  const int64_t rev = writes ? revision_ + 1 : revision_;
  v1::TxnResponse resp;
  resp.set_succeeded(succeeded);
  for (const auto& op : ops) {
    v1::TxnOpResult* r = resp.add_results();
    if (op.has_put()) {
      auto it = kvs_.find(op.put().key());
      v1::PutResponse* p = r->mutable_put();
      if (op.put().prev_kv() && it != kvs_.end())
        *p->mutable_prev_kv() = ToKv(it->first, it->second);
      Write(op.put().key(), op.put().value(), rev);
    } else if (op.has_get()) {
      *r->mutable_get() = Get(op.get());
      r->mutable_get()->clear_header();
    } else if (op.has_delete_()) {
      int64_t saved = revision_;
      *r->mutable_delete_() = Delete(op.delete_());
      r->mutable_delete_()->clear_header();
      revision_ = saved;  // the txn takes one revision in all
    } else if (op.has_increment()) {
      int64_t next = *Incremented(op.increment().key(), op.increment().delta());
      Write(op.increment().key(), absl::StrCat(next), rev);
      r->mutable_increment()->set_value(next);
    }
  }
  revision_ = rev;
  resp.mutable_header()->set_revision(revision_);
  return resp;
}

v1::GetResponse KvModel::Get(const v1::GetRequest& req) const {
  v1::GetResponse resp;
  auto it = kvs_.find(req.key());
  if (it != kvs_.end()) {
    resp.set_found(true);
    *resp.mutable_kv() = ToKv(it->first, it->second);
  }
  resp.mutable_header()->set_revision(revision_);
  return resp;
}

v1::RangeResponse KvModel::Range(const v1::RangeRequest& req, bool* more) const {
  v1::RangeResponse resp;
  std::vector<const std::pair<const std::string, Entry>*> in;
  for (auto it = kvs_.lower_bound(req.start());
       it != kvs_.end() && (req.end().empty() || it->first < req.end()); ++it) {
    in.push_back(&*it);
  }
  if (req.reverse()) std::reverse(in.begin(), in.end());
  resp.set_count(static_cast<int64_t>(in.size()));
  size_t n = req.limit() > 0 ? std::min<size_t>(in.size(), req.limit()) : in.size();
  *more = !req.count_only() && n < in.size();  // count_only: nothing to continue
  if (!req.count_only()) {
    for (size_t i = 0; i < n; ++i) {
      v1::KeyValue kv = ToKv(in[i]->first, in[i]->second);
      if (req.keys_only()) kv.clear_value();
      *resp.add_kvs() = std::move(kv);
    }
  }
  resp.mutable_header()->set_revision(revision_);
  return resp;
}

void KvModel::Reset(const std::vector<v1::KeyValue>& kvs, int64_t revision) {
  kvs_.clear();
  for (const auto& kv : kvs) {
    kvs_[kv.key()] = Entry{kv.value(), kv.create_revision(), kv.mod_revision(), kv.version()};
  }
  revision_ = revision;
}

std::vector<v1::KeyValue> KvModel::All() const {
  std::vector<v1::KeyValue> out;
  for (const auto& [k, e] : kvs_) out.push_back(ToKv(k, e));
  return out;
}

}  // namespace ledgerkv::testing
