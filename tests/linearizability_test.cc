#include "tests/linearizability.h"

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ledgerkv::testing {
namespace {

using ::testing::HasSubstr;

Operation Read(int client, const std::string& key, int64_t invoke, int64_t complete,
               const Value& observed) {
  Operation op;
  op.client = client;
  op.key = key;
  op.kind = OpKind::kRead;
  op.invoke_ns = invoke;
  op.complete_ns = complete;
  op.outcome = Outcome::kOk;
  op.observed = observed;
  return op;
}

Operation Write(int client, const std::string& key, const std::string& value, int64_t invoke,
                int64_t complete, Outcome outcome = Outcome::kOk) {
  Operation op;
  op.client = client;
  op.key = key;
  op.kind = OpKind::kWrite;
  op.value = value;
  op.invoke_ns = invoke;
  op.complete_ns = complete;
  op.outcome = outcome;
  return op;
}

Operation Cas(int client, const std::string& key, const Value& expected,
              const std::string& new_value, bool succeeded, int64_t invoke, int64_t complete,
              Outcome outcome = Outcome::kOk) {
  Operation op = Write(client, key, new_value, invoke, complete, outcome);
  op.kind = OpKind::kCas;
  op.expected = expected;
  op.cas_succeeded = succeeded;
  return op;
}

Operation Delete(int client, const std::string& key, int64_t invoke, int64_t complete) {
  Operation op = Write(client, key, "", invoke, complete);
  op.kind = OpKind::kDelete;
  return op;
}

Operation Unknown(Operation op) {
  op.outcome = Outcome::kUnknown;
  op.complete_ns = 0;
  return op;
}

// Failure messages show the checker's own explanation.
void ExpectLinearizable(const std::vector<Operation>& h) {
  const CheckResult r = CheckHistory(h, absl::Seconds(10));
  EXPECT_TRUE(r.linearizable) << r.explanation;
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(r.explanation.empty()) << r.explanation;
}

CheckResult ExpectViolation(const std::vector<Operation>& h, const std::string& key) {
  const CheckResult r = CheckHistory(h, absl::Seconds(10));
  EXPECT_FALSE(r.linearizable);
  EXPECT_FALSE(r.timed_out) << r.explanation;
  EXPECT_EQ(r.key, key) << r.explanation;
  EXPECT_THAT(r.explanation, HasSubstr(absl::StrCat("\"", key, "\""))) << r.explanation;
  return r;
}

TEST(LinearizabilityTest, SequentialHistoryOfEveryKindIsLinearizable) {
  ExpectLinearizable({
      Read(1, "k", 0, 1, std::nullopt),
      Cas(1, "k", std::nullopt, "a", true, 2, 3),
      Read(2, "k", 4, 5, "a"),
      Cas(2, "k", "x", "b", false, 6, 7),
      Cas(1, "k", "a", "b", true, 8, 9),
      Write(2, "k", "c", 10, 11),
      Read(1, "k", 12, 13, "c"),
      Delete(2, "k", 14, 15),
      Read(1, "k", 16, 17, std::nullopt),
      Cas(1, "k", "c", "d", false, 18, 19),
  });
}

TEST(LinearizabilityTest, StaleReadAfterCompletedWriteIsAViolationNamingTheKey) {
  // Key "a" is fine and checked first; the violation is on "k".
  const CheckResult r = ExpectViolation(
      {
          Write(1, "a", "x", 0, 10),
          Read(2, "a", 20, 30, "x"),
          Write(1, "k", "v1", 0, 10),
          Write(1, "k", "v2", 20, 30),
          Read(2, "k", 40, 50, "v1"),
      },
      "k");
  EXPECT_THAT(r.explanation, HasSubstr("observed \"v1\" but the register holds \"v2\""));
}

TEST(LinearizabilityTest, ReadConcurrentWithWriteMayTakeEitherOrder) {
  for (const char* seen : {"old", "new"}) {
    SCOPED_TRACE(seen);
    ExpectLinearizable({
        Write(1, "k", "old", 0, 5),
        Write(1, "k", "new", 10, 50),
        Read(2, "k", 20, 30, seen),
        Read(3, "k", 25, 40, seen),
    });
  }
  // Once one read saw the new value, a read that starts after it cannot see the old one.
  ExpectViolation(
      {
          Write(1, "k", "old", 0, 5),
          Write(1, "k", "new", 10, 50),
          Read(2, "k", 20, 30, "new"),
          Read(3, "k", 35, 40, "old"),
      },
      "k");
}

TEST(LinearizabilityTest, CasSucceedsOnlyWhenTheValueMatches) {
  ExpectLinearizable({
      Write(1, "k", "a", 0, 1),
      Cas(2, "k", "a", "b", true, 2, 3),
      Cas(3, "k", "a", "c", false, 4, 5),
      Read(1, "k", 6, 7, "b"),
  });
  // Reported success though "k" held "a", not "x".
  const CheckResult r = ExpectViolation(
      {
          Write(1, "k", "x", 0, 1),
          Write(1, "k", "a", 2, 3),
          Cas(2, "k", "x", "b", true, 4, 5),
      },
      "k");
  EXPECT_THAT(r.explanation, HasSubstr("reported success"));
  // Reported failure though the value matched.
  ExpectViolation(
      {
          Write(1, "k", "a", 0, 1),
          Cas(2, "k", "a", "b", false, 2, 3),
      },
      "k");
  // Compare against "absent".
  ExpectViolation(
      {
          Write(1, "k", "a", 0, 1),
          Cas(2, "k", std::nullopt, "b", true, 2, 3),
      },
      "k");
  // A successful CAS must be visible to later reads.
  ExpectViolation(
      {
          Write(1, "k", "a", 0, 1),
          Cas(2, "k", "a", "b", true, 2, 3),
          Read(1, "k", 4, 5, "a"),
      },
      "k");
}

TEST(LinearizabilityTest, ConcurrentCasesDecideTheOrder) {
  // Two concurrent CAS from "a": exactly one may win.
  ExpectLinearizable({
      Write(1, "k", "a", 0, 1),
      Cas(2, "k", "a", "b", true, 10, 20),
      Cas(3, "k", "a", "c", false, 11, 21),
      Read(1, "k", 30, 31, "b"),
  });
  ExpectViolation(
      {
          Write(1, "k", "a", 0, 1),
          Cas(2, "k", "a", "b", true, 10, 20),
          Cas(3, "k", "a", "c", true, 11, 21),
      },
      "k");
}

TEST(LinearizabilityTest, UnknownWriteMayTakeEffectAtAnyTimeAfterItsInvoke) {
  const Operation lost = Unknown(Write(2, "k", "b", 20, 0));
  // Observed later, even long after, and after an older value was seen again.
  ExpectLinearizable({Write(1, "k", "a", 0, 10), lost, Read(1, "k", 100, 110, "b")});
  ExpectLinearizable({Write(1, "k", "a", 0, 10), lost, Read(1, "k", 100, 110, "a"),
                      Read(1, "k", 500, 510, "b"), Read(3, "k", 600, 610, "b")});
  // Never observed: it may never have happened.
  ExpectLinearizable({Write(1, "k", "a", 0, 10), lost, Read(1, "k", 100, 110, "a")});
  // But not before its invoke, and it cannot be undone once seen.
  ExpectViolation({Read(1, "k", 0, 10, "b"), lost}, "k");
  ExpectViolation({Write(1, "k", "a", 0, 10), lost, Read(1, "k", 100, 110, "b"),
                   Read(1, "k", 200, 210, "a")},
                  "k");
}

TEST(LinearizabilityTest, UnknownCasAppliesOnlyIfItsCompareHolds) {
  const Operation maybe = Unknown(Cas(2, "k", "a", "b", false, 20, 0));
  ExpectLinearizable({Write(1, "k", "a", 0, 10), maybe, Read(1, "k", 100, 110, "b")});
  // "k" held "x" for the whole time the CAS could have run.
  ExpectViolation({Write(1, "k", "x", 0, 10), maybe, Read(1, "k", 100, 110, "b")}, "k");
}

TEST(LinearizabilityTest, UnknownReadsAreIgnored) {
  Operation read = Unknown(Read(1, "k", 0, 0, "never-written"));
  ExpectLinearizable({read, Write(1, "k", "a", 5, 10)});
}

TEST(LinearizabilityTest, ReadOfAValueNeverWrittenIsAViolation) {
  const CheckResult r = ExpectViolation(
      {Write(1, "k", "a", 0, 10), Read(2, "k", 20, 30, "ghost")}, "k");
  EXPECT_THAT(r.explanation, HasSubstr("ghost"));
}

TEST(LinearizabilityTest, ReadOfAFailedWriteIsAViolation) {
  const std::vector<Operation> h = {Write(1, "k", "a", 0, 10),
                                    Write(2, "k", "b", 20, 30, Outcome::kFailed),
                                    Read(1, "k", 40, 50, "b")};
  ExpectViolation(h, "k");
  // The same with the outcome unknown is fine: only kFailed proves absence.
  std::vector<Operation> unknown = h;
  unknown[1] = Unknown(unknown[1]);
  ExpectLinearizable(unknown);
}

TEST(LinearizabilityTest, DeleteMakesTheKeyAbsent) {
  ExpectLinearizable({Write(1, "k", "a", 0, 10), Delete(2, "k", 20, 30),
                      Read(1, "k", 40, 50, std::nullopt)});
  ExpectViolation({Write(1, "k", "a", 0, 10), Delete(2, "k", 20, 30), Read(1, "k", 40, 50, "a")},
                  "k");
}

TEST(LinearizabilityTest, MalformedHistoryIsNotLinearizable) {
  const CheckResult r = CheckHistory({Write(1, "k", "a", 10, 5)});
  EXPECT_FALSE(r.linearizable);
  EXPECT_THAT(r.explanation, HasSubstr("malformed"));
}

TEST(LinearizabilityTest, ExhaustedBudgetIsReportedAsTimedOutNotLinearizable) {
  // 20 concurrent writes then a read of "absent": no order works, and the
  // search has to try every subset of the writes to prove it.
  std::vector<Operation> h;
  for (int i = 0; i < 20; ++i) h.push_back(Write(i, "k", absl::StrCat("v", i), 0, 100));
  h.push_back(Read(99, "k", 200, 210, std::nullopt));
  const CheckResult r = CheckHistory(h, absl::Milliseconds(50));
  EXPECT_FALSE(r.linearizable);
  EXPECT_TRUE(r.timed_out);
  EXPECT_THAT(r.explanation, HasSubstr("budget"));
  EXPECT_THAT(r.explanation, HasSubstr("deepest dead end"));
  EXPECT_THAT(r.explanation, HasSubstr("c99 read(\"k\") -> absent"));
}

// A sequential register per key run at strictly increasing linearization
// points; each op's [invoke, complete] window is drawn around its point,
// and each client's ops do not overlap. Linearizable by construction.
struct SimOptions {
  int clients = 5;
  int keys = 3;
  int ops = 600;
  int64_t max_skew = 60;  // how far invoke/complete may lie from the point
  int unknown_percent = 5;
  int failed_percent = 5;
};

std::vector<Operation> Simulate(uint64_t seed, const SimOptions& o) {
  std::mt19937_64 rng(seed);
  auto rand = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  std::map<std::string, Value> state;
  std::map<std::string, std::vector<Value>> written;
  std::vector<int64_t> free_at(o.clients, 0);
  std::vector<Operation> h;
  int64_t t = 0;
  while (static_cast<int>(h.size()) < o.ops) {
    t += 1 + rand(10);
    std::vector<int> idle;
    for (int c = 0; c < o.clients; ++c) {
      if (free_at[c] <= t) idle.push_back(c);
    }
    if (idle.empty()) continue;
    const int c = idle[rand(static_cast<int64_t>(idle.size()))];
    Operation op;
    op.client = c;
    op.key = absl::StrCat("k", rand(o.keys));
    op.invoke_ns = t - rand(std::min(o.max_skew, t - free_at[c]) + 1);
    op.complete_ns = t + rand(o.max_skew + 1);
    free_at[c] = op.complete_ns + 1;
    op.value = absl::StrCat("c", c, "-", h.size());
    const int64_t kind = rand(10);
    op.kind = kind < 4 ? OpKind::kRead
              : kind < 7 ? OpKind::kWrite
              : kind < 9 ? OpKind::kCas
                         : OpKind::kDelete;
    if (op.kind == OpKind::kCas) {
      const std::vector<Value>& w = written[op.key];
      op.expected = (rand(2) == 0 || w.empty()) ? state[op.key] : w[rand(static_cast<int64_t>(w.size()))];
      if (rand(5) == 0) op.expected = std::nullopt;
    }
    const int64_t fate = rand(100);
    op.outcome = fate < o.unknown_percent ? Outcome::kUnknown
                 : fate < o.unknown_percent + o.failed_percent ? Outcome::kFailed
                                                               : Outcome::kOk;
    // A failed op never applies; an unknown one applies or not.
    const bool applies = op.outcome == Outcome::kOk ||
                         (op.outcome == Outcome::kUnknown && rand(2) == 0);
    Value& v = state[op.key];
    if (applies) {
      switch (op.kind) {
        case OpKind::kRead:
          op.observed = v;
          break;
        case OpKind::kWrite:
          v = op.value;
          break;
        case OpKind::kCas:
          op.cas_succeeded = v == op.expected;
          if (op.cas_succeeded) v = op.value;
          break;
        case OpKind::kDelete:
          v = std::nullopt;
          break;
      }
    }
    if (op.kind == OpKind::kWrite || op.kind == OpKind::kCas) written[op.key].push_back(op.value);
    if (op.outcome != Outcome::kOk) {
      op.observed.reset();
      op.cas_succeeded = false;
    }
    h.push_back(op);
  }
  return h;
}

bool DefinitelyWrites(const Operation& op) {
  return op.outcome == Outcome::kOk &&
         (op.kind == OpKind::kWrite || op.kind == OpKind::kDelete ||
          (op.kind == OpKind::kCas && op.cas_succeeded));
}

// Changes one kOk read so that no linearization can exist (values are
// unique): either it observes a value overwritten by a definite write that
// completed before the read began (stale), or a value whose write began
// only after the read completed (from the future). Returns the read's index.
int Corrupt(std::vector<Operation>& h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> reads;
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i].kind == OpKind::kRead && h[i].outcome == Outcome::kOk) reads.push_back(i);
  }
  std::shuffle(reads.begin(), reads.end(), rng);
  const bool stale = seed % 2 == 0;
  for (int r : reads) {
    Operation& read = h[r];
    for (size_t w1 = 0; w1 < h.size(); ++w1) {
      const Operation& a = h[w1];
      if (a.key != read.key || a.outcome == Outcome::kFailed) continue;
      if (a.kind != OpKind::kWrite && a.kind != OpKind::kCas) continue;
      if (read.observed == a.value) continue;
      if (!stale) {
        if (a.invoke_ns > read.complete_ns) {
          read.observed = a.value;
          return r;
        }
        continue;
      }
      if (!DefinitelyWrites(a) || a.complete_ns >= read.invoke_ns) continue;
      for (const Operation& b : h) {
        if (b.key == read.key && DefinitelyWrites(b) && a.complete_ns < b.invoke_ns &&
            b.complete_ns < read.invoke_ns) {
          read.observed = a.value;
          return r;
        }
      }
    }
  }
  return -1;
}

TEST(LinearizabilityTest, SearchBacktracksOverOpsItAlreadyLinearized) {
  // The search first orders a before b, runs the failed CAS, then meets the
  // read of "a" and must undo all three to try b before a.
  ExpectLinearizable({
      Write(1, "k", "a", 0, 100),
      Write(2, "k", "b", 0, 100),
      Cas(3, "k", "z", "c", false, 110, 120),
      Read(3, "k", 130, 140, "a"),
  });
}

TEST(LinearizabilityTest, RandomCorrectHistoriesPassAndOneCorruptedReadFails) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::vector<Operation> h = Simulate(seed, SimOptions{});
    ExpectLinearizable(h);
    const int r = Corrupt(h, seed);
    ASSERT_GE(r, 0) << "no read to corrupt";
    const CheckResult result = ExpectViolation(h, h[r].key);
    EXPECT_THAT(result.explanation, HasSubstr(FormatOperation(h[r]))) << result.explanation;
  }
}

TEST(LinearizabilityTest, TwoThousandOpsOnOneKeyWithEightClientsFinish) {
  SimOptions o;
  o.clients = 8;
  o.keys = 1;
  o.ops = 2000;
  o.max_skew = 80;
  const std::vector<Operation> h = Simulate(42, o);
  const absl::Time start = absl::Now();
  const CheckResult r = CheckHistory(h, absl::Seconds(60));
  EXPECT_TRUE(r.linearizable) << r.explanation;
  EXPECT_FALSE(r.timed_out);
  std::printf("checked %zu ops in %s\n", h.size(),
              absl::FormatDuration(absl::Now() - start).c_str());
}

// A real linearizable object (a mutex-guarded map) driven by threads through
// the recorder; then a stale answer recorded with the same clock is caught.
TEST(LinearizabilityTest, RecorderHistoryOfConcurrentClientsIsChecked) {
  HistoryRecorder rec;
  absl::Mutex mu;
  std::map<std::string, std::string> kv;
  std::vector<std::thread> threads;
  for (int c = 0; c < 4; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 rng(c);
      for (int i = 0; i < 300; ++i) {
        const std::string key = absl::StrCat("k", rng() % 2);
        const std::string value = absl::StrCat("c", c, "-", i);
        if (rng() % 2 == 0) {
          const int64_t op = rec.InvokeRead(c, key);
          Value seen;
          {
            absl::MutexLock lock(&mu);
            if (auto it = kv.find(key); it != kv.end()) seen = it->second;
          }
          rec.Complete(op, Outcome::kOk, seen);
        } else if (rng() % 2 == 0) {
          const int64_t op = rec.InvokeWrite(c, key, value);
          {
            absl::MutexLock lock(&mu);
            kv[key] = value;
          }
          rec.Complete(op, Outcome::kOk);
        } else {
          const int64_t op = rec.InvokeCas(c, key, std::nullopt, value);
          bool won;
          {
            absl::MutexLock lock(&mu);
            won = kv.emplace(key, value).second;
          }
          rec.Complete(op, Outcome::kOk, std::nullopt, won);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<Operation> h = rec.History();
  ASSERT_EQ(h.size(), 1200u);
  ExpectLinearizable(h);

  // Every op above completed before "last" is written, so reading any
  // earlier value of k0 afterwards is stale.
  auto earlier = std::find_if(h.begin(), h.end(), [](const Operation& op) {
    return op.key == "k0" && op.kind == OpKind::kWrite;
  });
  ASSERT_NE(earlier, h.end());
  const int64_t w = rec.InvokeWrite(9, "k0", "last");
  rec.Complete(w, Outcome::kOk);
  const int64_t r = rec.InvokeRead(9, "k0");
  rec.Complete(r, Outcome::kOk, earlier->value);
  ExpectViolation(rec.History(), "k0");
}

TEST(LinearizabilityTest, FormatShowsArgumentsResultsAndOutcome) {
  EXPECT_EQ(FormatOperation(Cas(2, "k", "a", "b", true, 1000, 2000)),
            "c2 cas(\"k\", \"a\" -> \"b\") -> true ok [1us, 2us]");
  EXPECT_EQ(FormatOperation(Read(1, "k", 5, 7, std::nullopt)),
            "c1 read(\"k\") -> absent ok [5ns, 7ns]");
  EXPECT_EQ(FormatOperation(Unknown(Write(3, "k", "v", 5, 0))),
            "c3 write(\"k\", \"v\") UNKNOWN [5ns, ?]");
  const std::string window = FormatWindow(
      {Write(1, "k", "a", 0, 10), Write(1, "j", "b", 0, 10), Read(1, "k", 50, 60, "a")}, "k", 5,
      20);
  EXPECT_THAT(window, HasSubstr("write(\"k\", \"a\")"));
  EXPECT_THAT(window, ::testing::Not(HasSubstr("\"j\"")));
  EXPECT_THAT(window, ::testing::Not(HasSubstr("read")));
}

}  // namespace
}  // namespace ledgerkv::testing
