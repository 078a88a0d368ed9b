// The `ledgerkv bookie` binary: ready line, serving, SIGTERM. (Crash and
// restart suites over real processes live in tests/.)
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/entry_checksum.h"
#include "base/small_tmpfs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ledger/bookie/test_util.h"
#include "proto/bookie.grpc.pb.h"

namespace ledgerkv::bookie {
namespace {

std::string BinaryPath() {
  const char* dir = std::getenv("LEDGERKV_BIN_DIR");
  return dir == nullptr ? "" : std::string(dir) + "/kv_server/ledgerkv";
}

class BookieProcess {
 public:
  // Starts `ledgerkv bookie` and waits for its ready line.
  BookieProcess(const std::string& data_dir, const std::string& listen,
                const std::vector<std::string>& extra_flags = {}) {
    // Everything allocated before the fork.
    const std::string binary = BinaryPath();
    std::vector<std::string> args = {"ledgerkv", "bookie", "--data-dir", data_dir, "--listen",
                                     listen};
    args.insert(args.end(), extra_flags.begin(), extra_flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = out[0];
    // Read the first line (with a deadline).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (line_.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) break;
      line_.append(buf, static_cast<size_t>(n));
    }
  }
  ~BookieProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
  }
  const std::string& line() const { return line_; }
  // The ready line's words: "bookie <id> listening on <addr> instance <id>"
  // (7 when the bookie started).
  std::vector<std::string> words() const {
    return absl::StrSplit(line_, absl::ByAnyChar(" \n"), absl::SkipEmpty());
  }

  // Sends `sig` and returns the wait status.
  int Stop(int sig) {
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string line_;
};

std::unique_ptr<v1::Bookie::Stub> StubFor(const std::string& address) {
  return v1::Bookie::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

TEST(BookieBinaryTest, PrintsReadyLineServesAndStopsOnSigterm) {
  if (BinaryPath().empty() || access(BinaryPath().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "ledgerkv binary not built (LEDGERKV_BIN_DIR unset)";
  }
  const std::string dir = testing::NewTempDir("binary");
  std::string address;
  std::string instance;
  {
    BookieProcess p(dir, "127.0.0.1:0");
    // "bookie <id> listening on <addr> instance <instance id>\n"
    const std::vector<std::string> words = p.words();
    ASSERT_EQ(words.size(), 7u) << p.line();
    EXPECT_EQ(words[0], "bookie");
    EXPECT_EQ(words[2], "listening");
    address = words[4];
    EXPECT_EQ(words[1], address);  // the id defaults to the address
    instance = words[6];
    EXPECT_EQ(instance.size(), 32u);

    auto stub = StubFor(address);
    v1::AddRequest req;
    req.set_expected_instance_id(instance);
    v1::Entry* e = req.add_entries();
    e->set_ledger_id(9);
    e->set_lac(-1);
    e->set_payload("kept");
    e->set_checksum(EntryChecksum(9, 0, -1, "kept"));
    v1::AddResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ASSERT_TRUE(stub->Add(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.results(0).code(), v1::OK);

    const int status = p.Stop(SIGTERM);
    EXPECT_TRUE(WIFEXITED(status)) << status;
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  // Same directory: same instance, the entry is there.
  BookieProcess again(dir, "127.0.0.1:0");
  const std::vector<std::string> words = again.words();
  ASSERT_EQ(words.size(), 7u) << again.line();
  EXPECT_EQ(words[6], instance);
  auto stub = StubFor(words[4]);
  v1::ReadRequest req;
  req.set_expected_instance_id(instance);
  req.set_ledger_id(9);
  req.set_count(1);
  v1::ReadResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(stub->Read(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.code(), v1::OK);
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).entry().payload(), "kept");
}

// What an operator sees when a bookie's disk fills up: adds answered
// READ_ONLY (never OK), the reason in GetInfo, reads still served, a clean
// exit on SIGTERM, and every acknowledged entry back after a restart once
// space is freed. (Before base/rocksdb_logger.h the process aborted on
// SIGTERM here: RocksDB's LOG file had hit the full disk.)
TEST(BookieBinaryTest, FullDiskIsReadOnlyVisiblyAndStopsCleanly) {
  if (BinaryPath().empty() || access(BinaryPath().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "ledgerkv binary not built (LEDGERKV_BIN_DIR unset)";
  }
  const std::string mnt = testing::NewTempDir("binary_fullfs");
  SmallTmpfs fs;
  if (absl::Status m = fs.Mount(mnt, 32); !m.ok()) {
    GTEST_SKIP() << m << " (needs CAP_SYS_ADMIN, as root in CI)";
  }
  const std::string dir = mnt + "/bookie";
  const std::string payload(2048, 'p');
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(10); };
  auto add = [&](v1::Bookie::Stub& stub, const std::string& instance, int64_t entry) {
    v1::AddRequest req;
    req.set_expected_instance_id(instance);
    v1::Entry* e = req.add_entries();
    e->set_ledger_id(9);
    e->set_entry_id(entry);
    e->set_lac(entry - 1);
    e->set_payload(payload);
    e->set_checksum(EntryChecksum(9, entry, entry - 1, payload));
    v1::AddResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    grpc::Status st = stub.Add(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return st.ok() && resp.results_size() == 1 ? resp.results(0).code() : v1::CODE_UNSPECIFIED;
  };
  // Reads entries [0, count) of ledger 9 and checks each is OK with the payload.
  auto read_all = [&](v1::Bookie::Stub& stub, const std::string& instance, int64_t count) {
    for (int64_t first = 0; first < count;) {
      v1::ReadRequest req;
      req.set_expected_instance_id(instance);
      req.set_ledger_id(9);
      req.set_first_entry_id(first);
      req.set_count(static_cast<int32_t>(std::min<int64_t>(count - first, 256)));
      v1::ReadResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(deadline());
      ASSERT_TRUE(stub.Read(&ctx, req, &resp).ok());
      ASSERT_EQ(resp.code(), v1::OK) << "from entry " << first;
      ASSERT_GT(resp.results_size(), 0);
      for (const v1::ReadResult& r : resp.results()) {
        ASSERT_EQ(r.entry_id(), first) << "entry " << first;
        ASSERT_EQ(r.code(), v1::OK) << "entry " << first;
        ASSERT_EQ(r.entry().payload(), payload) << "entry " << first;
        ++first;
      }
    }
  };

  int64_t acked = 0;  // entries [0, acked) were acknowledged
  std::string instance;
  // The disk watermark (on by default) would stop adds first: off, to
  // reach ENOSPC, as when another process takes the last bytes.
  const std::vector<std::string> no_watermark = {"--disk-high-watermark", "100"};
  {
    BookieProcess p(dir, "127.0.0.1:0", no_watermark);
    const std::vector<std::string> words = p.words();
    ASSERT_EQ(words.size(), 7u) << p.line();
    instance = words[6];
    auto stub = StubFor(words[4]);
    for (; acked < 200; ++acked) ASSERT_EQ(add(*stub, instance, acked), v1::OK);
    fs.WaitForQuiet();  // the journal filler is done
    if (absl::Status f = fs.FillLeaving(6 << 20); !f.ok()) FAIL() << f;
    v1::Code code = v1::OK;
    while (acked < 20000 && (code = add(*stub, instance, acked)) == v1::OK) ++acked;
    ASSERT_EQ(code, v1::READ_ONLY) << "after " << acked << " acknowledged adds";
    EXPECT_EQ(add(*stub, instance, acked), v1::READ_ONLY);

    v1::GetInfoResponse info;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline());
    ASSERT_TRUE(stub->GetInfo(&ctx, v1::GetInfoRequest(), &info).ok());
    EXPECT_EQ(info.state(), v1::READ_ONLY_STATE);
    EXPECT_NE(info.read_only_reason().find("No space"), std::string::npos)
        << info.read_only_reason();
    read_all(*stub, instance, acked);

    const int status = p.Stop(SIGTERM);
    ASSERT_TRUE(WIFEXITED(status)) << "wait status " << status
                                   << (WIFSIGNALED(status)
                                           ? absl::StrCat(" (signal ", WTERMSIG(status), ")")
                                           : "");
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }

  ASSERT_TRUE(fs.Free().ok());
  BookieProcess again(dir, "127.0.0.1:0", no_watermark);
  const std::vector<std::string> words = again.words();
  ASSERT_EQ(words.size(), 7u) << again.line();
  EXPECT_EQ(words[6], instance);
  auto stub = StubFor(words[4]);
  read_all(*stub, instance, acked);
  EXPECT_EQ(add(*stub, instance, acked), v1::OK);
}

// docs/cluster.md, "Addresses: listen and advertise", through the flags:
// a bookie with --metadata and a server on 0.0.0.0 refuse to start without
// --advertise, saying so, before they touch their data dir or etcd; a
// bookie with --advertise registers and serves at the published address.
TEST(BookieBinaryTest, AWildcardListenNeedsAnAdvertisedAddressForBookiesAndServers) {
  if (BinaryPath().empty() || access(BinaryPath().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "ledgerkv binary not built (LEDGERKV_BIN_DIR unset)";
  }
  const std::string dir = testing::NewTempDir("binary_advertise");
  const std::string meta = testing::NewTempDir("binary_advertise_meta");
  const std::string err = dir + ".stderr";
  // Bounded: a process that wrongly starts serves until killed (exit 124).
  auto run = [&](const std::string& args) {
    const int status =
        std::system(("timeout 20 " + BinaryPath() + " " + args + " >/dev/null 2>" + err).c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  auto stderr_text = [&] {
    std::ifstream in(err);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  EXPECT_EQ(run(absl::StrCat("bookie --data-dir ", dir, " --listen 0.0.0.0:0 --metadata embedded://",
                             meta)),
            1);
  EXPECT_NE(stderr_text().find("--advertise"), std::string::npos) << stderr_text();
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "the refused bookie wrote to its data dir";
  // Nothing listens on port 1: the server is refused before it dials etcd.
  EXPECT_EQ(run(absl::StrCat("server --data-dir ", dir,
                             "/server --listen 0.0.0.0:0 --metadata etcd://127.0.0.1:1")),
            1);
  EXPECT_NE(stderr_text().find("--advertise"), std::string::npos) << stderr_text();
  EXPECT_FALSE(std::filesystem::exists(dir + "/server"));

  BookieProcess p(dir, "0.0.0.0:0",
                  {"--advertise", "127.0.0.1", "--metadata", "embedded://" + meta});
  const std::vector<std::string> words = p.words();
  ASSERT_EQ(words.size(), 7u) << p.line();
  const std::string address = words[4];
  EXPECT_TRUE(absl::StartsWith(address, "127.0.0.1:")) << p.line();
  EXPECT_EQ(words[1], address);  // the id defaults to the published address
  auto stub = StubFor(address);
  v1::GetInfoResponse info;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(stub->GetInfo(&ctx, v1::GetInfoRequest(), &info).ok());
  EXPECT_EQ(info.bookie_id(), address);
}

TEST(BookieBinaryTest, UsageErrorsExitWithTwo) {
  if (BinaryPath().empty() || access(BinaryPath().c_str(), X_OK) != 0) {
    GTEST_SKIP() << "ledgerkv binary not built (LEDGERKV_BIN_DIR unset)";
  }
  auto run = [](const std::string& args) {
    return std::system((BinaryPath() + " " + args + " >/dev/null 2>&1").c_str());
  };
  EXPECT_EQ(WEXITSTATUS(run("bookie --listen 127.0.0.1:0")), 2);  // no --data-dir
  EXPECT_EQ(WEXITSTATUS(run("server")), 2);                       // no --data-dir
  EXPECT_EQ(WEXITSTATUS(run("frobnicate")), 2);
  // Automatic re-replication: a positive delay, or off, not both.
  const std::string server =
      "server --data-dir /nonexistent/x --listen 127.0.0.1:0 --metadata etcd://127.0.0.1:1 ";
  EXPECT_EQ(WEXITSTATUS(run(server + "--rereplicate-after-s 0")), 2);
  EXPECT_EQ(WEXITSTATUS(run(server + "--no-rereplicate --rereplicate-after-s 60")), 2);
  // Integers that would wrap when narrowed (4294967297 was 1 bookie) or
  // overflow when scaled (MiB to bytes) are refused, not misread.
  const std::string standalone = "standalone --data-dir /dev/null/x --listen 127.0.0.1:0 ";
  EXPECT_EQ(WEXITSTATUS(run(standalone + "--bookies 4294967297")), 2);
  EXPECT_EQ(WEXITSTATUS(run(standalone + "--snapshot-log-mb 9007199254740993")), 2);
  EXPECT_EQ(WEXITSTATUS(run(standalone + "--bookies 1")), 1);  // flags fine, the dir is not
  // The group commit wait's bound: a positive number of microseconds, at
  // most 100 ms, and not together with the switch that turns it off.
  const std::string bookie = "bookie --data-dir /nonexistent/x --listen 127.0.0.1:0 ";
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--group-commit-wait-max-us 0")), 2);
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--group-commit-wait-max-us 100001")), 2);
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--group-commit-wait-max-us 500 --no-group-commit-wait")),
            2);
  // A valid bound passes the flags; the start then fails on the data dir.
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--group-commit-wait-max-us 100000")), 1);
  // Disk watermarks: percents, the low one below the high one (at the
  // same value a bookie on the line would flap), unless the high one is
  // 100 (off).
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-high-watermark 101")), 2);
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-high-watermark 0")), 2);
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-low-watermark 96")), 2);  // above the default 95
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-high-watermark 80 --disk-low-watermark 81")), 2);
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-high-watermark 80 --disk-low-watermark 80")), 2);
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-high-watermark 3")), 2);  // low would be -2
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-high-watermark 80 --disk-low-watermark 70")), 1);
  EXPECT_EQ(WEXITSTATUS(run(bookie + "--disk-high-watermark 100 --disk-low-watermark 97")), 1);
  // A bad number says what the flag takes and what it got.
  auto error_of = [](const std::string& args) {
    std::string out;
    FILE* p = ::popen((BinaryPath() + " " + args + " 2>&1 >/dev/null").c_str(), "r");
    if (p == nullptr) return out;
    char buf[512];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    ::pclose(p);
    return out;
  };
  for (const char* bad : {"0", "abc", "101"}) {
    EXPECT_NE(error_of(bookie + "--disk-high-watermark " + bad)
                  .find(absl::StrCat("--disk-high-watermark needs a value (a percent from 1 to "
                                     "100), not \"",
                                     bad, "\"")),
              std::string::npos)
        << bad;
  }
}

}  // namespace
}  // namespace ledgerkv::bookie
