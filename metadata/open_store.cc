#include "metadata/open_store.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "metadata/absl_compat.h"

namespace ledgerkv::metadata {
namespace {

using internal::ToAbsl;

constexpr std::string_view kEtcdScheme = "etcd://";
constexpr std::string_view kEmbeddedScheme = "embedded://";

absl::Status BadUri(std::string_view uri, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "bad metadata store URI \"", ToAbsl(uri), "\": ", ToAbsl(why),
      " (expected etcd://host:port[,host:port...][/prefix] or embedded:///dir)"));
}

}  // namespace

absl::StatusOr<EtcdOptions> ParseEtcdUri(std::string_view uri, EtcdOptions base) {
  if (!uri.starts_with(kEtcdScheme)) return BadUri(uri, "not an etcd:// URI");
  std::string_view rest = uri.substr(kEtcdScheme.size());
  std::string_view hosts = rest;
  std::string prefix;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    hosts = rest.substr(0, slash);
    prefix = std::string(rest.substr(slash));
    if (prefix == "/") prefix.clear();
  }
  if (hosts.empty()) return BadUri(uri, "no etcd endpoint");
  base.endpoints.clear();
  for (absl::string_view endpoint : absl::StrSplit(ToAbsl(hosts), ',')) {
    const size_t colon = endpoint.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return BadUri(uri, absl::StrCat("endpoint \"", endpoint, "\" is not host:port"));
    }
    int port = 0;
    if (!absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return BadUri(uri, absl::StrCat("endpoint \"", endpoint, "\" has no valid port"));
    }
    base.endpoints.emplace_back(endpoint);
  }
  base.key_prefix = std::move(prefix);
  return base;
}

absl::StatusOr<std::unique_ptr<MetadataStore>> OpenMetadataStore(std::string_view uri,
                                                                  const OpenStoreOptions& options) {
  if (uri.starts_with(kEtcdScheme)) {
    ASSIGN_OR_RETURN(EtcdOptions etcd, ParseEtcdUri(uri, options.etcd));
    ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Create(std::move(etcd)));
    return std::unique_ptr<MetadataStore>(std::move(store));
  }
  if (uri.starts_with(kEmbeddedScheme)) {
    const std::string dir(uri.substr(kEmbeddedScheme.size()));
    if (dir.empty()) return BadUri(uri, "no directory");
    ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedStore> store, EmbeddedStore::Open(dir, options.embedded));
    return std::unique_ptr<MetadataStore>(std::move(store));
  }
  return BadUri(uri, "unknown scheme");
}

}  // namespace ledgerkv::metadata
