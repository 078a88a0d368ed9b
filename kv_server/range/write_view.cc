#include "kv_server/range/write_view.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kv_server/range/validate.h"

namespace ledgerkv::kv {
namespace {

// Strict decimal int64: an optional '-' and digits, nothing else.
bool ParseCounter(std::string_view text, int64_t* out) {
  std::string_view digits = text;
  if (!digits.empty() && digits.front() == '-') digits.remove_prefix(1);
  if (digits.empty() || digits.size() > 19) return false;
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return absl::SimpleAtoi(absl::string_view(text.data(), text.size()), out);
}

template <typename T>
bool CompareResult(ledgerkv::v1::Compare::Result result, const T& actual, const T& operand) {
  switch (result) {
    case ledgerkv::v1::Compare::EQUAL:
      return actual == operand;
    case ledgerkv::v1::Compare::NOT_EQUAL:
      return actual != operand;
    case ledgerkv::v1::Compare::LESS:
      return actual < operand;
    case ledgerkv::v1::Compare::GREATER:
      return actual > operand;
    default:
      return false;
  }
}

}  // namespace

void ToKeyValue(std::string_view key, const StoredValue& v, ledgerkv::v1::KeyValue* kv) {
  kv->set_key(std::string(key));
  kv->set_value(v.value);
  kv->set_create_revision(v.create_revision);
  kv->set_mod_revision(v.mod_revision);
  kv->set_version(v.version);
}

absl::StatusOr<std::optional<StoredValue>> WriteView::Lookup(std::string_view key) {
  if (auto it = changes_.find(key); it != changes_.end()) return it->second;
  if (auto it = pending_.find(key); it != pending_.end()) return it->second.state;
  return store_.Get(key);
}

void WriteView::Set(const std::string& key, std::optional<StoredValue> state,
                    const std::optional<StoredValue>& before) {
  // A key changed twice by one txn: its first state is in changes_.
  auto it = changes_.find(key);
  const std::optional<StoredValue>& old = it != changes_.end() ? it->second : before;
  delta_.key_count += (state.has_value() ? 1 : 0) - (old.has_value() ? 1 : 0);
  delta_.bytes += LiveBytes(key, state) - LiveBytes(key, old);
  if (it != changes_.end()) {
    it->second = std::move(state);
  } else {
    changes_.emplace(key, std::move(state));
    order_.push_back(key);
  }
}

absl::StatusOr<std::vector<std::pair<std::string, StoredValue>>> WriteView::Collect(
    std::string_view start, std::string_view end, int64_t max) {
  // The unapplied layers of [start, end): pending effects, then this
  // request's own changes on top. Both are small (in flight only).
  std::map<std::string, std::optional<StoredValue>, std::less<>> upper;
  auto in_bounds = [&](const std::string& k) { return end.empty() || k < end; };
  for (auto it = pending_.lower_bound(start); it != pending_.end() && in_bounds(it->first); ++it) {
    upper[it->first] = it->second.state;
  }
  for (auto it = changes_.lower_bound(start); it != changes_.end() && in_bounds(it->first); ++it) {
    upper[it->first] = it->second;
  }
  std::vector<std::pair<std::string, StoredValue>> out;
  auto full = [&]() { return static_cast<int64_t>(out.size()) > max; };
  auto emit = [&](std::string_view key, const std::optional<StoredValue>& state) {
    if (state.has_value()) out.emplace_back(std::string(key), *state);
    return !full();
  };
  auto u = upper.begin();
  RETURN_IF_ERROR(store_.Visit(start, end, [&](std::string_view key, StoredValue value) {
    for (; u != upper.end() && u->first < key; ++u) {
      if (!emit(u->first, u->second)) return false;
    }
    if (u != upper.end() && u->first == key) {
      const bool more = emit(u->first, u->second);
      ++u;
      return more;
    }
    return emit(key, value);
  }));
  for (; u != upper.end() && !full(); ++u) emit(u->first, u->second);
  return out;
}

absl::Status WriteView::Put(const ledgerkv::v1::PutRequest& request,
                            ledgerkv::v1::PutResponse* response) {
  ASSIGN_OR_RETURN(std::optional<StoredValue> current, Lookup(request.key()));
  if (request.has_expected_version()) {
    const int64_t actual = current.has_value() ? current->version : 0;
    if (actual != request.expected_version()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "put of ", DisplayKey(request.key()), ": expected version ",
          request.expected_version(), ", actual version ", actual,
          current.has_value() ? "" : " (key does not exist)"));
    }
  }
  if (request.has_expected_mod_revision()) {
    const int64_t actual = current.has_value() ? current->mod_revision : 0;
    if (actual != request.expected_mod_revision()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "put of ", DisplayKey(request.key()), ": expected mod_revision ",
          request.expected_mod_revision(), ", actual mod_revision ", actual,
          current.has_value() ? "" : " (key does not exist)"));
    }
  }
  if (request.prev_kv() && current.has_value()) {
    ToKeyValue(request.key(), *current, response->mutable_prev_kv());
  }
  StoredValue next{.create_revision = current.has_value() ? current->create_revision : revision_,
                   .mod_revision = revision_,
                   .version = current.has_value() ? current->version + 1 : 1,
                   .value = request.value()};
  Set(request.key(), std::move(next), current);
  return absl::OkStatus();
}

absl::Status WriteView::Delete(const ledgerkv::v1::DeleteRequest& request,
                               ledgerkv::v1::DeleteResponse* response) {
  std::vector<std::pair<std::string, StoredValue>> victims;
  if (request.end().empty()) {
    ASSIGN_OR_RETURN(std::optional<StoredValue> current, Lookup(request.key()));
    if (current.has_value()) victims.emplace_back(request.key(), *std::move(current));
  } else {
    ASSIGN_OR_RETURN(victims, Collect(request.key(), request.end(), limits_.max_keys_per_request));
    if (static_cast<int64_t>(victims.size()) > limits_.max_keys_per_request) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "delete of [", DisplayKey(request.key()), ", ", DisplayKey(request.end()),
          ") covers more than ", limits_.max_keys_per_request,
          " keys; limit max_keys_per_request is ", limits_.max_keys_per_request));
    }
  }
  response->set_deleted(static_cast<int64_t>(victims.size()));
  for (auto& [key, value] : victims) {
    if (request.prev_kv()) ToKeyValue(key, value, response->add_prev_kvs());
    Set(key, std::nullopt, std::optional<StoredValue>(std::move(value)));
  }
  return absl::OkStatus();
}

absl::Status WriteView::Increment(const ledgerkv::v1::IncrementRequest& request,
                                  ledgerkv::v1::IncrementResponse* response) {
  ASSIGN_OR_RETURN(std::optional<StoredValue> current, Lookup(request.key()));
  int64_t value = 0;
  if (current.has_value() && !ParseCounter(current->value, &value)) {
    return absl::FailedPreconditionError(
        absl::StrCat("increment of ", DisplayKey(request.key()),
                     ": its value is not a decimal int64 (", current->value.size(), " bytes: ",
                     DisplayKey(current->value), ")"));
  }
  int64_t next = 0;
  if (__builtin_add_overflow(value, request.delta(), &next)) {
    return absl::OutOfRangeError(absl::StrCat("increment of ", DisplayKey(request.key()),
                                              ": ", value, " + ", request.delta(),
                                              " overflows int64"));
  }
  response->set_value(next);
  StoredValue stored{.create_revision = current.has_value() ? current->create_revision : revision_,
                     .mod_revision = revision_,
                     .version = current.has_value() ? current->version + 1 : 1,
                     .value = absl::StrCat(next)};
  Set(request.key(), std::move(stored), current);
  return absl::OkStatus();
}

absl::Status WriteView::Get(const ledgerkv::v1::GetRequest& request,
                            ledgerkv::v1::GetResponse* response) {
  ASSIGN_OR_RETURN(std::optional<StoredValue> current, Lookup(request.key()));
  response->set_found(current.has_value());
  if (current.has_value()) ToKeyValue(request.key(), *current, response->mutable_kv());
  return absl::OkStatus();
}

absl::StatusOr<bool> WriteView::Compare(const ledgerkv::v1::Compare& compare) {
  ASSIGN_OR_RETURN(std::optional<StoredValue> current, Lookup(compare.key()));
  if (compare.target() == ledgerkv::v1::Compare::VALUE) {
    // As etcd: a value compare on a missing key always fails (an empty
    // operand cannot stand for "absent").
    if (!current.has_value()) return false;
    return CompareResult<std::string_view>(compare.result(), current->value, compare.value());
  }
  StoredValue absent;
  const StoredValue& v = current.has_value() ? *current : absent;
  int64_t actual = 0;
  switch (compare.target()) {
    case ledgerkv::v1::Compare::VERSION:
      actual = v.version;
      break;
    case ledgerkv::v1::Compare::CREATE_REVISION:
      actual = v.create_revision;
      break;
    case ledgerkv::v1::Compare::MOD_REVISION:
      actual = v.mod_revision;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("compare of ", DisplayKey(compare.key()), " has an unknown target ",
                       static_cast<int>(compare.target())));
  }
  return CompareResult<int64_t>(compare.result(), actual, compare.number());
}

range::v1::Effect WriteView::BuildEffect() const {
  range::v1::Effect effect;
  effect.set_revision(revision_);
  for (const std::string& key : order_) {
    const std::optional<StoredValue>& state = changes_.at(key);
    range::v1::Mutation* m = effect.add_mutations();
    m->set_key(key);
    if (state.has_value()) {
      m->set_value(state->value);
      m->set_create_revision(state->create_revision);
      m->set_mod_revision(state->mod_revision);
      m->set_version(state->version);
    } else {
      m->set_mod_revision(revision_);
    }
  }
  return effect;
}

}  // namespace ledgerkv::kv
