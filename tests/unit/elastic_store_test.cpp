// The rendezvous stores of elastic DiLoCo (parallel/elastic/rendezvous_store.h), through the
// interface: every behaviour is one typed test body, run on a file store (a fresh directory per
// test) and on a Redis store (a redis-server this test starts on a free loopback port, emptied
// before each test). Then what only one of them has: malformed URLs, a port where nothing listens,
// a Redis server that is killed, hangs or restarts under a store that is in use.
//
// The Redis half needs Debian's redis-server (scripts/setup.sh installs it); without it those tests
// fail and say so, since skipping would leave the multi-host store untested.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <latch>
#include <set>
#include <thread>

#include "parallel/elastic/rendezvous_store.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A loopback port nothing listens on right now (the kernel's choice of a free one).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error("cannot find a free loopback port");
  ::close(fd);
  return ntohs(address.sin_port);
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string directories = path ? path : "/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= directories.size()) {
    const std::size_t end = std::min(directories.find(':', begin), directories.size());
    const fs::path candidate = fs::path(directories.substr(begin, end - begin)) / program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    begin = end + 1;
  }
  return false;
}

// A redis-server child process on 127.0.0.1:port, without persistence (and with `password`, one
// that requires AUTH); killed when destroyed.
class RedisServer {
 public:
  explicit RedisServer(int port, std::string password = "")
      : port_(port), password_(std::move(password)) {}
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  ~RedisServer() { kill(); }

  std::string url() const {
    return "redis://" + (password_.empty() ? "" : ":" + password_ + "@") +
           "127.0.0.1:" + std::to_string(port_);
  }
  pid_t pid() const { return pid_; }

  // Starts the server and waits until it answers: "" on success, else why it did not.
  std::string start() {
    if (!on_path("redis-server"))
      return "redis-server is not installed (Debian package redis-server, which scripts/setup.sh "
             "installs), so the Redis rendezvous store cannot be tested";
    const std::string port = std::to_string(port_);
    pid_ = ::fork();
    if (pid_ < 0) return "cannot fork redis-server";
    if (pid_ == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      if (null >= 0) ::dup2(null, STDOUT_FILENO);
      std::vector<const char*> argv{
          "redis-server", "--port", port.c_str(),  "--bind", "127.0.0.1",  "--save", "",
          "--appendonly", "no",     "--daemonize", "no",     "--loglevel", "warning"};
      if (!password_.empty()) {
        argv.push_back("--requirepass");
        argv.push_back(password_.c_str());
      }
      argv.push_back(nullptr);
      ::execvp("redis-server", const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
    const auto start = Clock::now();
    while (seconds_since(start) < 20) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return "redis-server --port " + port + " exited before it answered";
      }
      try {
        open_rendezvous_store(url(), 1.0)->get("probe");
        return "";
      } catch (const StoreUnavailable&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    return "redis-server --port " + port + " did not answer within 20 s";
  }

  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  int port_;
  std::string password_;
  pid_t pid_ = -1;
};

// A directory under the system's temporary one, removed with everything in it when destroyed.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& tag)
      : path_(fs::temp_directory_path() / ("strata_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  ~TemporaryDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// What each typed test runs on. fresh_url() is an empty store; problem() is why there is none.
struct FileStoreCase {
  static std::string problem() { return ""; }
  static std::string fresh_url() {
    static TemporaryDirectory root("elastic_store");
    static int tests = 0;
    return "file://" + (root.path() / ("test" + std::to_string(++tests))).string();
  }
};

struct RedisStoreCase {
  static RedisServer& server() {
    static RedisServer shared(free_loopback_port());
    return shared;
  }
  static std::string problem() {
    static const std::string why = server().start();
    return why;
  }
  static std::string fresh_url() {
    const auto store = open_rendezvous_store(server().url());
    for (const std::string& key : store->keys("")) store->remove(key);
    return server().url();
  }
};

template <class Case>
class RendezvousStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string problem = Case::problem(); !problem.empty()) FAIL() << problem;
    url_ = Case::fresh_url();
    store_ = open_rendezvous_store(url_);
  }
  // Another client of the same store (another connection, for Redis).
  std::unique_ptr<RendezvousStore> open_another() const { return open_rendezvous_store(url_); }

  std::string url_;
  std::unique_ptr<RendezvousStore> store_;
};

using StoreCases = ::testing::Types<FileStoreCase, RedisStoreCase>;
class StoreCaseNames {
 public:
  template <class Case>
  static std::string GetName(int) {
    return std::is_same_v<Case, FileStoreCase> ? "File" : "Redis";
  }
};
TYPED_TEST_SUITE(RendezvousStoreTest, StoreCases, StoreCaseNames);

// Runs body(i) on n threads that start together, and joins them.
void on_threads(int n, const std::function<void(int)>& body) {
  std::latch start(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      body(i);
    });
  for (auto& thread : threads) thread.join();
}

// Runs body(i) in n forked processes; true when every one exited 0. A child leaves with _exit, so
// it runs none of the parent's destructors (the shared redis-server, the temporary directory).
bool in_processes(int n, const std::function<void(int)>& body) {
  std::vector<pid_t> children;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        body(i);
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  bool all_succeeded = true;
  for (const pid_t pid : children) {
    int status = 0;
    all_succeeded &= pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
                     WEXITSTATUS(status) == 0;
  }
  return all_succeeded;
}

TYPED_TEST(RendezvousStoreTest, SetsGetsAndReplacesValues) {
  RendezvousStore& store = *this->store_;
  EXPECT_EQ(store.url(), this->url_);
  store.set("group/settings", store_bytes("workers: 4"));
  EXPECT_EQ(store_text(*store.get("group/settings")), "workers: 4");
  store.set("group/settings", store_bytes("workers: 8"));
  EXPECT_EQ(store_text(*store.get("group/settings")), "workers: 8");
  EXPECT_EQ(store_text(*this->open_another()->get("group/settings")), "workers: 8");
}

TYPED_TEST(RendezvousStoreTest, AbsentKeysHaveNoValue) {
  EXPECT_FALSE(this->store_->get("absent").has_value());
  EXPECT_FALSE(this->store_->get("absent/below/it").has_value());
  this->store_->set("group/x", store_bytes("1"));
  EXPECT_FALSE(this->store_->get("group/y").has_value());
}

TYPED_TEST(RendezvousStoreTest, CreateSucceedsOnlyForAnAbsentKey) {
  RendezvousStore& store = *this->store_;
  EXPECT_TRUE(store.create("group/slot/0", store_bytes("host-a")));
  EXPECT_FALSE(store.create("group/slot/0", store_bytes("host-b")));
  EXPECT_FALSE(this->open_another()->create("group/slot/0", store_bytes("host-c")));
  EXPECT_EQ(store_text(*store.get("group/slot/0")), "host-a");
  store.set("group/slot/1", store_bytes("set"));
  EXPECT_FALSE(store.create("group/slot/1", store_bytes("created")));
  store.remove("group/slot/0");
  EXPECT_TRUE(store.create("group/slot/0", store_bytes("host-d")));
  EXPECT_EQ(store_text(*store.get("group/slot/0")), "host-d");
}

// Half the threads share the fixture's store (its mutex), half have their own client.
TYPED_TEST(RendezvousStoreTest, ExactlyOneOfManyRacingCreatorsWins) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 20;
  std::vector<std::unique_ptr<RendezvousStore>> own;
  for (int t = 0; t < kThreads / 2; ++t) own.push_back(this->open_another());
  std::vector<std::vector<int>> won(kRounds);
  std::mutex won_mutex;
  on_threads(kThreads, [&](int t) {
    RendezvousStore& store = t % 2 == 0 ? *this->store_ : *own[t / 2];
    for (int round = 0; round < kRounds; ++round)
      if (store.create("race/" + std::to_string(round),
                       store_bytes("thread " + std::to_string(t)))) {
        const std::lock_guard<std::mutex> lock(won_mutex);
        won[round].push_back(t);
      }
  });
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_EQ(won[round].size(), 1u) << "round " << round;
    EXPECT_EQ(store_text(*this->store_->get("race/" + std::to_string(round))),
              "thread " + std::to_string(won[round][0]));
  }
}

TYPED_TEST(RendezvousStoreTest, AddCountsFromZeroAndReadsAsDecimal) {
  RendezvousStore& store = *this->store_;
  EXPECT_EQ(store.add("group/members", 5), 5);
  EXPECT_EQ(store.add("group/members", -7), -2);
  EXPECT_EQ(store_text(*store.get("group/members")), "-2");
  store.set("group/round", store_bytes("41"));
  EXPECT_EQ(store.add("group/round", 1), 42);
  EXPECT_EQ(store.add("group/round", 0), 42);
}

TYPED_TEST(RendezvousStoreTest, AddOnAValueThatIsNotACounterNamesTheStore) {
  this->store_->set("group/name", store_bytes("not a number"));
  try {
    this->store_->add("group/name", 1);
    FAIL() << "add() on text did not throw";
  } catch (const StoreUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find(this->store_->url()), std::string::npos) << e.what();
  }
  EXPECT_EQ(store_text(*this->store_->get("group/name")), "not a number");
}

// Every returned value is distinct and they are exactly 1..n: no increment lost or seen twice.
TYPED_TEST(RendezvousStoreTest, AddFromManyThreadsSumsExactly) {
  constexpr int kThreads = 6;
  constexpr int kAdds = 100;
  std::vector<std::unique_ptr<RendezvousStore>> own;
  for (int t = 0; t < kThreads / 2; ++t) own.push_back(this->open_another());
  std::vector<std::vector<std::int64_t>> returned(kThreads);
  on_threads(kThreads, [&](int t) {
    RendezvousStore& store = t % 2 == 0 ? *this->store_ : *own[t / 2];
    for (int i = 0; i < kAdds; ++i) returned[t].push_back(store.add("count", 1));
  });
  std::set<std::int64_t> values;
  for (const auto& of_thread : returned) values.insert(of_thread.begin(), of_thread.end());
  EXPECT_EQ(values.size(), static_cast<std::size_t>(kThreads * kAdds));
  EXPECT_EQ(*values.begin(), 1);
  EXPECT_EQ(*values.rbegin(), kThreads * kAdds);
  EXPECT_EQ(store_text(*this->store_->get("count")), std::to_string(kThreads * kAdds));
}

TYPED_TEST(RendezvousStoreTest, AddFromManyProcessesSumsExactly) {
  constexpr int kProcesses = 4;
  constexpr int kAdds = 100;
  const std::string url = this->url_;
  EXPECT_TRUE(in_processes(kProcesses, [&](int) {
    const auto store = open_rendezvous_store(url);
    for (int i = 0; i < kAdds; ++i) store->add("group/heartbeats", 1);
  }));
  EXPECT_EQ(store_text(*this->store_->get("group/heartbeats")), std::to_string(kProcesses * kAdds));
}

TYPED_TEST(RendezvousStoreTest, RemoveDeletesOneKeyAndIgnoresAbsentOnes) {
  RendezvousStore& store = *this->store_;
  store.set("group/slot/0", store_bytes("a"));
  store.set("group/slot/1", store_bytes("b"));
  store.remove("group/slot/0");
  EXPECT_FALSE(store.get("group/slot/0").has_value());
  EXPECT_EQ(store_text(*store.get("group/slot/1")), "b");
  EXPECT_NO_THROW(store.remove("group/slot/0"));
  EXPECT_NO_THROW(store.remove("never/was"));
  EXPECT_EQ(store.keys("group/"), std::vector<std::string>{"group/slot/1"});
}

TYPED_TEST(RendezvousStoreTest, KeysListsThePrefixSorted) {
  RendezvousStore& store = *this->store_;
  for (const char* key : {"group/slot/1", "group/slot/10", "group/slot/0", "group/heartbeat/2",
                          "groupie", "other/slot/0", "group/slot*x"})
    store.set(key, store_bytes("v"));
  store.add("group/count", 3);  // the file store's lock file must not show
  EXPECT_EQ(store.keys("group/slot/"),
            (std::vector<std::string>{"group/slot/0", "group/slot/1", "group/slot/10"}));
  EXPECT_EQ(store.keys("group/slot*"), std::vector<std::string>{"group/slot*x"});
  EXPECT_EQ(store.keys("group/"),
            (std::vector<std::string>{"group/count", "group/heartbeat/2", "group/slot*x",
                                      "group/slot/0", "group/slot/1", "group/slot/10"}));
  EXPECT_EQ(store.keys("group").size(), 7u);  // with "groupie"
  EXPECT_EQ(store.keys("").size(), 8u);
  EXPECT_TRUE(store.keys("nothing/").empty());
  EXPECT_TRUE(store.keys("group/slot/0/").empty());
}

TYPED_TEST(RendezvousStoreTest, ValuesAreBytes) {
  RendezvousStore& store = *this->store_;
  std::vector<char> every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  const std::vector<char> zeros(17, '\0');
  const std::vector<char> empty;
  std::vector<char> large(1 << 20);
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>(i * 131 % 256);
  store.set("bytes/every", every_byte);
  store.set("bytes/zeros", zeros);
  store.set("bytes/empty", empty);
  EXPECT_TRUE(store.create("bytes/large", large));
  EXPECT_EQ(*store.get("bytes/every"), every_byte);
  EXPECT_EQ(*store.get("bytes/zeros"), zeros);
  EXPECT_EQ(*store.get("bytes/empty"), empty);
  EXPECT_EQ(*store.get("bytes/large"), large);
  EXPECT_EQ(store_bytes(std::string("a\0b", 3)), (std::vector<char>{'a', '\0', 'b'}));
  EXPECT_EQ(store_text(zeros), std::string(17, '\0'));
}

TYPED_TEST(RendezvousStoreTest, InvalidKeysAreRejected) {
  RendezvousStore& store = *this->store_;
  const std::vector<char> value = store_bytes("v");
  for (const std::string& key :
       std::vector<std::string>{"", "a b", "tab\there", "line\n", "../escape", "a/../b", "a..b",
                                "/absolute", "trailing/", "double//slash", ".hidden", "a/.lock",
                                std::string("nul\0byte", 8), "del\x7f", "caf\xc3\xa9"}) {
    EXPECT_THROW(store.set(key, value), std::invalid_argument) << key;
    EXPECT_THROW(store.get(key), std::invalid_argument) << key;
    EXPECT_THROW(store.create(key, value), std::invalid_argument) << key;
    EXPECT_THROW(store.add(key, 1), std::invalid_argument) << key;
    EXPECT_THROW(store.remove(key), std::invalid_argument) << key;
  }
  EXPECT_THROW(store.keys("a b"), std::invalid_argument);
  EXPECT_TRUE(store.keys("").empty()) << "an invalid key was stored";
}

void expect_unavailable_naming(const std::string& url, double timeout_s = 1.0) {
  try {
    open_rendezvous_store(url, timeout_s);
    ADD_FAILURE() << "'" << url << "' opened";
  } catch (const StoreUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
  }
}

TEST(RendezvousStoreUrl, MalformedUrlsThrowStoreUnavailableNamingThem) {
  for (const char* url :
       {"", "file://", "file://relative/dir", "/no/scheme", "http://host:80", "redis://",
        "redis://host", "redis://host:", "redis://:6379", "redis://host:port", "redis://host:0",
        "redis://host:65536", "redis://host:-1", "redis://host:6379/0", "redis://host:+80"})
    expect_unavailable_naming(url);
}

TEST(RendezvousStoreUrl, ATimeoutMustBePositive) {
  EXPECT_THROW(open_rendezvous_store("redis://127.0.0.1:1", 0.0), std::invalid_argument);
  EXPECT_THROW(open_rendezvous_store("redis://127.0.0.1:1", -1.0), std::invalid_argument);
}

TEST(FileStore, ADirectoryThatCannotBeCreatedThrowsStoreUnavailable) {
  TemporaryDirectory directory("elastic_store_file");
  const fs::path file = directory.path() / "a_file";
  open_rendezvous_store("file://" + directory.path().string())->set("a_file", store_bytes(""));
  expect_unavailable_naming("file://" + (file / "store").string());
}

TEST(RedisStore, APortWithNothingListeningThrowsStoreUnavailableWithinTheTimeout) {
  const auto start = Clock::now();
  expect_unavailable_naming("redis://127.0.0.1:" + std::to_string(free_loopback_port()), 1.0);
  EXPECT_LT(seconds_since(start), 3.0);
}

// Every operation on a store whose server is gone throws StoreUnavailable, promptly.
void expect_every_operation_unavailable(RendezvousStore& store) {
  const auto start = Clock::now();
  EXPECT_THROW(store.get("k"), StoreUnavailable);
  EXPECT_THROW(store.set("k", store_bytes("v")), StoreUnavailable);
  EXPECT_THROW(store.create("k", store_bytes("v")), StoreUnavailable);
  EXPECT_THROW(store.add("k", 1), StoreUnavailable);
  EXPECT_THROW(store.remove("k"), StoreUnavailable);
  EXPECT_THROW(store.keys(""), StoreUnavailable);
  EXPECT_LT(seconds_since(start), 6.0);  // refused connections: no timeout is waited for
}

// redis://:password@host:port sends AUTH on every connection; the password never shows in the URL
// or a message; a client without it, or with another, is refused with StoreUnavailable.
TEST(RedisStore, APasswordInTheUrlIsSentAsAuthAndNeverShown) {
  const std::string password = "pw-" + std::to_string(::getpid());
  RedisServer server(free_loopback_port(), password);
  ASSERT_EQ(server.start(), "");
  const auto store = open_rendezvous_store(server.url());
  store->set("group/settings", store_bytes("x"));
  EXPECT_EQ(store_text(*store->get("group/settings")), "x");
  EXPECT_EQ(store->url().find(password), std::string::npos) << store->url();
  const std::string address = server.url().substr(server.url().rfind('@') + 1);
  try {
    open_rendezvous_store("redis://" + address)->get("group/settings");
    ADD_FAILURE() << "a client without the password was served";
  } catch (const StoreUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("NOAUTH"), std::string::npos) << e.what();
  }
  try {
    open_rendezvous_store("redis://:wrong-" + password + "@" + address);
    ADD_FAILURE() << "a wrong password was accepted";
  } catch (const StoreUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("AUTH was refused"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(password), std::string::npos) << e.what();
  }
  EXPECT_EQ(redacted_store_url("redis://:" + password + "@h:1"), "redis://***@h:1");
}

TEST(RedisStore, AKilledServerThrowsAndARestartedOneIsReconnected) {
  RedisServer server(free_loopback_port());
  if (const std::string problem = server.start(); !problem.empty()) FAIL() << problem;
  const auto store = open_rendezvous_store(server.url(), 1.0);
  store->set("k", store_bytes("before"));

  server.kill();
  expect_every_operation_unavailable(*store);

  // Restarted (empty, no persistence): the same store object works again, first with a command
  // that is sent again after a reconnect.
  ASSERT_EQ(server.start(), "");
  EXPECT_FALSE(store->get("k").has_value());
  store->set("k", store_bytes("after"));
  EXPECT_EQ(store_text(*store->get("k")), "after");

  // Again, with a command that is never sent twice (INCRBY): its PING finds the lost connection.
  server.kill();
  ASSERT_EQ(server.start(), "");
  EXPECT_EQ(store->add("count", 2), 2);
  server.kill();
  ASSERT_EQ(server.start(), "");
  EXPECT_TRUE(store->create("slot", store_bytes("mine")));
  EXPECT_EQ(store->keys(""), std::vector<std::string>{"slot"});
}

// Writing a large value to a connection the server has closed fails with EPIPE, which by default
// also raises SIGPIPE and ends the process: the store must turn it into StoreUnavailable.
TEST(RedisStore, ALargeValueToAKilledServerThrowsRatherThanRaisingSigpipe) {
  RedisServer server(free_loopback_port());
  if (const std::string problem = server.start(); !problem.empty()) FAIL() << problem;
  const auto store = open_rendezvous_store(server.url(), 1.0);
  store->set("k", store_bytes("v"));
  server.kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the close reaches the client
  const std::vector<char> large(64 << 20, 'x');
  EXPECT_THROW(store->set("k", large), StoreUnavailable);
  ASSERT_EQ(server.start(), "");
  store->set("k", large);
  EXPECT_EQ(store->get("k")->size(), large.size());
}

TEST(RedisStore, AServerThatStopsAnsweringThrowsAfterTheTimeout) {
  RedisServer server(free_loopback_port());
  if (const std::string problem = server.start(); !problem.empty()) FAIL() << problem;
  const auto store = open_rendezvous_store(server.url(), 0.5);
  store->set("k", store_bytes("v"));
  ::kill(server.pid(), SIGSTOP);
  const auto start = Clock::now();
  EXPECT_THROW(store->get("k"), StoreUnavailable);
  EXPECT_THROW(store->add("k2", 1), StoreUnavailable);
  EXPECT_LT(seconds_since(start), 5.0);  // each at most ~2 timeouts and a connect
  ::kill(server.pid(), SIGCONT);
  EXPECT_EQ(store_text(*store->get("k")), "v");
}

}  // namespace
}  // namespace strata
