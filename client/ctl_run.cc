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
      return Print(client.ScanAll(req),
                   [&](const auto& kvs) { return FormatScan(kvs, cmd.keys_only, f); }, out, err);
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
