#include "ledger/bookie/bookie_service.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "base/fault_point.h"

namespace ledgerkv::bookie {
namespace {

// Clients keep gRPC's default 4 MiB receive limit: stay below it unless a
// single entry is larger (one entry is always returned).
constexpr int64_t kMaxReadResponseBytes = 3 << 20;
constexpr int kMaxReadCount = 10000;
constexpr int64_t kMaxLongPollMs = 60000;

}  // namespace

BookieServiceImpl::BookieServiceImpl(BookieStorage* storage, int read_threads)
    : storage_(storage), read_pool_(read_threads) {}

BookieServiceImpl::~BookieServiceImpl() = default;

void BookieServiceImpl::set_bookie_id(std::string id) {
  absl::MutexLock l(&mu_);
  bookie_id_ = std::move(id);
}

std::string BookieServiceImpl::bookie_id() const {
  absl::MutexLock l(&mu_);
  return bookie_id_;
}

bool BookieServiceImpl::Admit(grpc::ServerUnaryReactor* reactor) const {
  if (serving_.load(std::memory_order_acquire)) return true;
  reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "bookie is starting: its identity is not verified yet"));
  return false;
}

bool BookieServiceImpl::InstanceMismatch(std::string_view expected) const {
  return !expected.empty() && expected != storage_->instance_id();
}

grpc::ServerUnaryReactor* BookieServiceImpl::Add(grpc::CallbackServerContext* ctx,
                                                 const v1::AddRequest* req,
                                                 v1::AddResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // gRPC keeps req and resp alive until Finish.
  AddDirect(*req, resp, [reactor](const grpc::Status& status) { reactor->Finish(status); });
  return reactor;
}

void BookieServiceImpl::AddDirect(const v1::AddRequest& req, v1::AddResponse* resp,
                                  absl::AnyInvocable<void(const grpc::Status&) &&> finish) {
  std::vector<EntryView> entries;
  entries.reserve(req.entries_size());
  for (const v1::Entry& e : req.entries()) {
    // Views into the request, alive until finish.
    entries.push_back(EntryView{e.ledger_id(), e.entry_id(), e.lac(), e.checksum(), e.payload()});
  }
  AddEntries(req.expected_instance_id(), req.recovery(), std::move(entries),
             [&req, resp, finish = std::move(finish)](const grpc::Status& status,
                                                      std::vector<Code> codes) mutable {
               if (status.ok()) {
                 resp->mutable_results()->Reserve(static_cast<int>(codes.size()));
                 for (size_t i = 0; i < codes.size(); ++i) {
                   const v1::Entry& e = req.entries(static_cast<int>(i));
                   v1::AddResult* r = resp->add_results();
                   r->set_ledger_id(e.ledger_id());
                   r->set_entry_id(e.entry_id());
                   r->set_code(codes[i]);
                 }
               }
               std::move(finish)(status);
             });
}

void BookieServiceImpl::AddEntries(std::string_view expected_instance_id, bool recovery,
                                   std::vector<EntryView> entries, AddEntriesCallback done) {
  if (!serving_.load(std::memory_order_acquire)) {
    std::move(done)(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "bookie is starting: its identity is not verified yet"),
                    {});
    return;
  }
  if (LEDGERKV_FAULT("bookie.add.drop_request", bookie_id())) {
    std::move(done)(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "add request dropped (fault point bookie.add.drop_request)"),
                    {});
    return;
  }
  if (InstanceMismatch(expected_instance_id)) {
    std::move(done)(grpc::Status::OK, std::vector<Code>(entries.size(), v1::INSTANCE_MISMATCH));
    return;
  }
  storage_->Add(std::move(entries), recovery,
                [done = std::move(done)](std::vector<Code> codes) mutable {
                  std::move(done)(grpc::Status::OK, std::move(codes));
                });
}

void BookieServiceImpl::FenceThen(uint64_t ledger_id, grpc::ServerUnaryReactor* reactor,
                                  std::function<void(Code)> set_code,
                                  absl::AnyInvocable<void() &&> then) {
  const std::string id = bookie_id();
  if (LEDGERKV_FAULT("bookie.fence.drop_request", id)) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "fence request dropped (fault point bookie.fence.drop_request)"));
    return;
  }
  storage_->Fence(ledger_id, [reactor, set_code = std::move(set_code), id,
                              then = std::move(then)](Code c) mutable {
    if (c != v1::OK) {
      set_code(c);
      reactor->Finish(grpc::Status::OK);
      return;
    }
    if (LEDGERKV_FAULT("bookie.fence.drop_reply", id)) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                   "fence reply dropped (fault point bookie.fence.drop_reply)"));
      return;
    }
    std::move(then)();
  });
}

grpc::ServerUnaryReactor* BookieServiceImpl::Read(grpc::CallbackServerContext* ctx,
                                                  const v1::ReadRequest* req,
                                                  v1::ReadResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Admit(reactor)) return reactor;
  read_requests_.fetch_add(1, std::memory_order_relaxed);
  if (InstanceMismatch(req->expected_instance_id())) {
    resp->set_code(v1::INSTANCE_MISMATCH);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // The ids asked for must exist as int64 (first + count - 1 below).
  if (req->first_entry_id() < 0 || req->count() < 1 ||
      req->first_entry_id() > std::numeric_limits<int64_t>::max() -
                                  std::min<int64_t>(req->count(), kMaxReadCount)) {
    resp->set_code(v1::INVALID);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  auto read = [this, req, resp, reactor] {
    read_pool_.Schedule([this, req, resp, reactor] {
      // Tests hold a read here (a slow disk).
      static_cast<void>(LEDGERKV_FAULT("bookie.read.start", bookie_id()));
      if (LEDGERKV_FAULT("bookie.read.empty_reply", bookie_id())) {
        resp->set_code(v1::OK);  // and no results
      } else {
        ReadRange(*req, resp);
      }
      reactor->Finish(grpc::Status::OK);
    });
  };
  if (req->fence()) {
    FenceThen(req->ledger_id(), reactor, [resp](Code c) { resp->set_code(c); }, std::move(read));
  } else {
    read();
  }
  return reactor;
}

void BookieServiceImpl::ReadRange(const v1::ReadRequest& req, v1::ReadResponse* resp) {
  const std::optional<LedgerState> ledger = storage_->GetLedger(req.ledger_id());
  if (!ledger.has_value()) {
    resp->set_code(v1::NO_SUCH_LEDGER);
    return;
  }
  resp->set_code(v1::OK);
  const int64_t cap = req.max_bytes() > 0 ? std::min(req.max_bytes(), kMaxReadResponseBytes)
                                          : kMaxReadResponseBytes;
  const int count = std::min(req.count(), kMaxReadCount);
  int64_t bytes = 0;
  for (int i = 0; i < count; ++i) {
    const int64_t entry_id = req.first_entry_id() + i;
    v1::ReadResult* r = resp->add_results();
    r->set_entry_id(entry_id);
    if (entry_id > ledger->last_entry_id) {
      // Nothing is held past the highest entry id: an explicit answer for
      // every id asked for beyond it, without a lookup. One answer and a
      // stop would settle a single id per request, and a reader reading
      // around a replica that lacks a tail would ask it again and again.
      r->set_code(v1::NO_SUCH_ENTRY);
      for (int rest = i + 1; rest < count; ++rest) {
        v1::ReadResult* none = resp->add_results();
        none->set_entry_id(req.first_entry_id() + rest);
        none->set_code(v1::NO_SUCH_ENTRY);
      }
      break;
    }
    // Gaps below it (striped ensembles hold every E-th run of entries) are
    // answered one by one, so a reader learns about every id it asked for.
    const Code code = storage_->ReadEntry(req.ledger_id(), entry_id, r->mutable_entry());
    r->set_code(code);
    if (code != v1::OK) {
      r->clear_entry();
      continue;
    }
    const int64_t size = static_cast<int64_t>(r->entry().payload().size());
    if (i > 0 && bytes + size > cap) {
      resp->mutable_results()->RemoveLast();
      break;
    }
    bytes += size;
    if (bytes >= cap) break;
  }
}

void BookieServiceImpl::FillLac(uint64_t ledger_id, v1::ReadLacResponse* resp) const {
  std::optional<LedgerState> st = storage_->GetLedger(ledger_id);
  if (!st.has_value()) {
    resp->set_code(v1::NO_SUCH_LEDGER);
    resp->set_lac(-1);
    resp->set_last_entry_id(-1);
    return;
  }
  resp->set_code(v1::OK);
  resp->set_lac(st->lac);
  resp->set_last_entry_id(st->last_entry_id);
  resp->set_fenced(st->fenced);
}

grpc::ServerUnaryReactor* BookieServiceImpl::ReadLac(grpc::CallbackServerContext* ctx,
                                                     const v1::ReadLacRequest* req,
                                                     v1::ReadLacResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Admit(reactor)) return reactor;
  if (InstanceMismatch(req->expected_instance_id())) {
    resp->set_code(v1::INSTANCE_MISMATCH);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  // Never wait past the client's deadline.
  absl::Time deadline =
      absl::Now() + absl::Milliseconds(std::clamp<int64_t>(req->wait_timeout_ms(), 0, kMaxLongPollMs));
  deadline = std::min(deadline, absl::FromChrono(ctx->deadline()));
  auto answer = [this, req, resp, reactor, deadline] {
    if (req->wait_if_lac_at_most() > -2) {
      storage_->WaitForLac(req->ledger_id(), req->wait_if_lac_at_most(), deadline,
                           [this, req, resp, reactor](LacWaiters::Wake) {
                             FillLac(req->ledger_id(), resp);
                             reactor->Finish(grpc::Status::OK);
                           });
      return;
    }
    FillLac(req->ledger_id(), resp);
    reactor->Finish(grpc::Status::OK);
  };
  if (req->fence()) {
    FenceThen(req->ledger_id(), reactor, [resp](Code c) { resp->set_code(c); }, std::move(answer));
  } else {
    answer();
  }
  return reactor;
}

grpc::ServerUnaryReactor* BookieServiceImpl::WriteLac(grpc::CallbackServerContext* ctx,
                                                      const v1::WriteLacRequest* req,
                                                      v1::WriteLacResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Admit(reactor)) return reactor;
  if (InstanceMismatch(req->expected_instance_id())) {
    resp->set_code(v1::INSTANCE_MISMATCH);
  } else {
    // In memory, no disk: answered at once.
    const auto [code, lac] = storage_->SetExplicitLac(req->ledger_id(), req->lac());
    resp->set_code(code);
    resp->set_lac(lac);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* BookieServiceImpl::GetInfo(grpc::CallbackServerContext* ctx,
                                                     const v1::GetInfoRequest* req,
                                                     v1::GetInfoResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!Admit(reactor)) return reactor;
  StorageStats stats = storage_->GetStats();
  resp->set_bookie_id(bookie_id());
  resp->set_instance_id(storage_->instance_id());
  resp->set_state(stats.read_only ? v1::READ_ONLY_STATE : v1::WRITABLE);
  resp->set_read_only_reason(stats.read_only_reason);
  resp->set_ledger_count(stats.ledger_count);
  resp->set_journal_bytes(stats.journal_bytes);
  resp->set_entries_added(stats.entries_added);
  resp->set_syncs(stats.syncs);
  resp->set_group_commit_waits(stats.group_commit_waits);
  resp->set_no_sync(!stats.sync);
  resp->set_disk_usage_percent(stats.disk_usage < 0 ? -1 : 100 * stats.disk_usage);
  resp->set_read_requests(read_requests_.load(std::memory_order_relaxed));
  resp->set_add_port(static_cast<uint32_t>(add_port_.load(std::memory_order_relaxed)));
  resp->set_add_port_requests(add_port_requests_.load(std::memory_order_relaxed));
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace ledgerkv::bookie
