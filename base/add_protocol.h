// Constants of the bookie's add port (docs/add-transport.md), shared by the
// bookie (ledger/bookie/add_server.h) and the client
// (ledger/add_channel.h). Frames are FrameConn frames (base/frame_conn.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ledgerkv::add_protocol {

// The client's first frame: id 0, status kHelloStatus, body kHelloBody. A
// bookie closes a connection whose first frame is anything else (a gRPC or
// HTTP client dialling the wrong port).
inline constexpr uint32_t kHelloStatus = 0x4c4b5641;  // "LKVA"
inline constexpr std::string_view kHelloBody = "ledgerkv-add/1";

// Request frames: id = call id chosen by the client (> 0), status 0, body
// = a serialized bookie.v1.AddRequest.
// Reply frames: the request's id; status 0 and body = a serialized
// bookie.v1.AddResponse, or status = a gRPC status code (non-zero) and body
// = its message, exactly what the Add RPC would have ended with.

// Largest entry payload a bookie stores (its journal's kMaxPayloadSize); a
// ledger client refuses a max_entry_bytes above it.
inline constexpr size_t kMaxEntryPayloadBytes = size_t{64} << 20;

// Largest frame body either side accepts, and the gRPC message limit of
// bookie RPCs on both sides: an AddRequest (or a ReadResponse) carries
// entries of up to kMaxEntryPayloadBytes, plus room for its fields.
inline constexpr size_t kMaxBodyBytes = kMaxEntryPayloadBytes + (size_t{16} << 20);

}  // namespace ledgerkv::add_protocol
