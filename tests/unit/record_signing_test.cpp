// Authenticated membership's pieces (parallel/elastic/record_signing.h, signed_store.h, and the
// handshake of gloo_communicator.h): a signed record opens only under its secret and key,
// unaltered; a secret file must be private and long enough; the signed store ignores and reports
// forged records, lists only valid keys, and counts exactly from many threads through its chain of
// signed versions, skipping a forged version; the handshake's proofs bind the secret, the context,
// both ranks and both nonces; two Gloo members with one secret connect and sum, with two secrets
// both refuse each other.
#include "parallel/elastic/record_signing.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "parallel/elastic/gloo_communicator.h"
#include "parallel/elastic/signed_store.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class Directory {
 public:
  Directory()
      : path_(fs::temp_directory_path() / ("strata_signing_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Directory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::vector<char> bytes(const std::string& text) { return {text.begin(), text.end()}; }

TEST(RecordSigning, ARecordOpensOnlyUnderItsSecretAndKeyUnaltered) {
  const SharedSecret secret = SharedSecret::from_bytes("correct horse battery staple");
  const SharedSecret other = SharedSecret::from_bytes("correct horse battery stapler");
  const std::vector<char> record = sign_record(secret, "g/settings", bytes("model: {}"));
  EXPECT_TRUE(looks_signed(record));
  EXPECT_EQ(open_signed_record(secret, "g/settings", record), bytes("model: {}"));
  EXPECT_FALSE(open_signed_record(other, "g/settings", record));
  EXPECT_FALSE(open_signed_record(secret, "g/members/5", record));  // copied to another key
  std::vector<char> altered = record;
  altered.back() = '!';
  EXPECT_FALSE(open_signed_record(secret, "g/settings", altered));
  EXPECT_FALSE(open_signed_record(secret, "g/settings", bytes("model: {}")));  // unsigned JSON
  EXPECT_FALSE(looks_signed(bytes("strata-signed-1 short\n")));
  // Empty values sign too; the fingerprint tells secrets apart.
  EXPECT_EQ(open_signed_record(secret, "k", sign_record(secret, "k", {})), std::vector<char>{});
  EXPECT_NE(secret.fingerprint(), other.fingerprint());
  EXPECT_EQ(secret.fingerprint().size(), 8u);
}

TEST(RecordSigning, ASecretFileMustBePrivateAndLongEnough) {
  const Directory dir;
  const auto write = [&](const std::string& name, const std::string& text, mode_t mode) {
    std::ofstream(dir / name) << text;
    ::chmod((dir / name).c_str(), mode);
    return dir / name;
  };
  const auto error_of = [](const std::string& path) {
    try {
      SharedSecret::from_file(path, "diloco.secret_file");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(write("open", "0123456789abcdef\n", 0644)).find("chmod 600"),
            std::string::npos);
  EXPECT_NE(error_of(write("short", "short\n", 0600)).find("at least 16"), std::string::npos);
  EXPECT_NE(error_of(dir / "missing").find("cannot read the secret file"), std::string::npos);
  // A trailing newline is not part of the secret: `echo` and `printf` files agree.
  const SharedSecret echoed =
      SharedSecret::from_file(write("echoed", "0123456789abcdef\n", 0600), "k");
  const SharedSecret printed =
      SharedSecret::from_file(write("printed", "0123456789abcdef", 0400), "k");
  EXPECT_EQ(echoed.fingerprint(), printed.fingerprint());
  EXPECT_EQ(echoed.path(), dir / "echoed");
  // The message names the file, never the secret.
  EXPECT_EQ(error_of(write("open2", "the-secret-itself-0123", 0640)).find("the-secret-itself"),
            std::string::npos);
}

class SignedStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<RendezvousStore> plain() { return open_rendezvous_store("file://" + dir_ / "s"); }
  std::unique_ptr<SignedStore> with(const std::string& secret) {
    return std::make_unique<SignedStore>(
        plain(), std::make_shared<const SharedSecret>(SharedSecret::from_bytes(secret)));
  }
  Directory dir_;
};

TEST_F(SignedStoreTest, ForgedRecordsAreIgnoredReportedAndNotListed) {
  const auto store = with("group secret, 16+ bytes");
  store->set("g/claim/0/0", bytes("token-a"));
  EXPECT_EQ(store->get("g/claim/0/0"), bytes("token-a"));
  EXPECT_TRUE(store->create("g/members/5", bytes("slots 0")));
  EXPECT_FALSE(store->create("g/members/5", bytes("slots 0 1")));
  // A stranger who can write to the store: valid-looking records without, or with another,
  // signature, and a signed record copied to another key.
  const auto raw = plain();
  raw->set("g/dead/0/0", bytes("missed heartbeats"));
  with("another secret, 16+ bytes")->set("g/members/9", bytes("slots 7"));
  raw->set("g/claim/1/0", *raw->get("g/claim/0/0"));
  EXPECT_FALSE(store->get("g/dead/0/0"));
  EXPECT_FALSE(store->get("g/members/9"));
  EXPECT_FALSE(store->get("g/claim/1/0"));
  EXPECT_EQ(store->forged(), 3);
  EXPECT_EQ(store->keys("g/members/"), std::vector<std::string>{"g/members/5"});
  EXPECT_EQ(store->keys("g/claim/"), std::vector<std::string>{"g/claim/0/0"});
  // A forged record planted where a member will create one: the create still happens, once, at
  // the key's next name, and every member reads it there; the listing names the key.
  raw->set("g/members/10", bytes("slots 0"));
  raw->set("g/members/10@1", bytes("slots 0"));
  const auto other_member = with("group secret, 16+ bytes");
  EXPECT_TRUE(store->create("g/members/10", bytes("slots 0 1 2")));
  EXPECT_FALSE(other_member->create("g/members/10", bytes("slots 1 2")));
  EXPECT_EQ(other_member->get("g/members/10"), bytes("slots 0 1 2"));
  EXPECT_TRUE(raw->get("g/members/10@2"));
  EXPECT_EQ(store->keys("g/members/"), (std::vector<std::string>{"g/members/10", "g/members/5"}));
  store->remove("g/members/10");
  EXPECT_FALSE(raw->get("g/members/10@2"));
  // Every name forged: the store is being denied, which create says.
  for (int i = 0; i < SignedStore::kAlternates; ++i)
    raw->set("g/members/11" + (i == 0 ? std::string() : "@" + std::to_string(i)), bytes("x"));
  EXPECT_THROW(store->create("g/members/11", bytes("slots 0")), StoreUnavailable);
}

TEST_F(SignedStoreTest, CountersAddExactlyFromManyThreadsAndSkipForgedVersions) {
  constexpr int kThreads = 4, kAdds = 40;
  std::vector<std::unique_ptr<SignedStore>> stores;
  for (int t = 0; t < kThreads; ++t) stores.push_back(with("group secret, 16+ bytes"));
  std::vector<std::vector<std::int64_t>> returned(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAdds; ++i)
        returned[static_cast<std::size_t>(t)].push_back(
            stores[static_cast<std::size_t>(t)]->add("g/next", 1));
    });
  for (auto& thread : threads) thread.join();
  std::set<std::int64_t> values;
  for (const auto& r : returned) values.insert(r.begin(), r.end());
  EXPECT_EQ(values.size(), static_cast<std::size_t>(kThreads * kAdds));
  EXPECT_EQ(*values.rbegin(), kThreads * kAdds);
  // A fresh reader finds the total; a forged next version is skipped, not believed.
  const auto fresh = with("group secret, 16+ bytes");
  EXPECT_EQ(fresh->add("g/next", 0), kThreads * kAdds);
  plain()->create("g/next.v" + std::to_string(kThreads * kAdds + 1), bytes("1000000"));
  EXPECT_EQ(fresh->add("g/next", 0), kThreads * kAdds);
  EXPECT_EQ(fresh->add("g/next", 5), kThreads * kAdds + 5);
  EXPECT_EQ(with("group secret, 16+ bytes")->add("g/next", 0), kThreads * kAdds + 5);
  EXPECT_EQ(fresh->add("g/other", -2), -2);
}

TEST(Handshake, AProofBindsTheSecretContextRanksAndNonces) {
  const SharedSecret secret = SharedSecret::from_bytes("group secret, 16+ bytes");
  const HandshakeNonce a = random_nonce(), b = random_nonce();
  EXPECT_NE(a, b);
  EXPECT_EQ(parse_hello(handshake_hello(a)), a);
  HandshakeMessage garbage{};
  EXPECT_FALSE(parse_hello(garbage));
  const HandshakeMessage proof = handshake_proof(secret, "g/gloo/5", 0, 1, a, b);
  EXPECT_TRUE(check_proof(secret, "g/gloo/5", 0, 1, a, b, proof));
  EXPECT_FALSE(check_proof(SharedSecret::from_bytes("other secret, 16+ bytes"), "g/gloo/5", 0, 1, a,
                           b, proof));
  EXPECT_FALSE(check_proof(secret, "g/gloo/6", 0, 1, a, b, proof));
  EXPECT_FALSE(check_proof(secret, "g/gloo/5", 1, 0, a, b, proof));
  EXPECT_FALSE(check_proof(secret, "g/gloo/5", 0, 1, b, a, proof));
  EXPECT_FALSE(check_proof(secret, "g/gloo/5", 0, 1, a, random_nonce(), proof));
  EXPECT_FALSE(check_proof(secret, "g/gloo/5", 0, 1, a, b, handshake_hello(a)));
}

// Two members over loopback, each with its secret: true when both connected and summed.
bool gloo_pair(const std::string& url, const std::string& prefix, const std::string& secret_0,
               const std::string& secret_1, std::vector<std::string>& errors) {
  errors.assign(2, "");
  std::vector<float> sums(2, 0.0f);
  std::vector<std::thread> members;
  for (int r = 0; r < 2; ++r)
    members.emplace_back([&, r] {
      try {
        const auto store = open_rendezvous_store(url);
        GlooMembers m;
        m.prefix = prefix;
        m.rank = r;
        m.size = 2;
        m.slots = {0, 1};
        m.timeout = std::chrono::milliseconds(10000);
        m.interface = "lo";
        m.secret = std::make_shared<const SharedSecret>(
            SharedSecret::from_bytes(r == 0 ? secret_0 : secret_1));
        GlooCommunicator group(store.get(), m);
        float x = static_cast<float>(r + 1);
        group.all_reduce_sum(&x, 1);
        sums[static_cast<std::size_t>(r)] = x;
      } catch (const PeerLost& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& m : members) m.join();
  return sums[0] == 3.0f && sums[1] == 3.0f;
}

TEST(Handshake, GlooMembersWithOneSecretConnectAndWithTwoRefuseEachOther) {
  const Directory dir;
  const std::string url = "file://" + dir / "store";
  std::vector<std::string> errors;
  EXPECT_TRUE(gloo_pair(url, "same", "group secret, 16+ bytes", "group secret, 16+ bytes", errors))
      << errors[0] << " | " << errors[1];
  EXPECT_FALSE(
      gloo_pair(url, "differ", "group secret, 16+ bytes", "a stranger's guess 16+", errors));
  for (const std::string& e : errors)
    EXPECT_NE(e.find("failed the secret's challenge"), std::string::npos) << e;
}

}  // namespace
}  // namespace strata
