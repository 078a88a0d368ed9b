// add_wire.h must read and write exactly what the generated AddRequest and
// AddResponse code does: the add port's peers may be either.
#include "proto/add_wire.h"

#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/bookie.pb.h"

namespace ledgerkv::addwire {
namespace {

using bookie::v1::AddRequest;
using bookie::v1::AddResponse;

AddRequest RandomRequest(std::mt19937_64& rng) {
  AddRequest req;
  if (rng() % 2) req.set_expected_instance_id("bookie-instance-" + std::to_string(rng() % 1000));
  req.set_recovery(rng() % 3 == 0);
  const int n = static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    bookie::v1::Entry* e = req.add_entries();
    // Zeros (not written at all), small, and full-width values, both signs.
    const auto pick = [&rng]() -> uint64_t {
      switch (rng() % 4) {
        case 0: return 0;
        case 1: return rng() % 300;
        case 2: return static_cast<uint64_t>(-static_cast<int64_t>(rng() % 3 + 1));
        default: return rng();
      }
    };
    e->set_ledger_id(pick());
    e->set_entry_id(static_cast<int64_t>(pick()));
    e->set_lac(static_cast<int64_t>(pick()));
    e->set_checksum(static_cast<uint32_t>(pick()));
    std::string payload(rng() % 3 == 0 ? 0 : rng() % 200, '\0');
    for (char& c : payload) c = static_cast<char>(rng());
    e->set_payload(payload);
  }
  return req;
}

void ExpectSame(const AddRequest& want, const AddRequestRef& got) {
  EXPECT_EQ(got.expected_instance_id, want.expected_instance_id());
  EXPECT_EQ(got.recovery, want.recovery());
  ASSERT_EQ(got.entries.size(), static_cast<size_t>(want.entries_size()));
  for (int i = 0; i < want.entries_size(); ++i) {
    const bookie::v1::Entry& w = want.entries(i);
    const EntryRef& g = got.entries[static_cast<size_t>(i)];
    EXPECT_EQ(g.ledger_id, w.ledger_id()) << i;
    EXPECT_EQ(g.entry_id, w.entry_id()) << i;
    EXPECT_EQ(g.lac, w.lac()) << i;
    EXPECT_EQ(g.checksum, w.checksum()) << i;
    EXPECT_EQ(g.payload, w.payload()) << i;
  }
}

std::vector<AddResultRef> RandomResults(std::mt19937_64& rng) {
  std::vector<AddResultRef> results(rng() % 6);
  for (AddResultRef& r : results) {
    r.ledger_id = rng() % 2 ? rng() : rng() % 100;
    r.entry_id = static_cast<int64_t>(rng() % 3 == 0 ? rng() : rng() % 1000) - (rng() % 5 == 0);
    // Codes of this version, and values a newer peer could send (an enum
    // is a sign-extended int32 on the wire).
    static constexpr int32_t kOdd[] = {-1, INT32_MIN, INT32_MAX, 1000};
    r.code = rng() % 5 == 0 ? kOdd[rng() % 4] : static_cast<int32_t>(rng() % 12);
  }
  return results;
}

AddResponse ToMessage(const std::vector<AddResultRef>& results) {
  AddResponse resp;
  for (const AddResultRef& r : results) {
    bookie::v1::AddResult* m = resp.add_results();
    m->set_ledger_id(r.ledger_id);
    m->set_entry_id(r.entry_id);
    m->set_code(static_cast<bookie::v1::Code>(r.code));
  }
  return resp;
}

void ExpectSame(const AddResponse& want, const std::vector<AddResultRef>& got) {
  ASSERT_EQ(got.size(), static_cast<size_t>(want.results_size()));
  for (int i = 0; i < want.results_size(); ++i) {
    EXPECT_EQ(got[static_cast<size_t>(i)].ledger_id, want.results(i).ledger_id()) << i;
    EXPECT_EQ(got[static_cast<size_t>(i)].entry_id, want.results(i).entry_id()) << i;
    EXPECT_EQ(got[static_cast<size_t>(i)].code, static_cast<int32_t>(want.results(i).code())) << i;
  }
}

// `bytes` in a buffer of exactly its size (a std::string has a NUL after
// its end): under ASan a read past the body's end fails the test.
struct Exact {
  explicit Exact(const std::string& bytes) : buf(bytes.begin(), bytes.end()) {}
  std::string_view view() const { return std::string_view(buf.data(), buf.size()); }
  std::vector<char> buf;
};

// A serialized message damaged the ways a broken or hostile peer could:
// bytes changed, cut short, or inserted.
std::string Damage(std::string bytes, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < edits; ++i) {
    const size_t at = bytes.empty() ? 0 : rng() % bytes.size();
    switch (rng() % 4) {
      case 0:
        if (!bytes.empty()) bytes[at] = static_cast<char>(rng());
        break;
      case 1:
        bytes.resize(at);
        break;
      case 2:
        bytes.insert(at, 1, static_cast<char>(rng()));
        break;
      default:
        // A tag or length byte turned into one of the interesting ones.
        if (!bytes.empty()) {
          static constexpr char kBytes[] = {0x00, 0x04, 0x0b, 0x0c, 0x7f, '\x80', '\xff', 0x1a};
          bytes[at] = kBytes[rng() % sizeof(kBytes)];
        }
    }
  }
  return bytes;
}

TEST(AddWireTest, ARequestTheGeneratedCodeWritesIsReadFieldForField) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000; ++i) {
    const AddRequest want = RandomRequest(rng);
    const std::string bytes = want.SerializeAsString();
    AddRequestRef got;
    ASSERT_TRUE(ParseAddRequest(bytes, &got)) << i;
    ExpectSame(want, got);
    // The payload views point into the body, not into copies.
    for (const EntryRef& e : got.entries) {
      if (e.payload.empty()) continue;
      EXPECT_GE(e.payload.data(), bytes.data());
      EXPECT_LE(e.payload.data() + e.payload.size(), bytes.data() + bytes.size());
    }
  }
}

TEST(AddWireTest, AResponseIsWrittenByteForByteAsTheGeneratedCodeWritesIt) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 2000; ++i) {
    const std::vector<AddResultRef> results = RandomResults(rng);
    const AddResponse want = ToMessage(results);
    std::string ours(AddResponseSize(results), '\0');
    EncodeAddResponse(results, ours.data());
    EXPECT_EQ(ours, want.SerializeAsString()) << i;
    std::vector<AddResultRef> back;
    ASSERT_TRUE(ParseAddResponse(want.SerializeAsString(), &back)) << i;
    ExpectSame(want, back);
  }
}

TEST(AddWireTest, UnknownFieldsAndUnexpectedWireTypesAreSkippedAsTheGeneratedCodeDoes) {
  AddRequest want;
  want.set_expected_instance_id("abc");
  bookie::v1::Entry* e = want.add_entries();
  e->set_ledger_id(7);
  e->set_entry_id(3);
  e->set_payload("xyz");
  std::string bytes = want.SerializeAsString();
  // Field 9 varint, field 2 (recovery) as a length-delimited field, field
  // 10 as a group: all unknown to the generated parser.
  bytes += std::string("\x48\x05", 2);
  bytes += std::string("\x12\x02hi", 4);
  bytes += std::string("\x53\x08\x01\x54", 4);
  AddRequest generated;
  ASSERT_TRUE(generated.ParseFromString(bytes));
  AddRequestRef got;
  ASSERT_TRUE(ParseAddRequest(bytes, &got));
  ExpectSame(generated, got);
  EXPECT_FALSE(got.recovery);
}

// Damages 30 000 bodies `make` writes and parses each with the generated
// code (as `Message`) and with `parse` (into `Ours`): both must accept or
// refuse alike, and read alike. Returns how many were refused, or -1 at
// the first disagreement.
template <typename Message, typename Ours, typename Make, typename Parse>
int RefusedOfDamagedBodies(std::mt19937_64& rng, const char* what, Make make, Parse parse) {
  int refused = 0;
  for (int i = 0; i < 30000; ++i) {
    const std::string bytes = Damage(make(), rng);
    Message generated;
    const bool generated_ok = generated.ParseFromString(bytes);
    Ours got;
    const Exact exact(bytes);  // `got` may view it
    const bool ok = parse(exact.view(), &got);
    EXPECT_EQ(ok, generated_ok) << what << " " << i << " bytes " << testing::PrintToString(bytes);
    if (ok != generated_ok) return -1;
    if (ok) {
      ExpectSame(generated, got);
    } else {
      ++refused;
    }
  }
  return refused;
}

TEST(AddWireTest, WhatTheGeneratedCodeRefusesIsRefusedAndWhatItTakesIsReadTheSame) {
  std::mt19937_64 rng(3);
  const int requests = RefusedOfDamagedBodies<AddRequest, AddRequestRef>(
      rng, "request", [&] { return RandomRequest(rng).SerializeAsString(); },
      [](std::string_view body, AddRequestRef* out) { return ParseAddRequest(body, out); });
  // The damage produced both outcomes.
  EXPECT_GT(requests, 3000);
  EXPECT_LT(requests, 27000);
  const int responses = RefusedOfDamagedBodies<AddResponse, std::vector<AddResultRef>>(
      rng, "response", [&] { return ToMessage(RandomResults(rng)).SerializeAsString(); },
      [](std::string_view body, std::vector<AddResultRef>* out) {
        return ParseAddResponse(body, out);
      });
  EXPECT_GT(responses, 3000);
  EXPECT_LT(responses, 27000);
}

// The corners of the encoding, each decided as the generated parser
// decides it.
TEST(AddWireTest, EveryCornerOfTheEncodingIsDecidedAsTheGeneratedCodeDecidesIt) {
  const auto bytes = [](std::initializer_list<int> b) {
    std::string s;
    for (int c : b) s.push_back(static_cast<char>(c));
    return s;
  };
  const auto group_nest = [](int depth) {
    // Unknown field 15 as `depth` nested groups.
    const size_t n = static_cast<size_t>(depth);
    return std::string(n, '\x7b') + std::string(n, '\x7c');
  };
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"empty", ""},
      {"recovery as a 10-byte varint",
       bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})},
      {"an 11-byte varint",
       bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})},
      {"a 10-byte varint with high bits",
       bytes({0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})},
      {"a 5-byte tag", bytes({0x90, 0x80, 0x80, 0x80, 0x00, 0x01})},
      {"a 5-byte tag with bits past 32", bytes({0x90, 0x80, 0x80, 0x80, 0x70, 0x01})},
      {"a 6-byte tag", bytes({0x90, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01})},
      {"field number 0", bytes({0x00})},
      {"field number 0, varint", bytes({0x02, 0x00})},
      {"a 5-byte length", bytes({0x0a, 0x82, 0x80, 0x80, 0x80, 0x00, 'a', 'b'})},
      {"a 6-byte length", bytes({0x0a, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 'a', 'b'})},
      {"a length past the end", bytes({0x0a, 0x05, 'a', 'b'})},
      {"a length of 2^31", bytes({0x0a, 0x80, 0x80, 0x80, 0x80, 0x08})},
      {"wire type 6", bytes({0x7e, 0x00})},
      {"wire type 7", bytes({0x7f, 0x00})},
      {"a stray end group", bytes({0x7c})},
      {"a group", bytes({0x7b, 0x08, 0x01, 0x7c})},
      {"a group ended by another field's end", bytes({0x7b, 0x08, 0x01, 0x84, 0x01})},
      {"an unended group", bytes({0x7b, 0x08, 0x01})},
      {"groups 98 deep", group_nest(98)},
      {"groups 99 deep", group_nest(99)},
      {"groups 100 deep", group_nest(100)},
      {"groups 101 deep", group_nest(101)},
      // Entry lengths 198 and 200 as 2-byte varints.
      {"an entry with groups 99 deep", bytes({0x1a, 0xc6, 0x01}) + group_nest(99)},
      {"an entry with groups 100 deep", bytes({0x1a, 0xc8, 0x01}) + group_nest(100)},
      {"an entry with a group", bytes({0x1a, 0x04, 0x7b, 0x08, 0x01, 0x7c})},
      {"an entry with a stray end group", bytes({0x1a, 0x01, 0x7c})},
      {"an entry with a short checksum", bytes({0x1a, 0x04, 0x2d, 0x01, 0x02, 0x03})},
      {"an entry with a fixed64 field", bytes({0x1a, 0x09, 0x31, 1, 2, 3, 4, 5, 6, 7, 8})},
      {"an entry whose payload overruns it",
       bytes({0x1a, 0x03, 0x22, 0x05, 'a', 'b', 'c', 'd', 'e'})},
      {"checksum as a varint", bytes({0x1a, 0x02, 0x28, 0x07})},
      {"a tag cut short", bytes({0x90})},
      {"a fixed64 field", bytes({0x79, 1, 2, 3, 4, 5, 6, 7, 8})},
      {"a fixed64 field cut short", bytes({0x79, 1, 2, 3, 4, 5, 6, 7})},
      {"a fixed32 field", bytes({0x7d, 1, 2, 3, 4})},
      {"a fixed32 field cut short", bytes({0x7d, 1, 2, 3})},
      {"a varint field cut short", bytes({0x78, 0x80})},
  };
  for (const auto& [name, body] : cases) {
    AddRequest generated;
    AddRequestRef got;
    const bool generated_ok = generated.ParseFromString(body);
    const Exact exact(body);
    EXPECT_EQ(ParseAddRequest(exact.view(), &got), generated_ok) << name;
    if (generated_ok) ExpectSame(generated, got);
    AddResponse generated_response;
    std::vector<AddResultRef> results;
    const bool response_ok = generated_response.ParseFromString(body);
    EXPECT_EQ(ParseAddResponse(exact.view(), &results), response_ok)
        << name << " (as a response)";
    if (response_ok) ExpectSame(generated_response, results);
  }
}

// A reply that fails to parse part-way leaves the caller's results as they
// were: nothing half-read is appended.
TEST(AddWireTest, AReplyRefusedPartWayAppendsNothing) {
  std::vector<AddResultRef> results = {{1, 2, 0}};
  std::string bytes = ToMessage({{7, 8, 0}, {7, 9, 0}}).SerializeAsString();
  bytes += std::string("\x0a\x05", 2);  // a third result whose length runs past the end
  EXPECT_FALSE(ParseAddResponse(bytes, &results));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].ledger_id, 1u);
}

TEST(AddWireTest, AnInstanceIdThatIsNotUtf8IsRefusedAsTheGeneratedCodeRefusesIt) {
  AddRequest req;
  req.set_expected_instance_id("ok");
  std::string bytes = req.SerializeAsString();
  bytes[2] = '\xc3';  // a lead byte with no continuation
  AddRequest generated;
  EXPECT_FALSE(generated.ParseFromString(bytes));
  AddRequestRef got;
  EXPECT_FALSE(ParseAddRequest(bytes, &got));
}

}  // namespace
}  // namespace ledgerkv::addwire
