// Non-blocking Unix-socket I/O with a deadline, for the local-process communicator.
//
// Every function waits with poll() on what is left of the caller's deadline, retries on EINTR and
// on short reads/writes, and never raises SIGPIPE (MSG_NOSIGNAL). A closed peer or an expired
// deadline is reported as a status rather than thrown, because only the caller knows which rank
// and phase to name in the error.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace switchyard::comm_detail {

using Clock = std::chrono::steady_clock;

enum class IoStatus {
    kDone,       // all bytes moved
    kClosed,     // the peer closed the connection (EOF, EPIPE, ECONNRESET)
    kTimedOut,   // the deadline passed first
    kPeerSpoke,  // write_all with watch_input: the peer sent something before we finished writing
};

// Owns a file descriptor; closes it on destruction.
class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& other) noexcept : fd_(other.release()) {}
    Fd& operator=(Fd&& other) noexcept;
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }

    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    int release() {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }
    void reset();

  private:
    int fd_ = -1;
};

// Milliseconds left until `deadline`, rounded up, clamped to [0, INT_MAX] for poll().
int remaining_ms(Clock::time_point deadline);

IoStatus read_all(int fd, void* data, size_t bytes, Clock::time_point deadline);
IoStatus write_all(int fd, const void* data, size_t bytes, Clock::time_point deadline, bool watch_input);

// Reads what is available without waiting. Returns bytes read (possibly 0 when nothing was ready),
// or -1 when the peer closed the connection.
long read_some(int fd, void* data, size_t bytes);

// One non-blocking attempt to send a short message; for best-effort error notices.
void send_best_effort(int fd, const void* data, size_t bytes);

// The abstract-namespace socket address for `key`: "\0switchyard-<key>", hashed if too long.
std::string abstract_socket_name(const std::string& key);

// Throws Error with strerror(errno) text.
[[noreturn]] void throw_system_error(const std::string& what);

}  // namespace switchyard::comm_detail
