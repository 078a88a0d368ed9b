// The Bookie gRPC service (proto/bookie.proto) over a BookieStorage, with the
// callback API: Add and fences complete from the storage's commit path,
// disk reads run on a small thread pool, long polls complete from the add
// path or a timer. No reaction ever blocks.
//
// Request-level codes (Read/ReadLac `code`): OK, INSTANCE_MISMATCH,
// NO_SUCH_LEDGER, INVALID (bad arguments), READ_ONLY (a requested fence
// could not be made durable). Per-entry codes: see README.md.
//
// Fault points (base/fault_point.h), argument = bookie id:
//   bookie.fence.drop_request  the fence request is lost: nothing is fenced
//                              and the RPC fails with UNAVAILABLE (what a
//                              client sees of a lost request, without making
//                              tests wait for their deadline);
//   bookie.fence.drop_reply    the fence is applied durably, then the reply
//                              is lost: the RPC fails with UNAVAILABLE;
//   bookie.add.drop_request    an Add request is lost: nothing is stored
//                              and the RPC fails with UNAVAILABLE;
//   bookie.read.empty_reply    a Read is answered OK with no results at all
//                              (a faulty or foreign bookie's reply).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "ledger/bookie/bookie_storage.h"
#include "ledger/bookie/thread_pool.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::bookie {

class BookieServiceImpl final : public v1::Bookie::CallbackService {
 public:
  // `storage` must outlive the service. `read_threads` serve disk reads.
  BookieServiceImpl(BookieStorage* storage, int read_threads);
  // Waits for queued reads to finish.
  ~BookieServiceImpl() override;

  // The id used in GetInfo and as the fault-point argument. Set once the
  // listening address is known.
  void set_bookie_id(std::string id);
  // The add port GetInfo reports (docs/add-transport.md). Set before
  // StartServing.
  void set_add_port(int port) { add_port_.store(port, std::memory_order_relaxed); }
  // Counts one request of the add port (GetInfo.add_port_requests).
  void CountAddPortRequest() { add_port_requests_.fetch_add(1, std::memory_order_relaxed); }

  // Until this is called every RPC is answered UNAVAILABLE: the server
  // listens before the bookie's identity (cookie) is verified, because the
  // cookie names the bound address, and must not serve a wiped directory
  // meanwhile.
  void StartServing() { serving_.store(true, std::memory_order_release); }

  // The RPCs of proto/bookie.proto; semantics in README.md ("RPC
  // semantics"). Each returns the call's reactor, finished later from the
  // storage's commit path, the read pool or the long-poll timer.
  grpc::ServerUnaryReactor* Add(grpc::CallbackServerContext* ctx, const v1::AddRequest* req,
                                v1::AddResponse* resp) override;
  grpc::ServerUnaryReactor* Read(grpc::CallbackServerContext* ctx, const v1::ReadRequest* req,
                                 v1::ReadResponse* resp) override;
  grpc::ServerUnaryReactor* ReadLac(grpc::CallbackServerContext* ctx,
                                    const v1::ReadLacRequest* req,
                                    v1::ReadLacResponse* resp) override;
  grpc::ServerUnaryReactor* WriteLac(grpc::CallbackServerContext* ctx,
                                     const v1::WriteLacRequest* req,
                                     v1::WriteLacResponse* resp) override;
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx,
                                    const v1::GetInfoRequest* req,
                                    v1::GetInfoResponse* resp) override;

  // Add without gRPC, for a client in this process (BookieServer::LocalAdd):
  // the same checks, storage call and reply as the Add RPC; `finish` gets
  // the status the RPC would end with, once `resp` is filled (on the
  // storage's journal thread after the fdatasync, or inline for an
  // immediate answer). `req` and `resp` must stay alive until then.
  void AddDirect(const v1::AddRequest& req, v1::AddResponse* resp,
                 absl::AnyInvocable<void(const grpc::Status&) &&> finish);

  // What AddDirect runs, for a request already parsed into views (the add
  // port: proto/add_wire.h). `done` gets the status the RPC would end with
  // and, when it is OK, one code per entry in request order (on the
  // journal thread after the fdatasync, or inline). The viewed bytes must
  // stay alive until then.
  using AddEntriesCallback =
      absl::AnyInvocable<void(const grpc::Status& status, std::vector<Code> codes) &&>;
  void AddEntries(std::string_view expected_instance_id, bool recovery,
                  std::vector<EntryView> entries, AddEntriesCallback done);

 private:
  bool InstanceMismatch(std::string_view expected) const;
  // False (after finishing the reactor UNAVAILABLE) before StartServing.
  bool Admit(grpc::ServerUnaryReactor* reactor) const;
  // Runs the fence part of Read/ReadLac, then `then` (on the writer thread)
  // if the fence is durable. Finishes the reactor itself on failure (after
  // set_code(code) for a request-level error) and on injected faults.
  void FenceThen(uint64_t ledger_id, grpc::ServerUnaryReactor* reactor,
                 std::function<void(Code)> set_code, absl::AnyInvocable<void() &&> then);
  // Fills a range read response (blocking disk reads).
  void ReadRange(const v1::ReadRequest& req, v1::ReadResponse* resp);
  void FillLac(uint64_t ledger_id, v1::ReadLacResponse* resp) const;
  std::string bookie_id() const;

  BookieStorage* const storage_;  // Constant after construction.
  ThreadPool read_pool_;

  std::atomic<bool> serving_{false};
  std::atomic<int> add_port_{0};
  std::atomic<uint64_t> add_port_requests_{0};
  // Read RPCs admitted (GetInfo.read_requests).
  std::atomic<uint64_t> read_requests_{0};
  mutable absl::Mutex mu_;
  std::string bookie_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ledgerkv::bookie
