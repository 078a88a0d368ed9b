// Google Benchmark of the CPU work of the KV write hot path, one piece at a
// time, so a regression in any piece shows in one process without gRPC,
// bookies or fsync (docs/performance.md, "KV write path micro benchmarks"):
//
//  - BM_EffectSerialize / BM_EffectParse <mutations>: the range.v1.Effect
//    a put becomes (the log record), 256-byte values.
//  - BM_StoredValueEncode / BM_StoredValueDecode: the RocksDB value format.
//  - BM_WalBatchBuild <records>: framing records into one log entry payload.
//  - BM_LocalStoreApply <puts>: LocalStore::Apply of one batch of single-put
//    effects (RocksDB WAL off, as the range applies), over a 10 000-key
//    key space already written once, so each put reads a previous state.
//  - BM_SequencerPut <overlay hit>: what the sequencer does for one put
//    under its lock: validate, WriteView::Put against the pending overlay
//    (hit: the key has an unapplied write; miss: read from RocksDB),
//    BuildEffect, serialize, overlay update.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmark/benchmark.h"
#include "bench/gbench_util.h"
#include "kv_server/range/limits.h"
#include "kv_server/range/local_store.h"
#include "kv_server/range/range.h"
#include "kv_server/range/stored_value.h"
#include "kv_server/range/validate.h"
#include "kv_server/range/write_view.h"
#include "proto/kv.pb.h"
#include "proto/range.pb.h"
#include "wal/batch_format.h"

namespace ledgerkv::bench {
namespace {

constexpr int kValueBytes = 256;
constexpr int kKeySpace = 10000;

// "k" + index zero-padded to 16 bytes, as ledgerkv-bench's keys.
std::string Key(int i) { return absl::StrFormat("k%015d", i); }

range::v1::Effect MakeEffect(int mutations, int64_t revision) {
  range::v1::Effect effect;
  effect.set_revision(revision);
  const std::string value(kValueBytes, 'v');
  for (int i = 0; i < mutations; ++i) {
    range::v1::Mutation* m = effect.add_mutations();
    m->set_key(Key(i));
    m->set_value(value);
    m->set_create_revision(revision - 100);
    m->set_mod_revision(revision);
    m->set_version(7);
  }
  return effect;
}

void BM_EffectSerialize(benchmark::State& state) {
  const range::v1::Effect effect = MakeEffect(static_cast<int>(state.range(0)), 123456);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string record = effect.SerializeAsString();
    bytes += record.size();
    benchmark::DoNotOptimize(record);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_EffectSerialize)->ArgName("mutations")->Arg(1)->Arg(16)->Arg(256);

void BM_EffectParse(benchmark::State& state) {
  const std::string record =
      MakeEffect(static_cast<int>(state.range(0)), 123456).SerializeAsString();
  for (auto _ : state) {
    range::v1::Effect effect;
    if (!effect.ParseFromString(record)) {
      FailBenchmark(state, "parse failed");
      break;
    }
    benchmark::DoNotOptimize(effect);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(record.size()));
}
BENCHMARK(BM_EffectParse)->ArgName("mutations")->Arg(1)->Arg(16)->Arg(256);

kv::StoredValue MakeStoredValue() {
  return kv::StoredValue{.create_revision = 1000,
                         .mod_revision = 123456,
                         .version = 42,
                         .value = std::string(kValueBytes, 'v')};
}

void BM_StoredValueEncode(benchmark::State& state) {
  const kv::StoredValue v = MakeStoredValue();
  for (auto _ : state) {
    std::string encoded = kv::EncodeStoredValue(v);
    benchmark::DoNotOptimize(encoded);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StoredValueEncode);

void BM_StoredValueDecode(benchmark::State& state) {
  const std::string encoded = kv::EncodeStoredValue(MakeStoredValue());
  for (auto _ : state) {
    absl::StatusOr<kv::StoredValue> v = kv::DecodeStoredValue(encoded);
    if (!v.ok()) {
      FailBenchmark(state, "decode failed");
      break;
    }
    benchmark::DoNotOptimize(v);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_StoredValueDecode);

void BM_WalBatchBuild(benchmark::State& state) {
  const int records = static_cast<int>(state.range(0));
  const std::string record = MakeEffect(1, 123456).SerializeAsString();
  wal::BatchBuilder builder(1);
  for (auto _ : state) {
    for (int i = 0; i < records; ++i) builder.Add(record);
    std::string payload = builder.Finish();
    benchmark::DoNotOptimize(payload);
  }
  state.SetItemsProcessed(state.iterations() * records);
}
BENCHMARK(BM_WalBatchBuild)->ArgName("records")->Arg(1)->Arg(16)->Arg(256);

// A LocalStore in a fresh temp dir with every key of the key space written
// once; shared by the RocksDB benchmarks (Google Benchmark calls each
// function several times) and removed at exit.
class TempStore {
 public:
  static std::unique_ptr<TempStore> Create(benchmark::State& state) {
    auto t = std::unique_ptr<TempStore>(new TempStore());
    t->dir_ = absl::StrCat(std::filesystem::temp_directory_path().string(),
                           "/ledgerkv-kvpath-bench-", getpid());
    std::error_code ec;
    std::filesystem::remove_all(t->dir_, ec);
    auto store = kv::LocalStore::Open(t->dir_);
    if (!store.ok()) {
      FailBenchmark(state, store.status().ToString());
      return nullptr;
    }
    t->store_ = std::move(*store);
    // Preload in batches of 256 keys, one effect each.
    for (int first = 0; first < kKeySpace; first += 256) {
      range::v1::Effect effect;
      effect.set_revision(t->NextRevision());
      for (int i = first; i < first + 256 && i < kKeySpace; ++i) {
        range::v1::Mutation* m = effect.add_mutations();
        m->set_key(Key(i));
        m->set_value(std::string(kValueBytes, 'p'));
        m->set_create_revision(effect.revision());
        m->set_mod_revision(effect.revision());
        m->set_version(1);
      }
      absl::Status s = t->store_->Apply({{.seqno = t->NextSeqno(), .effect = &effect}});
      if (!s.ok()) {
        FailBenchmark(state, s.ToString());
        return nullptr;
      }
    }
    return t;
  }

  ~TempStore() {
    if (store_ != nullptr) store_->Close().IgnoreError();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  kv::LocalStore& store() { return *store_; }
  int64_t NextRevision() { return ++revision_; }
  uint64_t NextSeqno() { return ++seqno_; }

 private:
  TempStore() = default;

  std::string dir_;
  std::unique_ptr<kv::LocalStore> store_;
  int64_t revision_ = 0;
  uint64_t seqno_ = 0;
};

std::unique_ptr<TempStore> g_store;

// The shared store, created on first use (nullptr after an error, which
// `state` reports).
TempStore* SharedStore(benchmark::State& state) {
  if (g_store == nullptr) g_store = TempStore::Create(state);
  return g_store.get();
}

constexpr int kEffectPool = 4096;

// delta:0 is replay (Apply reads each key's previous state for key_count
// and bytes); delta:1 is the serving write path, where the sequencer hands
// the stats delta over (overwrites of equal size: delta 0, exact here).
void BM_LocalStoreApply(benchmark::State& state) {
  const int puts = static_cast<int>(state.range(0));
  const bool with_delta = state.range(1) != 0;
  TempStore* t = SharedStore(state);
  if (t == nullptr) return;
  // A pool of single-put effects on random keys, built outside the timed
  // loop; Apply checks seqnos only, so revisions may repeat.
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> pick(0, kKeySpace - 1);
  std::vector<range::v1::Effect> pool(kEffectPool);
  for (range::v1::Effect& e : pool) {
    e.set_revision(t->NextRevision());
    range::v1::Mutation* m = e.add_mutations();
    m->set_key(Key(pick(rng)));
    m->set_value(std::string(kValueBytes, 'v'));
    m->set_create_revision(1);
    m->set_mod_revision(e.revision());
    m->set_version(2);
  }
  std::vector<kv::SequencedEffect> batch(static_cast<size_t>(puts));
  size_t next = 0;
  for (auto _ : state) {
    for (kv::SequencedEffect& se : batch) {
      se = {.seqno = t->NextSeqno(), .effect = &pool[next]};
      if (with_delta) se.delta = kv::StatsDelta{};
      next = (next + 1) % pool.size();
    }
    absl::Status s = t->store().Apply(batch);
    if (!s.ok()) {
      FailBenchmark(state, s.ToString());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * puts);
  state.SetBytesProcessed(state.iterations() * puts * kValueBytes);
}
// Real time: RocksDB may hand work (memtable switch, flush) to its threads.
BENCHMARK(BM_LocalStoreApply)
    ->ArgNames({"puts", "delta"})
    ->ArgsProduct({{1, 16, 256}, {0, 1}})
    ->UseRealTime();

constexpr int kOverlayKeys = 256;

void BM_SequencerPut(benchmark::State& state) {
  const bool overlay_hit = state.range(0) != 0;
  TempStore* t = SharedStore(state);
  if (t == nullptr) return;
  const kv::Limits limits;
  const kv::RangeDescriptor descriptor{.range_id = 1, .table = "default"};
  const kv::RequestValidator validator(limits, descriptor);
  // Hit: the pending overlay holds the first kOverlayKeys keys (unapplied
  // writes) and every put names one of them. Miss: the overlay is empty
  // and the put reads the key's state from RocksDB; the overlay entry it
  // adds is removed again, as the apply path does.
  kv::PendingOverlay overlay;
  if (overlay_hit) {
    for (int i = 0; i < kOverlayKeys; ++i) {
      overlay[Key(i)] = kv::PendingState{
          .state = kv::StoredValue{.create_revision = 1, .mod_revision = 1, .version = 1,
                                   .value = std::string(kValueBytes, 'o')},
          .write_id = 1};
    }
  }
  // Requests built outside the timed loop, as the gRPC layer hands them in.
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> pick(0, (overlay_hit ? kOverlayKeys : kKeySpace) - 1);
  std::vector<ledgerkv::v1::PutRequest> requests(1024);
  for (ledgerkv::v1::PutRequest& r : requests) {
    r.set_table("default");
    r.set_key(Key(pick(rng)));
    r.set_value(std::string(kValueBytes, 'v'));
  }
  uint64_t write_id = 1;
  int64_t record_bytes = 0;
  size_t next = 0;
  for (auto _ : state) {
    const ledgerkv::v1::PutRequest& request = requests[next];
    next = (next + 1) % requests.size();
    ledgerkv::v1::PutResponse response;

    absl::Status status = validator.CheckRequestBytes(request.ByteSizeLong());
    if (status.ok()) status = validator.CheckPut(request);
    kv::WriteView view(t->store(), overlay, t->NextRevision(), limits);
    if (status.ok()) status = view.Put(request, &response);
    if (!status.ok() || !view.changed()) {
      FailBenchmark(state, status.ok() ? "put changed nothing" : status.ToString());
      break;
    }
    range::v1::Effect effect = view.BuildEffect();
    std::string record = effect.SerializeAsString();
    record_bytes += static_cast<int64_t>(record.size());
    ++write_id;
    for (const auto& [key, s] : view.changes()) {
      overlay[key] = kv::PendingState{.state = s, .write_id = write_id};
    }
    if (!overlay_hit) overlay.erase(request.key());
    benchmark::DoNotOptimize(record);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(record_bytes);
}
BENCHMARK(BM_SequencerPut)->ArgName("overlay_hit")->Arg(0)->Arg(1);

}  // namespace
}  // namespace ledgerkv::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const int exit_code = ledgerkv::bench::RunBenchmarksStrictly();
  benchmark::Shutdown();
  ledgerkv::bench::g_store.reset();  // closes the DB and removes its dir
  return exit_code;
}
