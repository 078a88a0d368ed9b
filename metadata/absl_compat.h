// Debian's Abseil is built with ABSL_OPTION_USE_STD_STRING_VIEW 0, so
// absl::string_view is its own type and std::string_view (the interface's
// type) does not convert to it implicitly. Internal to metadata/.
#pragma once

#include <string_view>

#include "absl/strings/string_view.h"

namespace ledgerkv::metadata::internal {

inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

}  // namespace ledgerkv::metadata::internal
