#include "parallel/elastic/rendezvous_store.h"

#include <charconv>
#include <cmath>

#include "parallel/elastic/file_store.h"
#include "parallel/elastic/redis_store.h"
#include "parallel/elastic/store_key.h"

namespace strata {

namespace {

bool printable_without_spaces(const std::string& text) {
  for (const char c : text)
    if (c < '!' || c > '~') return false;
  return true;
}

[[noreturn]] void malformed(const std::string& url, const std::string& why) {
  throw StoreUnavailable(
      "rendezvous store '" + redacted_store_url(url) + "': " + why +
      " (expected file:///absolute/path or redis://[[user]:password@]host:port)");
}

// "[[user]:password@]host:port" or "...[ipv6]:port".
std::unique_ptr<RendezvousStore> open_redis(const std::string& url, std::string address,
                                            double connect_timeout_s) {
  std::string user, password;
  if (const auto at = address.rfind('@'); at != std::string::npos) {
    const std::string credentials = address.substr(0, at);
    address = address.substr(at + 1);
    const auto separator = credentials.find(':');
    if (separator == std::string::npos) malformed(url, "credentials without ':' before '@'");
    user = credentials.substr(0, separator);
    password = credentials.substr(separator + 1);
    if (password.empty()) malformed(url, "an empty password before '@'");
  }
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) malformed(url, "no port");
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) malformed(url, "no host");
  if (!printable_without_spaces(host)) malformed(url, "the host is not printable ASCII");
  const std::string port_text = address.substr(colon + 1);
  int port = 0;
  const auto [end, error] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() ||
      port < 1 || port > 65535)
    malformed(url, "the port is not a number in 1..65535");
  return std::make_unique<RedisStore>(host, port, connect_timeout_s, user, password);
}

}  // namespace

std::unique_ptr<RendezvousStore> open_rendezvous_store(const std::string& url,
                                                       double connect_timeout_s) {
  if (!(connect_timeout_s > 0) || !std::isfinite(connect_timeout_s))
    throw std::invalid_argument("rendezvous store '" + url +
                                "': the connect timeout must be a positive number of seconds");
  const std::string file_scheme = "file://";
  const std::string redis_scheme = "redis://";
  if (url.starts_with(file_scheme)) {
    const std::string directory = url.substr(file_scheme.size());
    if (directory.empty() || directory.front() != '/')
      malformed(url, "the directory is not an absolute path");
    return std::make_unique<FileStore>(directory);
  }
  if (url.starts_with(redis_scheme))
    return open_redis(url, url.substr(redis_scheme.size()), connect_timeout_s);
  malformed(url, "unknown scheme");
}

std::string redacted_store_url(const std::string& url) {
  const std::string scheme = "redis://";
  const auto at = url.rfind('@');
  if (!url.starts_with(scheme) || at == std::string::npos) return url;
  return scheme + "***@" + url.substr(at + 1);
}

std::vector<char> store_bytes(const std::string& text) { return {text.begin(), text.end()}; }

std::string store_text(const std::vector<char>& bytes) { return {bytes.begin(), bytes.end()}; }

void check_store_key(const std::string& key) {
  const auto reject = [&](const char* why) {
    throw std::invalid_argument("invalid rendezvous store key '" + key + "': " + why);
  };
  if (key.empty()) reject("empty");
  if (!printable_without_spaces(key)) reject("not printable ASCII without spaces");
  if (key.find("..") != std::string::npos) reject("contains '..'");
  std::size_t begin = 0;
  while (true) {
    const auto end = std::min(key.find('/', begin), key.size());
    if (end == begin) reject("has an empty component (a leading, trailing or double '/')");
    if (key[begin] == '.') reject("has a component starting with '.'");
    if (end == key.size()) return;
    begin = end + 1;
  }
}

void check_store_key_prefix(const std::string& prefix) {
  if (!printable_without_spaces(prefix))
    throw std::invalid_argument("invalid rendezvous store key prefix '" + prefix +
                                "': not printable ASCII without spaces");
}

}  // namespace strata
