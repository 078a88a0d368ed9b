#include "kv_server/table_scan.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kv_server/retry.h"

namespace ledgerkv::kv {
namespace {

namespace meta = ::ledgerkv::meta::v1;
namespace v1 = ::ledgerkv::v1;

constexpr char kTokenVersion = 1;
constexpr char kForward = 'F';
constexpr char kReverse = 'R';

// Exclusive upper bounds where "" is the end of the key space.
bool EndBefore(std::string_view a, std::string_view b) {
  if (a.empty()) return false;
  if (b.empty()) return true;
  return a < b;
}
std::string_view MinEnd(std::string_view a, std::string_view b) { return EndBefore(a, b) ? a : b; }

bool Overlaps(const meta::RangeSpec& spec, std::string_view start, std::string_view end) {
  return (spec.end().empty() || start < std::string_view(spec.end())) &&
         (end.empty() || std::string_view(spec.start()) < end);
}

// Reads never reach a log: an UNAVAILABLE read can always be retried.
absl::Status ReadError(absl::Status s) {
  if (absl::IsUnavailable(s) && !IsRetrySafe(s)) return RetrySafe(std::move(s));
  return s;
}

}  // namespace

std::string EncodeContinuation(const Continuation& c) {
  std::string out;
  out.reserve(2 + c.key.size());
  out.push_back(kTokenVersion);
  out.push_back(c.reverse ? kReverse : kForward);
  out.append(c.key);
  return out;
}

absl::StatusOr<Continuation> DecodeContinuation(const std::string& token) {
  if (token.size() < 3) {
    return absl::InvalidArgumentError("bad continuation token: too short");
  }
  if (token[0] != kTokenVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad continuation token: unknown version ", static_cast<int>(token[0])));
  }
  if (token[1] != kForward && token[1] != kReverse) {
    return absl::InvalidArgumentError("bad continuation token: unknown direction");
  }
  return Continuation{token[1] == kReverse, token.substr(2)};
}

absl::StatusOr<v1::RangeResponse> ScanTable(RangeLocator& locator, const v1::RangeRequest& request,
                                            const Limits& limits, int64_t max_response_bytes) {
  ASSIGN_OR_RETURN(std::shared_ptr<const meta::TableMetadata> table,
                   locator.Table(request.table()));
  if (request.limit() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("limit ", request.limit(), " is negative"));
  }
  std::string start = request.start();
  std::string end = request.end();
  if (!end.empty() && end < start) {
    return absl::InvalidArgumentError("range start is after its end");
  }
  if (!request.continuation().empty()) {
    ASSIGN_OR_RETURN(Continuation c, DecodeContinuation(request.continuation()));
    if (c.reverse != request.reverse()) {
      return absl::InvalidArgumentError(
          absl::StrCat("continuation token is for a ", c.reverse ? "reverse" : "forward",
                       " scan but the request is ", request.reverse() ? "reverse" : "forward"));
    }
    if (c.reverse) {
      end = std::string(MinEnd(end, c.key));
    } else {
      start = std::max(start, c.key);
    }
  }

  std::vector<const meta::RangeSpec*> order;
  for (const meta::RangeSpec& spec : table->ranges()) {
    if (Overlaps(spec, start, end) && (end.empty() || start < end)) order.push_back(&spec);
  }
  if (request.reverse()) std::reverse(order.begin(), order.end());

  v1::RangeResponse response;
  if (order.empty()) {
    response.mutable_header()->set_range_id(RangeForKey(*table, start).range_id());
    return response;
  }
  const bool count_only = request.count_only();
  const int64_t cap = request.limit() == 0
                          ? limits.max_keys_per_request
                          : std::min<int64_t>(request.limit(), limits.max_keys_per_request);
  int64_t bytes = 0;
  bool full = false;  // no more keys go into this response
  bool more = false;  // keys may remain after the last one returned
  std::string last_key;
  bool boundary = false;  // last_key is a range boundary, not a returned key
  for (size_t i = 0; i < order.size(); ++i) {
    const meta::RangeSpec& spec = *order[i];
    absl::StatusOr<std::shared_ptr<Range>> serving = locator.Serving(*table, spec);
    if (i > 0 && absl::IsUnavailable(serving.status()) && !OwnerOf(serving.status()).empty() &&
        OwnerOf(serving.status()) != locator.owner()) {
      // Served by another server (cluster mode): the page ends before this
      // range, and the caller reads the rest (and counts it) at its owner
      // with the continuation. Any other refusal (recovering here, no owner
      // yet) fails the request as before, so a count is never silently
      // short; so does a refusal of the first range, naming its owner.
      if (count_only || !full) {
        last_key = request.reverse() ? spec.end() : spec.start();
        boundary = true;
      }
      more = true;
      break;
    }
    if (!serving.ok()) return serving.status();
    const std::shared_ptr<Range>& range = *serving;
    ScanSpec scan;
    scan.start = std::max(start, spec.start());
    scan.end = std::string(MinEnd(end, spec.end()));
    scan.keys_only = request.keys_only();
    scan.reverse = request.reverse();
    scan.consistency = request.consistency();
    // Past the limit only the count is wanted (it is exact over the whole
    // interval, and a non-zero one means the caller must continue).
    scan.count_only = count_only || full;
    scan.limit = scan.count_only ? 0 : cap - response.kvs_size();
    // What is left of the byte budget (at least one key is copied anyway):
    // a range of large values is not copied whole to send 4 MiB of it.
    scan.max_bytes = std::max<int64_t>(max_response_bytes - bytes, 1);
    absl::StatusOr<ScanResult> result = range->Scan(scan);
    if (!result.ok()) return ReadError(result.status());
    if (i == 0) {
      response.mutable_header()->set_range_id(spec.range_id());
      response.mutable_header()->set_revision(result->revision);
    }
    response.set_count(response.count() + result->count);
    if (count_only) continue;
    if (full) {
      if (result->count > 0) more = true;
      continue;
    }
    for (v1::KeyValue& kv : result->kvs) {
      // What it adds to the response as sent: its encoding, and the
      // field's tag and length.
      const int64_t size = static_cast<int64_t>(kv.ByteSizeLong()) + 6;
      if (response.kvs_size() > 0 && bytes + size > max_response_bytes) {
        full = more = true;
        break;
      }
      bytes += size;
      last_key = kv.key();
      *response.add_kvs() = std::move(kv);
    }
    if (result->more) full = more = true;
    if (response.kvs_size() >= cap) full = true;
  }
  if (more) {
    Continuation c{request.reverse(), last_key};
    if (!c.reverse && !boundary) c.key.push_back('\0');
    response.set_continuation(EncodeContinuation(c));
  }
  return response;
}

}  // namespace ledgerkv::kv
