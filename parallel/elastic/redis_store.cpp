#include "parallel/elastic/redis_store.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "parallel/elastic/store_key.h"

namespace strata {

namespace {

timeval timeval_of(double seconds) {
  const long long microseconds = std::llround(seconds * 1e6);
  return timeval{static_cast<time_t>(microseconds / 1000000),
                 static_cast<suseconds_t>(microseconds % 1000000)};
}

// hiredis sends with write(), and writing to a connection the server has closed raises SIGPIPE,
// whose default action ends the process (a value larger than the socket's buffer takes several
// writes, the second after the server's reset). While it lives, SIGPIPE is blocked in this thread
// (a socket write's SIGPIPE goes to the thread that wrote); one raised meanwhile is taken off the
// pending set before the mask is restored, so it is never delivered and hiredis reports EPIPE.
// Ignoring SIGPIPE process-wide would change it for the whole application.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&sigpipe_);
    sigaddset(&sigpipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &sigpipe_, &previous_);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;
  ~SigpipeBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{0, 0};
      while (sigtimedwait(&sigpipe_, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }

 private:
  sigset_t sigpipe_;
  sigset_t previous_;
  bool was_pending_ = false;
};

// A Redis glob matching exactly the keys that start with `prefix`.
std::string match_prefix(const std::string& prefix) {
  std::string pattern;
  for (const char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') pattern += '\\';
    pattern += c;
  }
  return pattern + '*';
}

std::string_view view_of(const std::vector<char>& bytes) { return {bytes.data(), bytes.size()}; }

}  // namespace

void RedisStore::ContextDeleter::operator()(redisContext* context) const { redisFree(context); }

void RedisStore::ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

RedisStore::RedisStore(const std::string& host, int port, double timeout_s, std::string user,
                       std::string password)
    : host_(host),
      port_(port),
      timeout_s_(timeout_s),
      user_(std::move(user)),
      password_(std::move(password)) {
  connect();
}

RedisStore::~RedisStore() = default;

std::string RedisStore::url() const {
  const bool ipv6 = host_.find(':') != std::string::npos;
  return "redis://" + (ipv6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

void RedisStore::fail(const std::string& what) const {
  throw StoreUnavailable("rendezvous store " + url() + ": " + what);
}

void RedisStore::connect() {
  context_.reset();
  const timeval timeout = timeval_of(timeout_s_);
  std::unique_ptr<redisContext, ContextDeleter> context(
      redisConnectWithTimeout(host_.c_str(), port_, timeout));
  if (!context) fail("cannot allocate a connection");
  if (context->err)
    fail("cannot connect within " + std::to_string(timeout_s_) + " s (" + context->errstr + ")");
  if (redisSetTimeout(context.get(), timeout) != REDIS_OK)
    fail(std::string("cannot set the reply timeout (") + context->errstr + ")");
  context_ = std::move(context);
  if (password_.empty()) return;
  std::vector<std::string_view> auth{"AUTH"};
  if (!user_.empty()) auth.push_back(user_);
  auth.push_back(password_);
  const Reply reply = send(auth);
  if (!reply) fail("the connection was lost during AUTH");
  if (reply->type == REDIS_REPLY_ERROR) {
    context_.reset();
    fail("AUTH was refused (" + std::string(reply->str, reply->len) + ")");
  }
}

RedisStore::Reply RedisStore::send(const std::vector<std::string_view>& arguments) {
  std::vector<const char*> pointers;
  std::vector<std::size_t> lengths;
  for (const std::string_view argument : arguments) {
    pointers.push_back(argument.empty() ? "" : argument.data());  // hiredis copies from it
    lengths.push_back(argument.size());
  }
  return Reply(static_cast<redisReply*>(redisCommandArgv(
      context_.get(), static_cast<int>(arguments.size()), pointers.data(), lengths.data())));
}

RedisStore::Reply RedisStore::command(const std::vector<std::string_view>& arguments, Retry retry) {
  const std::string name(arguments.front());
  const SigpipeBlocked sigpipe_blocked;
  if (!context_) connect();
  Reply reply;
  if (retry == Retry::resend) {
    reply = send(arguments);
    if (!reply) {
      connect();
      reply = send(arguments);
    }
  } else {
    if (!send({"PING"})) connect();
    reply = send(arguments);
    if (!reply) {
      const std::string lost = context_->errstr;
      context_.reset();
      fail("the connection was lost during " + name + " (" + lost +
           "); whether it was applied is unknown");
    }
  }
  if (!reply) {
    const std::string lost = context_->errstr;
    context_.reset();
    fail("the connection was lost during " + name + " (" + lost + ")");
  }
  if (reply->type == REDIS_REPLY_ERROR)
    fail(name + " failed: " + std::string(reply->str, reply->len));
  return reply;
}

void RedisStore::set(const std::string& key, const std::vector<char>& value) {
  check_store_key(key);
  const std::lock_guard<std::mutex> lock(mutex_);
  command({"SET", key, view_of(value)}, Retry::resend);
}

std::optional<std::vector<char>> RedisStore::get(const std::string& key) {
  check_store_key(key);
  const std::lock_guard<std::mutex> lock(mutex_);
  const Reply reply = command({"GET", key}, Retry::resend);
  if (reply->type == REDIS_REPLY_NIL) return std::nullopt;
  if (reply->type != REDIS_REPLY_STRING) fail("GET '" + key + "' did not answer a string");
  return std::vector<char>(reply->str, reply->str + reply->len);
}

bool RedisStore::create(const std::string& key, const std::vector<char>& value) {
  check_store_key(key);
  const std::lock_guard<std::mutex> lock(mutex_);
  const Reply reply = command({"SET", key, view_of(value), "NX"}, Retry::ping_first);
  return reply->type != REDIS_REPLY_NIL;  // "OK" when it was set
}

std::int64_t RedisStore::add(const std::string& key, std::int64_t delta) {
  check_store_key(key);
  const std::lock_guard<std::mutex> lock(mutex_);
  const std::string text = std::to_string(delta);
  const Reply reply = command({"INCRBY", key, text}, Retry::ping_first);
  if (reply->type != REDIS_REPLY_INTEGER) fail("INCRBY '" + key + "' did not answer an integer");
  return reply->integer;
}

void RedisStore::remove(const std::string& key) {
  check_store_key(key);
  const std::lock_guard<std::mutex> lock(mutex_);
  command({"DEL", key}, Retry::resend);
}

std::vector<std::string> RedisStore::keys(const std::string& prefix) {
  check_store_key_prefix(prefix);
  const std::string pattern = match_prefix(prefix);
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> found;
  std::string cursor = "0";
  do {
    const Reply reply = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"}, Retry::resend);
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[1]->type != REDIS_REPLY_ARRAY)
      fail("SCAN did not answer a cursor and an array of keys");
    cursor.assign(reply->element[0]->str, reply->element[0]->len);
    const redisReply* batch = reply->element[1];
    for (std::size_t i = 0; i < batch->elements; ++i) {
      if (batch->element[i]->type != REDIS_REPLY_STRING)
        fail("SCAN answered a key that is not a string");
      found.emplace_back(batch->element[i]->str, batch->element[i]->len);
    }
  } while (cursor != "0");
  // SCAN may return a key more than once (when the table is rehashed during the walk).
  std::sort(found.begin(), found.end());
  found.erase(std::unique(found.begin(), found.end()), found.end());
  return found;
}

}  // namespace strata
