// OpenMetadataStore: a MetadataStore from a URI, for processes that take
// `--metadata URI` (`ledgerkv bookie`, `ledgerkv server`):
//
//   etcd://host:port[,host:port...][/key/prefix]   EtcdStore (cluster mode);
//       the optional path is a key namespace (EtcdOptions::key_prefix).
//   embedded:///abs/dir  or  embedded://rel/dir    EmbeddedStore in that dir
//       (one process only).
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "metadata/embedded_store.h"
#include "metadata/etcd_store.h"
#include "metadata/metadata_store.h"

namespace ledgerkv::metadata {

struct OpenStoreOptions {
  // Timeouts and page size for etcd:// (endpoints and key_prefix come from
  // the URI and are ignored here).
  EtcdOptions etcd;
  EmbeddedStore::Options embedded;
};

// INVALID_ARGUMENT for a malformed URI (unknown scheme, no endpoint, an
// endpoint without a numeric port, an empty path); otherwise the errors of
// EtcdStore::Create / EmbeddedStore::Open.
absl::StatusOr<std::unique_ptr<MetadataStore>> OpenMetadataStore(
    std::string_view uri, const OpenStoreOptions& options = {});

// Parses an etcd:// URI into endpoints and key_prefix (the other fields of
// `base` are kept). INVALID_ARGUMENT as above.
absl::StatusOr<EtcdOptions> ParseEtcdUri(std::string_view uri, EtcdOptions base = {});

}  // namespace ledgerkv::metadata
