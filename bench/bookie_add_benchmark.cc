// Google Benchmark of the bookie add path: real BookieServer on loopback
// with real fdatasync, driven through the Bookie gRPC service.
//
// BM_BookieAdd/<entries per RPC>/<payload bytes>/<RPCs in flight>: every
// iteration sends one batched Add RPC and waits for it; several client
// threads keep RPCs in flight so that group commit can share syncs.
// BM_BookieAddLocal: the same through BookieServer::LocalAdd (no gRPC), the
// path of standalone's in-process bookies.
//
// BM_AddPortCodec/<way>/entries:N/bytes:B (no bookie, no disk): the CPU an
// add port request costs to parse and its reply to build, the bookie's
// share and the writer's, with the generated messages (way 0) and with
// proto/add_wire.h (way 1), which the add port uses; docs/performance.md.
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/entry_checksum.h"
#include "base/process_tuning.h"
#include "benchmark/benchmark.h"
#include "bench/gbench_util.h"
#include "grpcpp/grpcpp.h"
#include "ledger/bookie/bookie_server.h"
#include "proto/add_wire.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::bench {
namespace {

namespace pb = ::ledgerkv::bookie::v1;

struct Shared {
  std::string dir;
  std::unique_ptr<bookie::BookieServer> server;
  std::shared_ptr<grpc::Channel> channel;
};

Shared* g_shared = nullptr;
std::atomic<uint64_t> g_next_ledger{1};

void StartBookie() {
  g_shared = new Shared();
  g_shared->dir = absl::StrCat(std::filesystem::temp_directory_path().string(),
                               "/ledgerkv-bookie-bench-", getpid());
  std::filesystem::remove_all(g_shared->dir);
  bookie::BookieOptions o;
  o.data_dir = g_shared->dir;
  auto s = bookie::BookieServer::Start(o);
  if (!s.ok()) {
    fprintf(stderr, "bookie: %s\n", s.status().ToString().c_str());
    std::abort();
  }
  g_shared->server = std::move(*s);
  g_shared->channel =
      grpc::CreateChannel(g_shared->server->address(), grpc::InsecureChannelCredentials());
}

void StopBookie() {
  if (g_shared == nullptr) return;
  g_shared->server.reset();
  std::filesystem::remove_all(g_shared->dir);
  delete g_shared;
  g_shared = nullptr;
}

pb::AddRequest MakeRequest(uint64_t ledger, int entries, const std::string& payload,
                           int64_t* next_entry) {
  pb::AddRequest req;
  for (int i = 0; i < entries; ++i) {
    pb::Entry* e = req.add_entries();
    e->set_ledger_id(ledger);
    e->set_entry_id(*next_entry);
    e->set_lac(*next_entry - 1);
    e->set_payload(payload);
    e->set_checksum(EntryChecksum(ledger, *next_entry, *next_entry - 1, payload));
    ++*next_entry;
  }
  return req;
}

bool AllAcknowledged(const pb::AddResponse& resp, int entries) {
  if (resp.results_size() != entries) return false;
  for (const auto& r : resp.results()) {
    if (r.code() != pb::OK) return false;
  }
  return true;
}

// Through the gRPC service over loopback TCP.
void BM_BookieAdd(benchmark::State& state) {
  const int entries_per_rpc = static_cast<int>(state.range(0));
  const std::string payload(static_cast<size_t>(state.range(1)), 'b');
  auto stub = pb::Bookie::NewStub(g_shared->channel);
  const uint64_t ledger = g_next_ledger.fetch_add(1);
  int64_t next_entry = 0;
  int64_t entries = 0;
  for (auto _ : state) {
    pb::AddRequest req = MakeRequest(ledger, entries_per_rpc, payload, &next_entry);
    pb::AddResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::Status s = stub->Add(&ctx, req, &resp);
    if (!s.ok() || !AllAcknowledged(resp, entries_per_rpc)) {
      FailBenchmark(state, "add failed or not acknowledged");
      break;
    }
    entries += entries_per_rpc;
  }
  state.SetItemsProcessed(entries);
  state.SetBytesProcessed(entries * static_cast<int64_t>(payload.size()));
}

// The same adds through BookieServer::LocalAdd, the direct path `ledgerkv
// standalone` uses for its in-process bookies: the difference to
// BM_BookieAdd is the cost of the gRPC hop.
void BM_BookieAddLocal(benchmark::State& state) {
  const int entries_per_rpc = static_cast<int>(state.range(0));
  const std::string payload(static_cast<size_t>(state.range(1)), 'b');
  const bookie::LocalAddFunction add = g_shared->server->LocalAdd();
  const uint64_t ledger = g_next_ledger.fetch_add(1);
  int64_t next_entry = 0;
  int64_t entries = 0;
  for (auto _ : state) {
    pb::AddRequest req = MakeRequest(ledger, entries_per_rpc, payload, &next_entry);
    pb::AddResponse resp;
    absl::Notification done;
    grpc::Status status;
    add(req, &resp, [&](const grpc::Status& s) {
      status = s;
      done.Notify();
    });
    done.WaitForNotification();
    if (!status.ok() || !AllAcknowledged(resp, entries_per_rpc)) {
      FailBenchmark(state, "add failed or not acknowledged");
      break;
    }
    entries += entries_per_rpc;
  }
  state.SetItemsProcessed(entries);
  state.SetBytesProcessed(entries * static_cast<int64_t>(payload.size()));
}

// Both paths over the same matrix.
void AddMatrix(benchmark::internal::Benchmark* b) {
  b->ArgNames({"entries", "bytes"})
      ->Args({1, 100})
      ->Args({64, 100})
      ->Args({1, 65536})
      ->Args({16, 65536})
      ->ThreadRange(1, 8)
      ->UseRealTime()
      ->MinTime(0.5);
}

BENCHMARK(BM_BookieAdd)->Apply(AddMatrix);
BENCHMARK(BM_BookieAddLocal)->Apply(AddMatrix);

// One add port exchange: the bookie parses the request and builds and
// encodes the reply; the writer parses the reply. Way 0 with the generated
// messages, way 1 with add_wire (the body bytes are the same either way).
void BM_AddPortCodec(benchmark::State& state) {
  const bool direct = state.range(0) == 1;
  const int entries = static_cast<int>(state.range(1));
  const size_t bytes = static_cast<size_t>(state.range(2));
  pb::AddRequest request;
  request.set_expected_instance_id("0123456789abcdef0123456789abcdef");
  for (int i = 0; i < entries; ++i) {
    pb::Entry* e = request.add_entries();
    e->set_ledger_id(1234);
    e->set_entry_id(1000000 + i);
    e->set_lac(999999 + i);
    e->set_payload(std::string(bytes, 'v'));
    e->set_checksum(EntryChecksum(e->ledger_id(), e->entry_id(), e->lac(), e->payload()));
  }
  const std::string body = request.SerializeAsString();
  std::string reply;
  uint64_t checked = 0;
  for (auto _ : state) {
    if (direct) {
      const std::string copy = body;  // the add port copies the frame body
      addwire::AddRequestRef parsed;
      if (!addwire::ParseAddRequest(copy, &parsed)) {
        FailBenchmark(state, "ParseAddRequest refused the request");
        break;
      }
      std::vector<addwire::AddResultRef> results(parsed.entries.size());
      for (size_t i = 0; i < results.size(); ++i) {
        results[i] = {parsed.entries[i].ledger_id, parsed.entries[i].entry_id, pb::OK};
      }
      reply.resize(addwire::AddResponseSize(results));
      addwire::EncodeAddResponse(results, reply.data());
      std::vector<addwire::AddResultRef> got;
      if (!addwire::ParseAddResponse(reply, &got)) {
        FailBenchmark(state, "ParseAddResponse refused the reply");
        break;
      }
      checked += got.size();
    } else {
      pb::AddRequest parsed;
      if (!parsed.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
        FailBenchmark(state, "ParseFromArray refused the request");
        break;
      }
      pb::AddResponse resp;
      for (const pb::Entry& e : parsed.entries()) {
        pb::AddResult* r = resp.add_results();
        r->set_ledger_id(e.ledger_id());
        r->set_entry_id(e.entry_id());
        r->set_code(pb::OK);
      }
      reply.resize(resp.ByteSizeLong());
      resp.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(reply.data()));
      pb::AddResponse got;
      if (!got.ParseFromString(reply)) {
        FailBenchmark(state, "ParseFromString refused the reply");
        break;
      }
      checked += static_cast<uint64_t>(got.results_size());
    }
  }
  if (checked != static_cast<uint64_t>(state.iterations()) * static_cast<uint64_t>(entries)) {
    FailBenchmark(state, "a reply lost results");
  }
  state.SetItemsProcessed(state.iterations() * entries);
}
BENCHMARK(BM_AddPortCodec)
    ->ArgNames({"way", "entries", "bytes"})
    ->ArgsProduct({{0, 1}, {64}, {100, 4096}});

}  // namespace
}  // namespace ledgerkv::bench

int main(int argc, char** argv) {
  ledgerkv::TuneProcessForServer();  // as in the ledgerkv binary
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  ledgerkv::bench::StartBookie();
  const int exit_code = ledgerkv::bench::RunBenchmarksStrictly();
  benchmark::Shutdown();
  ledgerkv::bench::StopBookie();
  return exit_code;
}
