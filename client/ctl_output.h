// ledgerkvctl output: text (simple, one item per line, greppable) or JSON
// (one document per command, full KeyValues with revisions). Formats are
// listed in client/README.md. Keys and values are printed raw in text; in
// JSON they are strings when valid UTF-8, else "<field>_base64" members.
#pragma once

#include <string>
#include <vector>

#include "client/ctl_args.h"
#include "proto/bookie.pb.h"
#include "proto/kv.pb.h"

namespace ledgerkv::client {

std::string KeyValueJson(const v1::KeyValue& kv);

std::string FormatPut(const v1::PutResponse& r, OutputFormat f);
// Only for found keys in text mode (a missing key prints nothing).
std::string FormatGet(const v1::GetResponse& r, OutputFormat f);
std::string FormatDelete(const v1::DeleteResponse& r, OutputFormat f);
std::string FormatScan(const std::vector<v1::KeyValue>& kvs, bool keys_only, OutputFormat f);

// The same output as FormatScan, written page by page as a scan goes, so
// that a scan of any size needs memory for one page only: Begin, then Page
// for each page's keys, then End with the total count.
std::string FormatScanBegin(OutputFormat f);
std::string FormatScanPage(const std::vector<v1::KeyValue>& kvs, bool keys_only, OutputFormat f,
                           bool first_page);
std::string FormatScanEnd(int64_t count, OutputFormat f);
std::string FormatIncrement(const v1::IncrementResponse& r, OutputFormat f);
std::string FormatTxn(const v1::TxnResponse& r, OutputFormat f);
std::string FormatRanges(const std::string& table,
                         const google::protobuf::RepeatedPtrField<v1::RangeInfo>& ranges,
                         OutputFormat f);
std::string FormatTableList(const v1::ListTablesResponse& r, OutputFormat f);
// `ledgerkvctl bookie info`: one "name: value" line per field, or one object.
std::string FormatBookieInfo(const bookie::v1::GetInfoResponse& r, OutputFormat f);

}  // namespace ledgerkv::client
