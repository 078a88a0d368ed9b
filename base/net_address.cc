#include "base/net_address.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv {
namespace {

// Splits `address` into host and port text. An IPv6 host must be in
// brackets: "[fd00::5]" is a host alone, "[fd00::5]:80" a host and a port.
// Without brackets the text after a single colon is the port; an address
// with several colons and no brackets is taken as a host alone.
void Split(absl::string_view address, absl::string_view* host, absl::string_view* port) {
  *port = {};
  *host = address;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close != absl::string_view::npos && close + 1 < address.size() &&
        address[close + 1] == ':') {
      *host = address.substr(0, close + 1);
      *port = address.substr(close + 2);
    }
    return;
  }
  const size_t colon = address.find(':');
  if (colon != absl::string_view::npos && address.find(':', colon + 1) == absl::string_view::npos) {
    *host = address.substr(0, colon);
    *port = address.substr(colon + 1);
  }
}

}  // namespace

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]" || host == "*";
}

absl::string_view HostOf(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return address;
  // "[::]" and "::1" alone: the last colon is inside the host.
  if (!address.empty() && address.front() == '[' && address.back() == ']') return address;
  return address.substr(0, colon);
}

absl::Status CheckAdvertisable(absl::string_view listen, absl::string_view advertise) {
  if (advertise.empty()) {
    if (!IsWildcardHost(HostOf(listen))) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", listen,
        " binds every interface, and other machines cannot dial that address (dialled, it "
        "means their own host): pass --advertise HOST (or HOST:PORT) with the address they "
        "reach this process at"));
  }
  absl::string_view host;
  absl::string_view port;
  Split(advertise, &host, &port);
  if (IsWildcardHost(host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise ", advertise,
                     " is not an address other machines can dial: name this machine's address"));
  }
  if (advertise.back() == ':') {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise ", advertise, ": the port after ':' is missing"));
  }
  if (!port.empty()) {
    uint32_t p = 0;
    if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--advertise ", advertise, ": the port must be a number from 1 to 65535"));
    }
  }
  return absl::OkStatus();
}

std::string AdvertisedAddress(absl::string_view listen, int bound_port,
                              absl::string_view advertise) {
  if (advertise.empty()) return absl::StrCat(HostOf(listen), ":", bound_port);
  absl::string_view host;
  absl::string_view port;
  Split(advertise, &host, &port);
  if (!port.empty()) return std::string(advertise);
  return absl::StrCat(host, ":", bound_port);
}

}  // namespace ledgerkv
