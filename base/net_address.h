// The address a registering process publishes for other machines to dial
// (docs/cluster.md, "Addresses: listen and advertise").
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ledgerkv {

// True for a host that binds every interface and names no machine when
// dialled: "*", "" and the unspecified address in any spelling ("0.0.0.0",
// "0", "::", "[::]", "[::0]" ...).
bool IsWildcardHost(absl::string_view host);

// The host part of "host:port" (everything before the last colon, brackets
// of an IPv6 host kept); all of `address` if it has no colon or is a
// bracketed host alone ("[::1]").
absl::string_view HostOf(absl::string_view address);

// Checks, before anything is opened or bound, that a process listening on
// `listen` (host:port) can publish an address others dial, given
// `advertise` ("", "HOST" or "HOST:PORT"; IPv6 hosts in brackets).
// INVALID_ARGUMENT, naming the flags, when `listen`'s host is a wildcard and
// `advertise` is empty, or when `advertise` is a wildcard, has an empty host
// or a port outside 1-65535.
absl::Status CheckAdvertisable(absl::string_view listen, absl::string_view advertise);

// The published address: `advertise` if it has a port, `advertise`'s host
// with `bound_port` if it has none, otherwise `listen`'s host with
// `bound_port` (the port actually bound, for a listen port of 0).
// REQUIRES: CheckAdvertisable(listen, advertise) is OK.
std::string AdvertisedAddress(absl::string_view listen, int bound_port,
                              absl::string_view advertise);

}  // namespace ledgerkv
