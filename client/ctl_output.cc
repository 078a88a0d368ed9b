#include "client/ctl_output.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/json.h"

namespace ledgerkv::client {
namespace {

// `"name":"text"`, or `"name_base64":"..."` for bytes that are not UTF-8.
std::string BytesMember(absl::string_view name, const std::string& bytes) {
  if (IsValidUtf8(bytes)) return absl::StrCat("\"", name, "\":", JsonQuote(bytes));
  return absl::StrCat("\"", name, "_base64\":", JsonQuote(absl::Base64Escape(bytes)));
}

std::string HeaderMembers(const v1::ResponseHeader& h) {
  return absl::StrCat("\"revision\":", h.revision(), ",\"range_id\":", h.range_id());
}

std::string GetJson(const v1::GetResponse& r) {
  std::string out = absl::StrCat("{\"found\":", r.found() ? "true" : "false");
  if (r.found()) absl::StrAppend(&out, ",\"kv\":", KeyValueJson(r.kv()));
  absl::StrAppend(&out, ",", HeaderMembers(r.header()), "}");
  return out;
}

std::string RangeJson(const v1::RangeInfo& ri) {
  return absl::StrCat("{\"range_id\":", ri.range_id(), ",", BytesMember("start", ri.start()), ",",
                      BytesMember("end", ri.end()), ",\"owner\":", JsonQuote(ri.owner()),
                      ",\"revision\":", ri.revision(), ",\"key_count\":", ri.key_count(),
                      ",\"bytes\":", ri.bytes(), ",\"log_first_seqno\":", ri.log_first_seqno(),
                      ",\"log_last_seqno\":", ri.log_last_seqno(),
                      ",\"snapshot_seqno\":", ri.snapshot_seqno(), ",\"epoch\":", ri.epoch(),
                      ri.writes_refused().empty()
                          ? std::string()
                          : absl::StrCat(",\"writes_refused\":", JsonQuote(ri.writes_refused())),
                      "}");
}

}  // namespace

std::string KeyValueJson(const v1::KeyValue& kv) {
  return absl::StrCat("{", BytesMember("key", kv.key()), ",", BytesMember("value", kv.value()),
                      ",\"create_revision\":", kv.create_revision(),
                      ",\"mod_revision\":", kv.mod_revision(), ",\"version\":", kv.version(), "}");
}

std::string FormatPut(const v1::PutResponse& r, OutputFormat f) {
  if (f == OutputFormat::kText) return "OK\n";
  std::string out = absl::StrCat("{", HeaderMembers(r.header()));
  if (r.has_prev_kv()) absl::StrAppend(&out, ",\"prev_kv\":", KeyValueJson(r.prev_kv()));
  return absl::StrCat(out, "}\n");
}

std::string FormatGet(const v1::GetResponse& r, OutputFormat f) {
  if (f == OutputFormat::kText) return r.found() ? absl::StrCat(r.kv().value(), "\n") : "";
  return absl::StrCat(GetJson(r), "\n");
}

std::string FormatDelete(const v1::DeleteResponse& r, OutputFormat f) {
  if (f == OutputFormat::kText) return absl::StrCat("deleted: ", r.deleted(), "\n");
  return absl::StrCat("{\"deleted\":", r.deleted(), ",", HeaderMembers(r.header()), "}\n");
}

std::string FormatScan(const std::vector<v1::KeyValue>& kvs, bool keys_only, OutputFormat f) {
  return absl::StrCat(FormatScanBegin(f), FormatScanPage(kvs, keys_only, f, /*first_page=*/true),
                      FormatScanEnd(static_cast<int64_t>(kvs.size()), f));
}

std::string FormatScanBegin(OutputFormat f) {
  return f == OutputFormat::kText ? "" : "{\"kvs\":[";
}

std::string FormatScanPage(const std::vector<v1::KeyValue>& kvs, bool keys_only, OutputFormat f,
                           bool first_page) {
  std::string out;
  if (f == OutputFormat::kText) {
    for (const auto& kv : kvs) {
      if (keys_only) {
        absl::StrAppend(&out, kv.key(), "\n");
      } else {
        absl::StrAppend(&out, kv.key(), "\t", kv.value(), "\n");
      }
    }
    return out;
  }
  bool first = first_page;
  for (const auto& kv : kvs) {
    absl::StrAppend(&out, first ? "" : ",", KeyValueJson(kv));
    first = false;
  }
  return out;
}

std::string FormatScanEnd(int64_t count, OutputFormat f) {
  return f == OutputFormat::kText ? "" : absl::StrCat("],\"count\":", count, "}\n");
}

std::string FormatIncrement(const v1::IncrementResponse& r, OutputFormat f) {
  if (f == OutputFormat::kText) return absl::StrCat(r.value(), "\n");
  return absl::StrCat("{\"value\":", r.value(), ",", HeaderMembers(r.header()), "}\n");
}

std::string FormatTxn(const v1::TxnResponse& r, OutputFormat f) {
  if (f == OutputFormat::kText) {
    std::string out = absl::StrCat("succeeded: ", r.succeeded() ? "true" : "false", "\n");
    for (const auto& res : r.results()) {
      switch (res.result_case()) {
        case v1::TxnOpResult::kPut:
          absl::StrAppend(&out, "put: OK\n");
          break;
        case v1::TxnOpResult::kGet:
          if (res.get().found()) {
            absl::StrAppend(&out, "get: ", res.get().kv().value(), "\n");
          } else {
            absl::StrAppend(&out, "get (not found)\n");
          }
          break;
        case v1::TxnOpResult::kDelete:
          absl::StrAppend(&out, "delete: ", res.delete_().deleted(), "\n");
          break;
        case v1::TxnOpResult::kIncrement:
          absl::StrAppend(&out, "incr: ", res.increment().value(), "\n");
          break;
        case v1::TxnOpResult::RESULT_NOT_SET:
          absl::StrAppend(&out, "(empty result)\n");
          break;
      }
    }
    return out;
  }
  std::vector<std::string> items;
  for (const auto& res : r.results()) {
    switch (res.result_case()) {
      case v1::TxnOpResult::kPut:
        items.push_back("{\"put\":{}}");
        break;
      case v1::TxnOpResult::kGet:
        items.push_back(absl::StrCat("{\"get\":", GetJson(res.get()), "}"));
        break;
      case v1::TxnOpResult::kDelete:
        items.push_back(absl::StrCat("{\"delete\":{\"deleted\":", res.delete_().deleted(), "}}"));
        break;
      case v1::TxnOpResult::kIncrement:
        items.push_back(absl::StrCat("{\"incr\":{\"value\":", res.increment().value(), "}}"));
        break;
      case v1::TxnOpResult::RESULT_NOT_SET:
        items.push_back("{}");
        break;
    }
  }
  return absl::StrCat("{\"succeeded\":", r.succeeded() ? "true" : "false", ",",
                      HeaderMembers(r.header()), ",\"results\":[", absl::StrJoin(items, ","),
                      "]}\n");
}

std::string FormatRanges(const std::string& table,
                         const google::protobuf::RepeatedPtrField<v1::RangeInfo>& ranges,
                         OutputFormat f) {
  if (f == OutputFormat::kText) {
    std::string out = absl::StrCat("table ", table, "\n");
    for (const auto& ri : ranges) {
      absl::StrAppend(&out, "range ", ri.range_id(), " [\"", absl::CHexEscape(ri.start()),
                      "\", \"", absl::CHexEscape(ri.end()), "\") owner=", ri.owner(),
                      " revision=", ri.revision(), " keys=", ri.key_count(),
                      " bytes=", ri.bytes(), " epoch=", ri.epoch(),
                      ri.writes_refused().empty()
                          ? std::string()
                          : absl::StrCat(" writes_refused=\"", absl::CHexEscape(ri.writes_refused()),
                                         "\""),
                      "\n");
    }
    return out;
  }
  std::vector<std::string> items;
  for (const auto& ri : ranges) items.push_back(RangeJson(ri));
  return absl::StrCat("{\"name\":", JsonQuote(table), ",\"ranges\":[", absl::StrJoin(items, ","),
                      "]}\n");
}

std::string FormatTableList(const v1::ListTablesResponse& r, OutputFormat f) {
  if (f == OutputFormat::kText) {
    std::string out;
    for (const auto& n : r.names()) absl::StrAppend(&out, n, "\n");
    return out;
  }
  std::vector<std::string> names;
  for (const auto& n : r.names()) names.push_back(JsonQuote(n));
  return absl::StrCat("{\"names\":[", absl::StrJoin(names, ","), "]}\n");
}

std::string FormatBookieInfo(const bookie::v1::GetInfoResponse& r, OutputFormat f) {
  const char* state = r.state() == bookie::v1::WRITABLE          ? "WRITABLE"
                      : r.state() == bookie::v1::READ_ONLY_STATE ? "READ_ONLY"
                                                                 : "UNKNOWN";
  if (f == OutputFormat::kText) {
    std::string out = absl::StrCat("bookie_id: ", r.bookie_id(), "\ninstance_id: ",
                                   r.instance_id(), "\nstate: ", state, "\n");
    absl::StrAppend(&out, "fsync: ",
                    !r.has_no_sync() ? "unknown (the bookie is too old to say)"
                    : r.no_sync()    ? "OFF (--no-sync: acknowledged entries can be lost on "
                                       "power failure)"
                                     : "on",
                    "\n");
    if (!r.read_only_reason().empty()) {
      absl::StrAppend(&out, "read_only_reason: ", r.read_only_reason(), "\n");
    }
    absl::StrAppend(&out, "ledgers: ", r.ledger_count(), "\njournal_bytes: ", r.journal_bytes(),
                    "\nentries_added: ", r.entries_added(), "\nsyncs: ", r.syncs(),
                    "\ngroup_commit_waits: ", r.group_commit_waits(),
                    "\nread_requests: ", r.read_requests(), "\nadd_port: ", r.add_port(),
                    "\nadd_port_requests: ", r.add_port_requests(),
                    "\ndisk_usage_percent: ", absl::StrFormat("%.1f", r.disk_usage_percent()),
                    "\n");
    return out;
  }
  return absl::StrCat("{\"bookie_id\":", JsonQuote(r.bookie_id()),
                      ",\"instance_id\":", JsonQuote(r.instance_id()), ",\"state\":\"", state,
                      "\",\"no_sync\":",
                      !r.has_no_sync() ? "null" : r.no_sync() ? "true" : "false",
                      ",\"read_only_reason\":", JsonQuote(r.read_only_reason()),
                      ",\"ledgers\":", r.ledger_count(), ",\"journal_bytes\":", r.journal_bytes(),
                      ",\"entries_added\":", r.entries_added(), ",\"syncs\":", r.syncs(),
                      ",\"group_commit_waits\":", r.group_commit_waits(),
                      ",\"read_requests\":", r.read_requests(), ",\"add_port\":", r.add_port(),
                      ",\"add_port_requests\":", r.add_port_requests(),
                      ",\"disk_usage_percent\":", absl::StrFormat("%.1f", r.disk_usage_percent()),
                      "}\n");
}

}  // namespace ledgerkv::client
