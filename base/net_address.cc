#include "base/net_address.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ledgerkv {
namespace {

// Splits `address` into host and port text (the port empty when there is
// none). An IPv6 host must be in brackets: "[fd00::5]" is a host alone,
// "[fd00::5]:80" a host and a port. Returns false for text that is neither
// (an unbracketed host with a colon in it, a bracket left open, anything
// after the closing bracket but ":port").
bool Split(absl::string_view address, absl::string_view* host, absl::string_view* port) {
  *port = {};
  *host = address;
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close == absl::string_view::npos || close < 2) return false;
    *host = address.substr(0, close + 1);
    const absl::string_view rest = address.substr(close + 1);
    if (rest.empty()) return true;
    if (rest.front() != ':') return false;
    *port = rest.substr(1);
    return !port->empty();
  }
  const size_t colon = address.find(':');
  if (colon == absl::string_view::npos) return true;
  if (address.find(':', colon + 1) != absl::string_view::npos) return false;
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  return !port->empty();
}

bool IsPort(absl::string_view text) {
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  uint32_t p = 0;
  return !text.empty() && absl::SimpleAtoi(text, &p) && p >= 1 && p <= 65535;
}

}  // namespace

bool IsWildcardHost(absl::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "*") return true;
  // 0.0.0.0, 0, ::, ::0, 0:0:0:0:0:0:0:0 ...: the unspecified address.
  return host.find_first_not_of("0.:") == absl::string_view::npos;
}

absl::string_view HostOf(absl::string_view address) {
  // A bracketed IPv6 host alone ("[::1]") has no port to cut off.
  if (!address.empty() && address.front() == '[' && address.back() == ']') return address;
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return address;
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
  if (!Split(advertise, &host, &port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--advertise ", advertise,
        ": expected HOST or HOST:PORT, an IPv6 host in brackets ([fd00::5] or [fd00::5]:3181)"));
  }
  if (IsWildcardHost(host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise ", advertise,
                     " is not an address other machines can dial: name this machine's address"));
  }
  if (!port.empty() && !IsPort(port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise ", advertise, ": the port must be a number from 1 to 65535"));
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
