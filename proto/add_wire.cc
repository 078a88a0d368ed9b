#include "proto/add_wire.h"

#include <climits>
#include <cstddef>
#include <optional>

#include "google/protobuf/stubs/common.h"

namespace ledgerkv::addwire {
namespace {

// Wire types (https://protobuf.dev/programming-guides/encoding/).
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kStartGroup = 3;
constexpr uint32_t kEndGroup = 4;
constexpr uint32_t kFixed32 = 5;

constexpr uint32_t Tag(uint32_t field, uint32_t wire_type) { return (field << 3) | wire_type; }

// The generated parser's nesting limit (messages and groups).
constexpr int kMaxDepth = 100;

// A cursor over one message's bytes, with the generated parser's rules.
class Reader {
 public:
  Reader(const char* begin, const char* end)
      : p_(reinterpret_cast<const uint8_t*>(begin)), end_(reinterpret_cast<const uint8_t*>(end)) {}

  bool AtEnd() const { return p_ == end_; }
  const char* pos() const { return reinterpret_cast<const char*>(p_); }

  // A varint of at most `max_bytes` bytes; bits beyond 64 are dropped, as
  // the generated parser drops them. Values take up to 10 bytes, tags and
  // lengths up to 5 (a longer one is refused even if padded with zeros).
  bool Varint(uint64_t* v, int max_bytes = 10) {
    uint64_t r = 0;
    for (int i = 0; i < max_bytes && p_ != end_; ++i) {
      const uint8_t b = *p_++;
      r |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) {
        *v = r;
        return true;
      }
    }
    return false;
  }

  // A tag: 0 < field number, at most 5 bytes, bits beyond 32 dropped.
  bool TagOf(uint32_t* tag) {
    uint64_t v = 0;
    if (!Varint(&v, 5)) return false;
    *tag = static_cast<uint32_t>(v);
    return (*tag >> 3) != 0;
  }

  // A length prefix (at most 5 bytes, below 2^31) and that many bytes.
  bool Bytes(std::string_view* out) {
    uint64_t n = 0;
    if (!Varint(&n, 5) || n > static_cast<uint64_t>(INT_MAX) ||
        n > static_cast<uint64_t>(end_ - p_)) {
      return false;
    }
    *out = std::string_view(pos(), static_cast<size_t>(n));
    p_ += n;
    return true;
  }

  // Steps over `n` bytes, if there are that many.
  bool SkipBytes(ptrdiff_t n) {
    if (end_ - p_ < n) return false;
    p_ += n;
    return true;
  }

  bool Fixed32(uint32_t* v) {
    const uint8_t* b = p_;
    if (!SkipBytes(4)) return false;
    *v = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
         static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
    return true;
  }

  // Skips the field `tag` introduced, as the generated parser skips an
  // unknown one. `depth`: nesting levels left.
  bool Skip(uint32_t tag, int depth) {
    uint64_t v = 0;
    std::string_view bytes;
    switch (tag & 7) {
      case kVarint:
        return Varint(&v);
      case kFixed64:
        return SkipBytes(8);
      case kLengthDelimited:
        return Bytes(&bytes);
      case kFixed32:
        return SkipBytes(4);
      case kStartGroup: {
        if (depth <= 0) return false;
        // Fields up to the end-group tag of the same field number.
        while (true) {
          uint32_t inner = 0;
          if (!TagOf(&inner)) return false;
          if ((inner & 7) == kEndGroup) return (inner >> 3) == (tag >> 3);
          if (!Skip(inner, depth - 1)) return false;
        }
      }
      default:  // an end-group tag that no group opened, or wire type 6 or 7
        return false;
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* const end_;
};

// Reads every field of the message `in` holds: `field(tag)` reads a known
// field (false: malformed) or returns nullopt for an unknown one, which is
// skipped with `depth` nesting levels left.
template <typename Field>
bool ReadFields(Reader& in, int depth, Field field) {
  while (!in.AtEnd()) {
    uint32_t tag = 0;
    if (!in.TagOf(&tag)) return false;
    const std::optional<bool> known = field(tag);
    if (known.has_value() ? !*known : !in.Skip(tag, depth)) return false;
  }
  return true;
}

// A signed field read as the generated parser reads it: 64 bits, two's
// complement.
bool SignedVarint(Reader& in, int64_t* out) {
  uint64_t v = 0;
  if (!in.Varint(&v)) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool ParseEntry(std::string_view bytes, EntryRef* e) {
  Reader in(bytes.data(), bytes.data() + bytes.size());
  return ReadFields(in, kMaxDepth - 1, [&](uint32_t tag) -> std::optional<bool> {
    switch (tag) {
      case Tag(1, kVarint):
        return in.Varint(&e->ledger_id);
      case Tag(2, kVarint):
        return SignedVarint(in, &e->entry_id);
      case Tag(3, kVarint):
        return SignedVarint(in, &e->lac);
      case Tag(4, kLengthDelimited):
        return in.Bytes(&e->payload);
      case Tag(5, kFixed32):
        return in.Fixed32(&e->checksum);
      default:
        return std::nullopt;
    }
  });
}

bool ParseResult(std::string_view bytes, AddResultRef* r) {
  Reader in(bytes.data(), bytes.data() + bytes.size());
  int64_t code = 0;
  const bool ok = ReadFields(in, kMaxDepth - 1, [&](uint32_t tag) -> std::optional<bool> {
    switch (tag) {
      case Tag(1, kVarint):
        return in.Varint(&r->ledger_id);
      case Tag(2, kVarint):
        return SignedVarint(in, &r->entry_id);
      case Tag(3, kVarint):
        return SignedVarint(in, &code);
      default:
        return std::nullopt;
    }
  });
  // An enum keeps the low 32 bits, as the generated parser keeps them.
  r->code = static_cast<int32_t>(code);
  return ok;
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

char* PutVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

// An enum is written as a sign-extended int32.
uint64_t EnumBits(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }

size_t ResultBodySize(const AddResultRef& r) {
  size_t n = 0;
  if (r.ledger_id != 0) n += 1 + VarintSize(r.ledger_id);
  if (r.entry_id != 0) n += 1 + VarintSize(static_cast<uint64_t>(r.entry_id));
  if (r.code != 0) n += 1 + VarintSize(EnumBits(r.code));
  return n;
}

}  // namespace

bool ParseAddRequest(std::string_view body, AddRequestRef* out) {
  out->expected_instance_id = {};
  out->recovery = false;
  out->entries.clear();
  if (body.size() > static_cast<size_t>(INT_MAX)) return false;
  Reader in(body.data(), body.data() + body.size());
  return ReadFields(in, kMaxDepth, [&](uint32_t tag) -> std::optional<bool> {
    uint64_t v = 0;
    std::string_view bytes;
    switch (tag) {
      case Tag(1, kLengthDelimited):
        // A proto3 string: the generated parser refuses one that is not
        // UTF-8, and so does this one, with the same check (exported by
        // libprotobuf, though in its internal namespace: a protobuf
        // upgrade that moved it would fail the build, not the check).
        return in.Bytes(&out->expected_instance_id) &&
               google::protobuf::internal::IsStructurallyValidUTF8(
                   out->expected_instance_id.data(),
                   static_cast<int>(out->expected_instance_id.size()));
      case Tag(2, kVarint):
        if (!in.Varint(&v)) return false;
        out->recovery = v != 0;
        return true;
      case Tag(3, kLengthDelimited):
        return in.Bytes(&bytes) && ParseEntry(bytes, &out->entries.emplace_back());
      default:
        return std::nullopt;
    }
  });
}

size_t AddResponseSize(absl::Span<const AddResultRef> results) {
  size_t n = 0;
  for (const AddResultRef& r : results) {
    const size_t body = ResultBodySize(r);
    n += 1 + VarintSize(body) + body;
  }
  return n;
}

void EncodeAddResponse(absl::Span<const AddResultRef> results, char* p) {
  for (const AddResultRef& r : results) {
    *p++ = static_cast<char>(Tag(1, kLengthDelimited));
    p = PutVarint(ResultBodySize(r), p);
    if (r.ledger_id != 0) {
      *p++ = static_cast<char>(Tag(1, kVarint));
      p = PutVarint(r.ledger_id, p);
    }
    if (r.entry_id != 0) {
      *p++ = static_cast<char>(Tag(2, kVarint));
      p = PutVarint(static_cast<uint64_t>(r.entry_id), p);
    }
    if (r.code != 0) {
      *p++ = static_cast<char>(Tag(3, kVarint));
      p = PutVarint(EnumBits(r.code), p);
    }
  }
}

bool ParseAddResponse(std::string_view body, std::vector<AddResultRef>* out) {
  if (body.size() > static_cast<size_t>(INT_MAX)) return false;
  const size_t before = out->size();
  Reader in(body.data(), body.data() + body.size());
  const bool ok = ReadFields(in, kMaxDepth, [&](uint32_t tag) -> std::optional<bool> {
    std::string_view bytes;
    if (tag != Tag(1, kLengthDelimited)) return std::nullopt;
    return in.Bytes(&bytes) && ParseResult(bytes, &out->emplace_back());
  });
  if (!ok) out->resize(before);
  return ok;
}

}  // namespace ledgerkv::addwire
