// Options of the ledger client (ledger_client.h). Kept apart so that the
// writer, reader and recovery code can share them without including the
// client.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
class ChannelArguments;
class Status;
}  // namespace grpc

namespace ledgerkv::metadata {
class MetadataStore;
}

namespace ledgerkv::bookie::v1 {
class AddRequest;
class AddResponse;
}  // namespace ledgerkv::bookie::v1

namespace ledgerkv::ledger {

// An Add to a bookie of this process without gRPC (ClientOptions::local_add):
// the same request and response as the Add RPC; `done` runs once, on any
// thread (possibly inline), with the status the RPC would have had, after
// `response` is filled. `request` and `response` stay alive until then.
using LocalAddFn = std::function<void(const bookie::v1::AddRequest& request,
                                      bookie::v1::AddResponse* response,
                                      std::function<void(const grpc::Status&)> done)>;

// Guards the start of a call on the in-process channel of a bookie of this
// process (ClientOptions::local_channel; typically
// BookieServer::InProcessCallGate): runs `start`, which starts one call, and
// returns true while the bookie serves; returns false without running it once
// the bookie began shutting down. gRPC's in-process transport crashes the
// process on a call started after its server stopped, so the client starts
// every call on such a channel through its gate.
using LocalCallGate = std::function<bool(absl::FunctionRef<void()> start)>;

// What ClientOptions::local_channel gives for a bookie of this process.
struct LocalChannel {
  std::shared_ptr<grpc::Channel> channel;  // nullptr: not in this process (TCP)
  LocalCallGate gate;                      // required: without it, TCP
};

struct ClientOptions {
  // The metadata store holding ledger metadata and bookie registrations.
  // Not owned; must outlive the client and every writer/reader it made.
  metadata::MetadataStore* metadata = nullptr;
  // Key prefix /ledgerkv/<cluster>/.
  std::string cluster = "default";
  // Deadline of every bookie RPC (long polls add their wait time to it).
  absl::Duration rpc_timeout = absl::Seconds(5);
  // Add RPCs a writer keeps in flight to one bookie; further entries queue
  // and leave together in the next RPC (batching). >= 1.
  int max_rpcs_in_flight_per_bookie = 4;
  // Caps of one batched Add RPC. Large entries travel in several moderate
  // RPCs rather than one big one: the bookie starts writing the first while
  // the next is still on the wire (docs/performance.md, "Ledger layer").
  int max_entries_per_add_rpc = 512;
  int64_t max_bytes_per_add_rpc = int64_t{512} << 10;  // 1 to 64 MiB - 8
  // A writer that stops appending tells its bookies its LAC after this long
  // (docs/ledger-protocol.md, "Explicit LAC writes"), so that tailing readers
  // see its last entries. absl::InfiniteDuration() turns it off.
  absl::Duration explicit_lac_delay = absl::Milliseconds(50);
  // Largest payload one append may carry: 1 to 64 MiB - 8 (a bookie's
  // largest entry, add_protocol::kMaxEntryPayloadBytes, less the 8-byte
  // header the client adds to each entry; Create refuses more).
  int64_t max_entry_bytes = int64_t{16} << 20;
  // Payload bytes a bookie may return in one Read RPC (it always returns at
  // least one entry). Keep well below the gRPC message limit.
  int64_t max_bytes_per_read_rpc = int64_t{2} << 20;
  // Entries asked for in one Read RPC.
  int max_entries_per_read_rpc = 1024;
  // Speculative reads (docs/ledger-protocol.md, "Reads"): a round of a
  // range read waits this long for its Read RPCs. From then on (and after
  // every answer) a request still unanswered is cancelled, its bookie marked
  // slow, and its entries asked of another replica in the next round,
  // provided every one of them has a replica left to try that is not slow
  // or silent itself; otherwise the request keeps its full rpc_timeout. A
  // bookie given up on for an entry is asked again (and waited for) if the
  // other replicas cannot settle it: speculation changes latency, not
  // whether a read succeeds (the docs list the rare exceptions). LAC reads
  // wait this long for the rest after the first answer. So a hung bookie
  // costs a read this long instead of the RPC deadline. Must be positive;
  // absl::InfiniteDuration() turns it off.
  absl::Duration speculative_read_timeout = absl::Milliseconds(500);
  // How long reads plan around a bookie that did not answer (unreachable,
  // past its deadline, or given up on speculatively; recovery notes the
  // first two, and re-adds still unanswered after their grace period): its
  // entries are asked of other replicas first, and of it only when no other
  // replica is left. The hold ends early when it answers a read or a
  // recovery call. Zero: never plan around a bookie; InfiniteDuration():
  // until it answers. Must not be negative.
  absl::Duration slow_bookie_hold = absl::Seconds(30);
  // Recovery's re-adds (ARCHITECTURE.md 4) go on once Qa replicas of each
  // entry acknowledged; the replicas beyond Qa get this long more (capped by
  // rpc_timeout) to store their copy, and one that has not answered by then
  // is marked slow (slow_bookie_hold). Must not be negative.
  absl::Duration recovery_readd_grace = absl::Milliseconds(100);
  // Attempts of a metadata operation that fails with a transient error
  // (UNAVAILABLE) before the operation gives up: a CAS, and the placement
  // and metadata reads of a writer's ensemble change. Between attempts the
  // client waits 50 ms, doubling up to 1 s (about 3.5 s over 8 attempts).
  int metadata_retries = 8;
  // Writers send Add requests over each bookie's add port (plain TCP
  // frames, docs/add-transport.md) rather than the Add RPC: the same
  // request and reply without gRPC's per-call cost. Bookies without an add
  // port get the RPC. Everything else always uses gRPC.
  bool use_add_port = true;
  // A writer's AddCallbacks run on the thread of the add port connection
  // whose reply made them ready (after every reply read with it), instead
  // of on the writer's own thread: one thread hand-off less per batch of
  // acks (docs/ledger-protocol.md, "Where callbacks run"). That thread
  // reads the replies of every writer of this client to that bookie, so a
  // callback that blocks delays them all (and their Close). Off: callbacks
  // always run on the writer's thread, and a slow callback delays only its
  // own writer. Acks of the Add RPC or of an in-process bookie (local_add)
  // go to the writer's thread either way (unless a connection thread is
  // delivering for this writer right then: it takes them along).
  bool callbacks_on_reply_thread = true;
  // A connection to a bookie (its gRPC channel, and its add port's
  // connection and thread) that no writer, reader or recovery has held for
  // this long is closed, by a thread of the client; the next use opens it
  // again (asking local_channel and local_add again). Without it a
  // long-running client kept one of each for every bookie address it ever
  // used, including addresses of bookies long gone. At least 1 s (a
  // connection is never closed right after a call let go of it);
  // InfiniteDuration: never.
  absl::Duration idle_connection_close = absl::Minutes(10);
  // Optional: channels to bookies that live in this process (`ledgerkv
  // standalone`), by the address the bookie registered. The client asks it
  // once per address (and again after idle_connection_close closed that
  // connection), with the channel arguments it would use over TCP
  // (message sizes, ...); a non-null channel (typically
  // BookieServer::InProcessChannel, with its InProcessCallGate as the gate)
  // replaces the TCP connection, saving the loopback socket and HTTP/2
  // framing on every RPC. A null channel: connect over TCP as usual. Called
  // under the client's channel-cache lock: it must not call back into the
  // client. A bookie may shut down before the client: calls through its
  // channel then fail UNAVAILABLE (its gate refuses them).
  std::function<LocalChannel(const std::string& address, const grpc::ChannelArguments& args)>
      local_channel;
  // Optional, with local_channel: a direct add path to a bookie in this
  // process (typically BookieServer::LocalAdd), asked once per address
  // (and again after an idle close, as local_channel); an empty function:
  // adds go through the channel. Writers then hand their
  // Add requests to the bookie's storage by a function call and take the
  // reply on the bookie's journal thread right after its fdatasync: no gRPC
  // call objects, completion queue or thread hand-off per add
  // (docs/performance.md). Everything else (reads, fences, LAC) still uses
  // the channel. Same rules as local_channel. A direct add has no deadline
  // (rpc_timeout does not apply): a local disk that never answers holds the
  // adds until it does.
  std::function<LocalAddFn(const std::string& address)> local_add;
};

struct CreateOptions {
  // Ensemble size, write quorum, ack quorum: E >= Qw >= Qa >= 1 (L1), E <= 64.
  int ensemble_size = 3;
  int write_quorum = 2;
  int ack_quorum = 2;
  // Stored in LedgerMetadata.custom (owner, purpose, ...).
  std::map<std::string, std::string> custom;
};

enum class OpenMode {
  // Fence and close the ledger if it is not closed yet (ARCHITECTURE.md 4,
  // "open with recovery"); its previous writer can never add again.
  kRecover,
  // Read what is confirmed (up to the LAC) without disturbing the writer.
  kNoRecovery,
};

}  // namespace ledgerkv::ledger
