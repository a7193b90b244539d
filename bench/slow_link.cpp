// slow_link: a TCP proxy on 127.0.0.1 that makes a link slow, for bench/remote.py where the kernel has no
// netem. Each direction is paced to RATE bits per second, shared by all connections as one link's
// bandwidth is, then held for half of RTT: what a link of that bandwidth and round-trip time delivers,
// without TCP's slow start.
//
//   slow_link UPSTREAM_PORT RTT_MS RATE_BITS_PER_SECOND     # prints "port P" once listening; runs until killed
//
// A reader thread and a writer thread per direction: the reader stamps each chunk with when its last
// byte leaves the link plus the delay, the writer sends it then.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Chunk {
  Clock::time_point due;
  std::string bytes;  // empty: the sender closed its side
};

// One direction of the link: when its last byte so far leaves it.
struct Direction {
  std::mutex mutex;
  Clock::time_point sent_until = Clock::now();

  // When `bytes` read now have left the link.
  Clock::time_point send(size_t bytes, double bytes_per_s) {
    std::lock_guard lock(mutex);
    sent_until = std::max(Clock::now(), sent_until) +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(bytes / bytes_per_s));
    return sent_until;
  }
};

// One direction of one connection.
class Pipe {
 public:
  Pipe(int from, int to, Direction& link, double delay_s, double bytes_per_s)
      : from_(from), to_(to), link_(link), delay_(delay_s), rate_(bytes_per_s) {}

  void run() {
    std::thread writer([this] { write_loop(); });
    read_loop();
    writer.join();
  }

 private:
  void read_loop() {
    std::vector<char> buffer(256 * 1024);
    for (;;) {
      const ssize_t got = ::read(from_, buffer.data(), buffer.size());
      if (got < 0 && errno == EINTR) continue;
      // At most kQueued chunks wait for the link: the sender is held back as a slow link holds it back.
      {
        std::unique_lock lock(mutex_);
        room_.wait(lock, [&] { return queue_.size() < kQueued || closed_; });
        if (closed_) return;  // the receiver is gone
      }
      Chunk chunk;
      // Paced to the rate, then delayed: when its last bit leaves the link, plus the latency.
      chunk.due = (got > 0 ? link_.send(static_cast<size_t>(got), rate_) : Clock::now()) +
                  std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay_));
      if (got > 0) chunk.bytes.assign(buffer.data(), static_cast<size_t>(got));
      const bool end = got <= 0;
      {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(chunk));
      }
      ready_.notify_one();
      if (end) return;
    }
  }

  void write_loop() {
    for (;;) {
      Chunk chunk;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !queue_.empty(); });
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      room_.notify_one();
      std::this_thread::sleep_until(chunk.due);
      if (chunk.bytes.empty()) break;
      size_t done = 0;
      while (done < chunk.bytes.size()) {
        const ssize_t put = ::send(to_, chunk.bytes.data() + done, chunk.bytes.size() - done, MSG_NOSIGNAL);
        if (put <= 0) {
          ::shutdown(from_, SHUT_RD);  // the receiver is gone: stop reading too
          std::lock_guard lock(mutex_);
          closed_ = true;
          room_.notify_one();
          return;
        }
        done += static_cast<size_t>(put);
      }
    }
    ::shutdown(to_, SHUT_WR);
  }

  int from_, to_;
  Direction& link_;
  double delay_, rate_;
  static constexpr size_t kQueued = 16;  // 4 MiB
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  bool closed_ = false;  // the writer stopped
  std::deque<Chunk> queue_;
};

int connect_upstream(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: slow_link UPSTREAM_PORT RTT_MS RATE_BITS_PER_SECOND\n");
    return 2;
  }
  const int upstream = std::atoi(argv[1]);
  const double delay_s = std::atof(argv[2]) / 2000.0;  // half the round trip each way
  const double bytes_per_s = std::atof(argv[3]) / 8.0;
  if (upstream <= 0 || delay_s < 0 || !(bytes_per_s > 0)) {
    std::fprintf(stderr, "slow_link: bad arguments\n");
    return 2;
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(listener, 64) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    std::perror("slow_link: listen");
    return 1;
  }
  static Direction up, down;
  std::printf("port %d\n", ntohs(address.sin_port));
  std::fflush(stdout);
  for (;;) {
    const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors, or interrupted
      continue;
    }
    const int server = connect_upstream(upstream);
    if (server < 0) {
      ::close(client);
      continue;
    }
    for (const int fd : {client, server}) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    std::thread([client, server, delay_s, bytes_per_s] {
      auto to_server = std::make_shared<Pipe>(client, server, up, delay_s, bytes_per_s);
      auto to_client = std::make_shared<Pipe>(server, client, down, delay_s, bytes_per_s);
      std::thread there([to_server] { to_server->run(); });
      to_client->run();
      there.join();
      ::close(client);
      ::close(server);
    }).detach();
  }
}
