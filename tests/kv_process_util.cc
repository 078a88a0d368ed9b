#include "tests/kv_process_util.h"

#include <iostream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv::testing {

namespace v1 = ::ledgerkv::v1;

StandaloneServer::StandaloneServer(std::string data_dir)
    : data_dir_(std::move(data_dir)), address_(absl::StrCat("127.0.0.1:", FreePort())) {}

absl::Status StandaloneServer::Start(const StandaloneFlags& flags) {
  if (process_ != nullptr) {
    previous_log_ = process_->LogTail(6000);
    process_.reset();  // kill -9 if still running
  }
  std::vector<std::string> argv = {BinaryPath("kv_server/ledgerkv"),
                                   "standalone",
                                   "--data-dir",
                                   data_dir_,
                                   "--listen",
                                   address_};
  if (flags.bookies > 0) {
    argv.insert(argv.end(), {"--bookies", absl::StrCat(flags.bookies)});
  }
  if (flags.snapshot_log_mb > 0) {
    argv.insert(argv.end(), {"--snapshot-log-mb", absl::StrCat(flags.snapshot_log_mb)});
  }
  if (flags.snapshot_interval_s > 0) {
    argv.insert(argv.end(), {"--snapshot-interval-s", absl::StrCat(flags.snapshot_interval_s)});
  }
  auto p = Process::Start(argv, "ledgerkv standalone serving on", absl::Seconds(60));
  if (!p.ok()) return p.status();
  process_ = std::move(*p);
  channel_ = KvChannel(address_);
  if (!channel_->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address_));
  }
  kv_ = v1::KV::NewStub(channel_);
  admin_ = v1::Admin::NewStub(channel_);
  return absl::OkStatus();
}

int StandaloneServer::Terminate(absl::Duration timeout) {
  if (process_ == nullptr) return -1;
  absl::Time start = absl::Now();
  int status = process_->Terminate(timeout);
  absl::Duration took = absl::Now() - start;
  if (took > absl::Seconds(2)) {
    std::cerr << "ledgerkv standalone took " << absl::FormatDuration(took)
              << " to stop after SIGTERM\n";
  }
  return status;
}

void StandaloneServer::Kill() {
  if (process_ != nullptr) process_->Kill();
}

std::string StandaloneServer::LogTail(size_t bytes) const {
  std::string out;
  if (process_ != nullptr)
    out = absl::StrCat("--- stderr of the last ledgerkv standalone:\n", process_->LogTail(bytes));
  if (!previous_log_.empty()) {
    absl::StrAppend(&out, "\n--- stderr of the one before:\n",
                    previous_log_.size() > bytes
                        ? previous_log_.substr(previous_log_.size() - bytes)
                        : previous_log_);
  }
  return out;
}

std::shared_ptr<grpc::Channel> KvChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // A restarted server on the same port must be reached at once, not after
  // the default reconnect backoff.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // A new channel after a restart must not reuse a connection to the
  // process that died (the global subchannel pool would hand it out).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

absl::Status ToAbsl(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

absl::Status CreateTable(v1::Admin::Stub& admin, const std::string& name,
                         const std::vector<std::string>& split_keys) {
  v1::CreateTableRequest req;
  req.set_name(name);
  for (const auto& k : split_keys) req.add_split_keys(k);
  v1::CreateTableResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, absl::Seconds(30));
  return ToAbsl(admin.CreateTable(&ctx, req, &resp));
}

absl::StatusOr<v1::DescribeTableResponse> DescribeTable(v1::Admin::Stub& admin,
                                                        const std::string& name) {
  v1::DescribeTableRequest req;
  req.set_name(name);
  v1::DescribeTableResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::Status s = admin.DescribeTable(&ctx, req, &resp);
  if (!s.ok()) return ToAbsl(s);
  return resp;
}

absl::StatusOr<ScanAllResult> ScanAll(v1::KV::Stub& kv, const std::string& table,
                                      const std::string& start, const std::string& end,
                                      int64_t page_limit) {
  ScanAllResult out;
  std::string continuation;
  for (int page = 0; page < 100000; ++page) {
    v1::RangeRequest req;
    req.set_table(table);
    req.set_start(start);
    req.set_end(end);
    req.set_limit(page_limit);
    req.set_continuation(continuation);
    v1::RangeResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(30));
    grpc::Status s = kv.Range(&ctx, req, &resp);
    if (!s.ok()) return ToAbsl(s);
    if (page_limit > 0 && resp.kvs_size() > page_limit) {
      return absl::InternalError(
          absl::StrCat("page of ", resp.kvs_size(), " keys over limit ", page_limit));
    }
    for (auto& kv : *resp.mutable_kvs()) {
      if (!out.kvs.empty() && kv.key() <= out.kvs.back().key()) {
        return absl::InternalError(absl::StrCat("scan out of order: '", absl::CEscape(kv.key()),
                                                "' after '", absl::CEscape(out.kvs.back().key()),
                                                "'"));
      }
      out.kvs.push_back(std::move(kv));
    }
    out.revision = resp.header().revision();
    if (resp.continuation().empty()) return out;
    continuation = resp.continuation();
  }
  return absl::InternalError("scan did not end");
}

std::map<std::string, v1::KeyValue> ToMap(const std::vector<v1::KeyValue>& kvs) {
  std::map<std::string, v1::KeyValue> m;
  for (const auto& kv : kvs) m[kv.key()] = kv;
  return m;
}

std::string KvString(const v1::KeyValue& kv) {
  std::string value = kv.value().size() > 40 ? absl::StrCat(kv.value().substr(0, 40), "...(",
                                                            kv.value().size(), " bytes)")
                                             : kv.value();
  return absl::StrCat(absl::CEscape(kv.key()), "=", absl::CEscape(value),
                      " c=", kv.create_revision(), " m=", kv.mod_revision(), " v=", kv.version());
}

}  // namespace ledgerkv::testing
