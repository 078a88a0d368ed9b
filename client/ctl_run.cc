#include "client/ctl_run.h"

#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/ctl_args.h"
#include "client/ctl_output.h"
#include "client/kv_client.h"
#include "client/txn_json.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::client {
namespace {

int ServerError(const absl::Status& s, std::ostream& err) {
  err << "ledgerkvctl: " << absl::StatusCodeToString(s.code()) << ": " << s.message() << "\n";
  return kExitServerError;
}

int UsageError(const absl::Status& s, std::ostream& err) {
  err << "ledgerkvctl: " << s.message() << "\n";
  return kExitUsage;
}

// Prints `r`'s formatted value, or the error.
template <typename T, typename Format>
int Print(const absl::StatusOr<T>& r, Format format, std::ostream& out, std::ostream& err) {
  if (!r.ok()) return ServerError(r.status(), err);
  out << format(*r);
  return kExitOk;
}

// Print for a write: an error whose outcome is unknown says so, and exits
// kExitWriteOutcomeUnknown.
template <typename T, typename Format>
int PrintWrite(const absl::StatusOr<T>& r, Format format, std::ostream& out, std::ostream& err) {
  if (!r.ok() && WriteOutcomeUnknown(r.status())) {
    ServerError(r.status(), err);
    err << "ledgerkvctl: the write may or may not have been applied; read before retrying it\n";
    return kExitWriteOutcomeUnknown;
  }
  return Print(r, format, out, err);
}

// `bookie info`: GetInfo from one bookie (not through a KV server).
int BookieInfo(const CtlCommand& cmd, std::ostream& out, std::ostream& err) {
  auto stub = bookie::v1::Bookie::NewStub(
      grpc::CreateChannel(cmd.bookie_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + cmd.timeout));
  bookie::v1::GetInfoResponse info;
  const grpc::Status st = stub->GetInfo(&ctx, bookie::v1::GetInfoRequest(), &info);
  if (!st.ok()) {
    return ServerError(absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                                    absl::StrCat("bookie ", cmd.bookie_address, ": ",
                                                 st.error_message())),
                       err);
  }
  out << FormatBookieInfo(info, cmd.output);
  return kExitOk;
}

// `scan`: pages are printed as they arrive (memory for one page, whatever
// the scan's size), and --timeout bounds the whole command, not each page.
// An error part-way is reported after the pages already printed (exit 1;
// with -o json the document is then left unterminated).
int Scan(KvClient& client, v1::RangeRequest req, const CtlCommand& cmd, std::ostream& out,
         std::ostream& err) {
  const absl::Time deadline = absl::Now() + cmd.timeout;
  const int64_t limit = cmd.limit;
  int64_t printed = 0;
  out << FormatScanBegin(cmd.output);
  while (true) {
    if (limit > 0) req.set_limit(limit - printed);
    CallOptions opts;
    opts.deadline = deadline - absl::Now();
    if (opts.deadline <= absl::ZeroDuration()) {
      out.flush();
      return ServerError(absl::DeadlineExceededError(absl::StrCat(
                             "scan did not finish within --timeout ",
                             absl::FormatDuration(cmd.timeout), " (", printed, " keys printed)")),
                         err);
    }
    auto page = client.Range(req, opts);
    if (!page.ok()) {
      out.flush();
      return ServerError(page.status(), err);
    }
    std::vector<v1::KeyValue> kvs(page->kvs().begin(), page->kvs().end());
    if (limit > 0 && printed + static_cast<int64_t>(kvs.size()) > limit) {
      kvs.resize(static_cast<size_t>(limit - printed));
    }
    out << FormatScanPage(kvs, cmd.keys_only, cmd.output, /*first_page=*/printed == 0);
    out.flush();
    printed += static_cast<int64_t>(kvs.size());
    if (page->continuation().empty() || (limit > 0 && printed >= limit)) break;
    if (page->kvs_size() == 0 && page->continuation() == req.continuation()) {
      return ServerError(absl::InternalError("Range returned the same continuation without progress"),
                         err);
    }
    req.set_continuation(page->continuation());
  }
  out << FormatScanEnd(printed, cmd.output);
  return kExitOk;
}

}  // namespace

bool WriteOutcomeUnknown(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kResourceExhausted:
      return false;
    default:
      return !IsRetrySafe(status);
  }
}

int RunCtl(const std::vector<std::string>& args, std::istream& in, std::ostream& out,
           std::ostream& err) {
  auto parsed = ParseCtlArgs(args);
  if (!parsed.ok()) return UsageError(parsed.status(), err);
  const CtlCommand& cmd = *parsed;
  if (cmd.kind == CtlCommand::Kind::kHelp) {
    out << CtlUsage();
    return kExitOk;
  }
  if (cmd.kind == CtlCommand::Kind::kBookieInfo) return BookieInfo(cmd, out, err);

  // Input is read and checked before connecting: a malformed transaction
  // sends nothing.
  v1::TxnRequest txn;
  if (cmd.kind == CtlCommand::Kind::kTxn) {
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto t = ParseTxnJson(text, cmd.table);
    if (!t.ok()) return UsageError(t.status(), err);
    txn = std::move(*t);
  }

  ClientOptions options;
  options.endpoint = cmd.endpoint;
  options.default_deadline = cmd.timeout;
  auto client_or = KvClient::Create(options);
  if (!client_or.ok()) return UsageError(client_or.status(), err);
  KvClient& client = **client_or;
  const OutputFormat f = cmd.output;

  switch (cmd.kind) {
    case CtlCommand::Kind::kHelp:
    case CtlCommand::Kind::kBookieInfo:
      return kExitOk;
    case CtlCommand::Kind::kPut: {
      v1::PutRequest req;
      req.set_table(cmd.table);
      req.set_key(cmd.key);
      req.set_value(cmd.value);
      return PrintWrite(client.Put(req), [&](const auto& r) { return FormatPut(r, f); }, out, err);
    }
    case CtlCommand::Kind::kGet: {
      v1::GetRequest req;
      req.set_table(cmd.table);
      req.set_key(cmd.key);
      auto r = client.Get(req);
      if (!r.ok()) return ServerError(r.status(), err);
      out << FormatGet(*r, f);
      if (!r->found()) {
        err << "ledgerkvctl: key \"" << absl::CHexEscape(cmd.key) << "\" not found in table \""
            << cmd.table << "\"\n";
        return kExitKeyNotFound;
      }
      return kExitOk;
    }
    case CtlCommand::Kind::kDelete: {
      v1::DeleteRequest req;
      req.set_table(cmd.table);
      req.set_key(cmd.key);
      req.set_end(cmd.end);
      return PrintWrite(client.Delete(req), [&](const auto& r) { return FormatDelete(r, f); }, out,
                   err);
    }
    case CtlCommand::Kind::kScan: {
      v1::RangeRequest req;
      req.set_table(cmd.table);
      req.set_start(cmd.key);
      req.set_end(cmd.end);
      req.set_limit(cmd.limit);
      req.set_keys_only(cmd.keys_only);
      return Scan(client, req, cmd, out, err);
    }
    case CtlCommand::Kind::kIncr: {
      v1::IncrementRequest req;
      req.set_table(cmd.table);
      req.set_key(cmd.key);
      req.set_delta(cmd.delta);
      return PrintWrite(client.Increment(req), [&](const auto& r) { return FormatIncrement(r, f); },
                   out, err);
    }
    case CtlCommand::Kind::kTxn:
      return PrintWrite(client.Txn(txn), [&](const auto& r) { return FormatTxn(r, f); }, out, err);
    case CtlCommand::Kind::kTableCreate: {
      v1::CreateTableRequest req;
      req.set_name(cmd.name);
      for (const auto& k : cmd.split_keys) req.add_split_keys(k);
      return PrintWrite(client.CreateTable(req),
                   [&](const auto& r) { return FormatRanges(cmd.name, r.ranges(), f); }, out, err);
    }
    case CtlCommand::Kind::kTableDrop: {
      v1::DropTableRequest req;
      req.set_name(cmd.name);
      return PrintWrite(client.DropTable(req),
                   [&](const auto&) -> std::string {
                     return f == OutputFormat::kText ? "OK\n" : "{}\n";
                   },
                   out, err);
    }
    case CtlCommand::Kind::kTableList:
      return Print(client.ListTables(), [&](const auto& r) { return FormatTableList(r, f); }, out,
                   err);
    case CtlCommand::Kind::kTableDescribe: {
      v1::DescribeTableRequest req;
      req.set_name(cmd.name);
      return Print(client.DescribeTable(req),
                   [&](const auto& r) { return FormatRanges(r.name(), r.ranges(), f); }, out, err);
    }
  }
  return kExitUsage;
}

}  // namespace ledgerkv::client
