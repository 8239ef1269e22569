// Socket helpers of the local-process communicator; see local_process_communicator_io.hpp.
#include "comm/local_process_communicator_io.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "switchyard/errors.hpp"

namespace switchyard::comm_detail {

Fd& Fd::operator=(Fd&& other) noexcept {
    if (this != &other) {
        reset();
        fd_ = other.release();
    }
    return *this;
}

void Fd::reset() {
    // close() is not retried on EINTR: on Linux the descriptor is released either way.
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

[[noreturn]] void throw_system_error(const std::string& what) {
    const int error = errno;
    throw Error("switchyard: " + what + ": " + std::strerror(error));
}

int remaining_ms(Clock::time_point deadline) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

namespace {

bool is_closed_error(int error) {
    return error == EPIPE || error == ECONNRESET || error == ENOTCONN;
}

// Waits for `events` on fd. Returns the revents, or 0 if the deadline passed.
short wait_for(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        pollfd entry{fd, events, 0};
        const int rc = ::poll(&entry, 1, remaining_ms(deadline));
        if (rc > 0) return entry.revents;
        if (rc == 0) return 0;
        if (errno != EINTR) throw_system_error("poll on a communicator socket failed");
    }
}

}  // namespace

long read_some(int fd, void* data, size_t bytes) {
    for (;;) {
        const ssize_t n = ::recv(fd, data, bytes, MSG_DONTWAIT);
        if (n > 0) return n;
        if (n == 0) return bytes == 0 ? 0 : -1;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        if (is_closed_error(errno)) return -1;
        throw_system_error("recv on a communicator socket failed");
    }
}

IoStatus read_all(int fd, void* data, size_t bytes, Clock::time_point deadline) {
    auto* cursor = static_cast<unsigned char*>(data);
    while (bytes > 0) {
        const long n = read_some(fd, cursor, bytes);
        if (n < 0) return IoStatus::kClosed;
        if (n > 0) {
            cursor += n;
            bytes -= static_cast<size_t>(n);
            continue;
        }
        // POLLHUP/POLLERR also wake us; the next recv then reports EOF or the error.
        if (wait_for(fd, POLLIN, deadline) == 0) return IoStatus::kTimedOut;
    }
    return IoStatus::kDone;
}

IoStatus write_all(int fd, const void* data, size_t bytes, Clock::time_point deadline, bool watch_input) {
    const auto* cursor = static_cast<const unsigned char*>(data);
    while (bytes > 0) {
        const ssize_t n = ::send(fd, cursor, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            cursor += n;
            bytes -= static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && is_closed_error(errno)) return IoStatus::kClosed;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            throw_system_error("send on a communicator socket failed");
        const short revents =
            wait_for(fd, static_cast<short>(POLLOUT | (watch_input ? POLLIN : 0)), deadline);
        if (revents == 0) return IoStatus::kTimedOut;
        // The peer answered before reading all we send: it is an error notice; let the caller read it.
        if (watch_input && (revents & (POLLIN | POLLHUP))) return IoStatus::kPeerSpoke;
    }
    return IoStatus::kDone;
}

void send_best_effort(int fd, const void* data, size_t bytes) {
    ssize_t n;
    do {
        n = ::send(fd, data, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
}

std::string abstract_socket_name(const std::string& key) {
    // sun_path holds 108 bytes; the abstract name takes the leading NUL plus the name itself.
    constexpr size_t kMaxName = sizeof(sockaddr_un{}.sun_path) - 1;
    std::string name = "switchyard-" + key;
    if (name.size() > kMaxName) {
        uint64_t hash = 1469598103934665603ull;  // FNV-1a: keeps long keys distinct after truncation
        for (unsigned char c : key) hash = (hash ^ c) * 1099511628211ull;
        char suffix[24];
        std::snprintf(suffix, sizeof suffix, "-%016llx", static_cast<unsigned long long>(hash));
        name = name.substr(0, kMaxName - std::strlen(suffix)) + suffix;
    }
    return std::string(1, '\0') + name;
}

}  // namespace switchyard::comm_detail
