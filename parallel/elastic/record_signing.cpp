#include "parallel/elastic/record_signing.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace strata {

namespace {

constexpr std::size_t kMinimumSecret = 16;
constexpr std::string_view kRecordDomain{"strata-record-1\0", 16};
constexpr std::string_view kHello = "strata-hello-1";
constexpr std::string_view kProof = "strata-proof-1";

std::string hex(const std::uint8_t* bytes, std::size_t size) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < size; ++i) {
    text += kDigits[bytes[i] >> 4];
    text += kDigits[bytes[i] & 15];
  }
  return text;
}

std::string record_message(const std::string& key, const char* value, std::size_t size) {
  std::string message(kRecordDomain);
  message += key;
  message += '\0';
  message.append(value, size);
  return message;
}

void append_rank(std::string& message, int rank) {
  const auto value = static_cast<std::uint32_t>(rank);
  for (int b = 0; b < 4; ++b) message += static_cast<char>((value >> (8 * b)) & 0xff);
}

}  // namespace

SharedSecret SharedSecret::from_file(const std::string& path, const std::string& what) {
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0)
    throw std::runtime_error(what + ": cannot read the secret file '" + path +
                             "': " + std::strerror(errno));
  if (!S_ISREG(status.st_mode))
    throw std::runtime_error(what + ": the secret file '" + path + "' is not a regular file");
  if ((status.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(status.st_mode & 07777));
    throw std::runtime_error(what + ": the secret file '" + path +
                             "' may be read by others (mode " + mode + "): chmod 600 it");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(what + ": cannot read the secret file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  SharedSecret secret = from_bytes(text.str());
  if (secret.bytes_.size() < kMinimumSecret)
    throw std::runtime_error(what + ": the secret in '" + path + "' has " +
                             std::to_string(secret.bytes_.size()) + " bytes; it needs at least " +
                             std::to_string(kMinimumSecret) +
                             " (e.g. head -c 32 /dev/urandom | base64 > FILE)");
  secret.path_ = path;
  return secret;
}

std::shared_ptr<const SharedSecret> SharedSecret::of_config(const std::string& path,
                                                            const std::string& what) {
  if (path.empty()) return nullptr;
  return std::make_shared<const SharedSecret>(from_file(path, what));
}

SharedSecret SharedSecret::from_bytes(std::string bytes) {
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' ||
                            bytes.back() == '\t'))
    bytes.pop_back();
  SharedSecret secret;
  secret.bytes_ = std::move(bytes);
  return secret;
}

std::array<std::uint8_t, 32> SharedSecret::mac(std::string_view data) const { return mac({data}); }

std::array<std::uint8_t, 32> SharedSecret::mac(
    std::initializer_list<std::string_view> parts) const {
  // OpenSSL 3's EVP_MAC (HMAC_CTX is deprecated there); the algorithm is fetched once.
  static EVP_MAC* const hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> context(
      hmac == nullptr ? nullptr : EVP_MAC_CTX_new(hmac), &EVP_MAC_CTX_free);
  char digest[] = "SHA256";
  const OSSL_PARAM parameters[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                                   OSSL_PARAM_construct_end()};
  std::array<std::uint8_t, 32> out{};
  std::size_t size = 0;
  bool ok = context != nullptr &&
            EVP_MAC_init(context.get(), reinterpret_cast<const unsigned char*>(bytes_.data()),
                         bytes_.size(), parameters) == 1;
  for (const std::string_view part : parts)
    ok = ok && EVP_MAC_update(context.get(), reinterpret_cast<const unsigned char*>(part.data()),
                              part.size()) == 1;
  ok = ok && EVP_MAC_final(context.get(), out.data(), &size, out.size()) == 1;
  if (!ok || size != out.size()) throw std::runtime_error("HMAC-SHA256 failed (OpenSSL)");
  return out;
}

std::string SharedSecret::fingerprint() const {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  const std::string message = "strata-secret-id" + bytes_;
  if (EVP_Digest(message.data(), message.size(), digest, &size, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 failed (OpenSSL)");
  return hex(digest, 4);
}

std::vector<char> sign_record(const SharedSecret& secret, const std::string& key,
                              const std::vector<char>& value) {
  const auto mac = secret.mac(record_message(key, value.data(), value.size()));
  std::string head(kSignedRecordMagic);
  head += hex(mac.data(), mac.size());
  head += '\n';
  std::vector<char> record(head.begin(), head.end());
  record.insert(record.end(), value.begin(), value.end());
  return record;
}

bool looks_signed(const std::vector<char>& record) {
  const std::size_t head = kSignedRecordMagic.size() + 64 + 1;
  return record.size() >= head &&
         std::string_view(record.data(), kSignedRecordMagic.size()) == kSignedRecordMagic &&
         record[head - 1] == '\n';
}

std::optional<std::vector<char>> open_signed_record(const SharedSecret& secret,
                                                    const std::string& key,
                                                    const std::vector<char>& record) {
  if (!looks_signed(record)) return std::nullopt;
  const std::size_t head = kSignedRecordMagic.size() + 64 + 1;
  const auto mac = secret.mac(record_message(key, record.data() + head, record.size() - head));
  const std::string expected = hex(mac.data(), mac.size());
  if (CRYPTO_memcmp(expected.data(), record.data() + kSignedRecordMagic.size(), 64) != 0)
    return std::nullopt;
  return std::vector<char>(record.begin() + static_cast<std::ptrdiff_t>(head), record.end());
}

HandshakeNonce random_nonce() {
  HandshakeNonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1)
    throw std::runtime_error("no random bytes for a handshake nonce (OpenSSL)");
  return nonce;
}

HandshakeMessage handshake_hello(const HandshakeNonce& nonce) {
  HandshakeMessage message{};
  std::memcpy(message.data(), kHello.data(), kHello.size());
  std::memcpy(message.data() + kHello.size(), nonce.data(), nonce.size());
  return message;
}

std::optional<HandshakeNonce> parse_hello(const HandshakeMessage& message) {
  if (std::memcmp(message.data(), kHello.data(), kHello.size()) != 0) return std::nullopt;
  HandshakeNonce nonce{};
  std::memcpy(nonce.data(), message.data() + kHello.size(), nonce.size());
  return nonce;
}

HandshakeMessage handshake_proof(const SharedSecret& secret, std::string_view context, int sender,
                                 int receiver, const HandshakeNonce& sender_nonce,
                                 const HandshakeNonce& receiver_nonce) {
  std::string data(kProof);
  data += '\0';
  data += context;
  data += '\0';
  append_rank(data, sender);
  append_rank(data, receiver);
  data.append(reinterpret_cast<const char*>(sender_nonce.data()), sender_nonce.size());
  data.append(reinterpret_cast<const char*>(receiver_nonce.data()), receiver_nonce.size());
  const auto mac = secret.mac(data);
  HandshakeMessage message{};
  std::memcpy(message.data(), kProof.data(), kProof.size());
  std::memcpy(message.data() + kProof.size(), mac.data(), mac.size());
  return message;
}

bool check_proof(const SharedSecret& secret, std::string_view context, int sender, int receiver,
                 const HandshakeNonce& sender_nonce, const HandshakeNonce& receiver_nonce,
                 const HandshakeMessage& message) {
  const HandshakeMessage expected =
      handshake_proof(secret, context, sender, receiver, sender_nonce, receiver_nonce);
  return CRYPTO_memcmp(expected.data(), message.data(), message.size()) == 0;
}

RpcMac rpc_mac(const SharedSecret& secret, bool reply, std::string_view id, std::string_view method,
               std::string_view header, std::string_view payload) {
  const auto length = [](std::string_view part) {
    std::string bytes;
    for (int b = 0; b < 8; ++b)
      bytes += static_cast<char>((static_cast<std::uint64_t>(part.size()) >> (8 * b)) & 0xff);
    return bytes;
  };
  const std::string lengths[3] = {length(method), length(header), length(payload)};
  return secret.mac({std::string_view("strata-rpc-1\0", 13), reply ? "reply" : "request", id,
                     lengths[0], method, lengths[1], header, lengths[2], payload});
}

bool check_rpc_mac(const SharedSecret& secret, bool reply, std::string_view id,
                   std::string_view method, std::string_view header, std::string_view payload,
                   std::string_view mac) {
  const RpcMac expected = rpc_mac(secret, reply, id, method, header, payload);
  return mac.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), mac.data(), expected.size()) == 0;
}

}  // namespace strata
