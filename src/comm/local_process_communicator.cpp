// Ranks as processes of one host, meeting through rank 0 over a Unix domain socket.
//
// Rank 0 listens on an abstract-namespace socket named after the key (nothing on the file system
// to clean up after a crash), every other rank connects to it and says hello (magic, rank, size).
// When all size - 1 peers have said hello, rank 0 closes the listener and welcomes everyone.
// all_gather is a star: each peer sends a request header plus its bytes, rank 0 gathers them in
// rank order into one buffer and sends the whole result to everyone; barrier is a 1-byte
// all_gather with its own operation code, so a barrier paired with an all_gather is caught.
//
// Failures. Rank 0 sees every peer, so it is the one that can name a missing or disconnected rank;
// when it fails it sends the verdict to every peer (status, peer, message) so their errors name the
// same rank. A peer whose own deadline passes first can only name rank 0. After any failure the
// communicator is unusable: later calls throw Error. Communicators are not thread-safe.
//
// Peers' processes. At creation the ranks all-gather their process id and start time; a rank then
// tells whether a peer's process is gone by reading /proc/<pid>/stat (absent, another process under
// that id, or a zombie), without communicating, so also after the group broke. A peer whose
// /proc entry did not match at creation (another PID namespace) is reported as unknown. shrink()
// forms the survivors' group under a key derived from this one.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/communicator_common.hpp"
#include "comm/local_process_communicator_io.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

using comm_detail::Clock;
using comm_detail::Fd;
using comm_detail::IoStatus;

constexpr uint32_t kHelloMagic = 0x53594801;  // "SYH", protocol 1
constexpr uint32_t kRequestMagic = 0x53595201;
constexpr uint32_t kReplyMagic = 0x53595001;
constexpr uint64_t kMaxMessage = 1 << 16;

enum class Op : uint32_t { kConnect = 0, kAllGather = 1, kBarrier = 2 };
enum class Status : int32_t { kOk = 0, kInvalidArgument = 1, kTimeout = 2, kError = 3 };

// Wire formats. Both ends are the same build on the same host, so native layout is fine.
struct Hello {
    uint32_t magic;
    int32_t rank;
    int32_t size;
    uint32_t reserved;
};
struct Request {
    uint32_t magic;
    Op op;
    uint64_t sequence;
    uint64_t bytes;
};
struct Reply {
    uint32_t magic;
    Status status;
    int32_t peer;  // kTimeout: the rank rank 0 was waiting for or lost
    uint32_t reserved;
    uint64_t length;  // kOk: result bytes; otherwise message bytes
};

const char* op_name(Op op) {
    switch (op) {
        case Op::kConnect:
            return "connect";
        case Op::kAllGather:
            return "all_gather";
        case Op::kBarrier:
            return "barrier";
    }
    return "unknown";
}

std::string strip_prefix(const std::string& message) {
    const std::string prefix = "switchyard: ";
    return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

// A process as /proc shows it: its id and start time (clock ticks after boot), so a reused id is
// told apart from the process that had it.
struct ProcessIdentity {
    int64_t pid = 0;
    uint64_t start_ticks = 0;
};

// The start time and state of process `pid` from /proc/<pid>/stat; false when it has no entry.
bool read_process(int64_t pid, uint64_t& start_ticks, char& state) {
    std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!file || !std::getline(file, line)) return false;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields follow the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return false;
    std::istringstream fields(line.substr(close + 1));
    std::string field;
    fields >> state;  // field 3
    for (int index = 4; index <= 22 && fields >> field; ++index)
        if (index == 22) start_ticks = std::strtoull(field.c_str(), nullptr, 10);
    return true;
}

ProcessIdentity own_identity() {
    ProcessIdentity identity;
    identity.pid = ::getpid();
    char state = 0;
    read_process(identity.pid, identity.start_ticks, state);
    return identity;
}

class LocalProcessCommunicator final : public Communicator {
  public:
    LocalProcessCommunicator(std::string key, int rank, int size, std::chrono::milliseconds timeout);

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void all_gather(const void* send, size_t bytes, void* recv, std::chrono::milliseconds timeout) override;
    void barrier(std::chrono::milliseconds timeout) override;
    std::string describe() const override {
        return "local-process rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (key " +
               key_ + ")";
    }
    PeerStatus peer_status(int rank) const override;
    std::string describe_process(int rank) const override;
    std::shared_ptr<Communicator> shrink(const std::vector<int>& gone, std::chrono::milliseconds timeout) override;

  private:
    struct Pending {  // an accepted connection that has not finished its hello
        Fd fd;
        Hello hello{};
        size_t got = 0;
    };

    std::string where() const { return "local-process communicator, key '" + key_ + "'"; }

    void connect_as_root(std::chrono::milliseconds timeout);
    void connect_as_peer(std::chrono::milliseconds timeout);
    void run(Op op, const void* send, size_t bytes, void* recv, std::chrono::milliseconds timeout);
    void run_root(Op op, size_t bytes, unsigned char* recv, Clock::time_point deadline,
                  std::chrono::milliseconds timeout);
    void run_peer(Op op, const void* send, size_t bytes, void* recv, Clock::time_point deadline,
                  std::chrono::milliseconds timeout);
    void read_reply(Op op, void* recv, uint64_t expected, Clock::time_point deadline,
                    std::chrono::milliseconds timeout);

    // Rank 0: tell every peer (and `extra` connections) why the group failed, then throw.
    [[noreturn]] void fail_root(Status status, int peer, Op op, const std::string& message,
                                std::vector<Pending>* extra = nullptr);
    [[noreturn]] void fail_peer_timeout(Op op, std::chrono::milliseconds timeout);
    [[noreturn]] void fail_peer_closed(Op op);
    void check_usable(Op op) const;

    // Every rank's process as it introduced itself, and whether this rank's /proc showed the same
    // process then (false: another PID namespace, so /proc cannot answer for it).
    void exchange_identities(std::chrono::milliseconds timeout);

    const std::string key_;
    const int rank_;
    const int size_;
    std::vector<ProcessIdentity> processes_;
    std::vector<bool> process_visible_;
    std::vector<Fd> peers_;  // rank 0: one per rank (peers_[0] unused); others: peers_[0] = rank 0
    uint64_t sequence_ = 0;
    std::string broken_;  // first failure; non-empty = unusable
};

LocalProcessCommunicator::LocalProcessCommunicator(std::string key, int rank, int size,
                                                   std::chrono::milliseconds timeout)
    : key_(std::move(key)), rank_(rank), size_(size), peers_(static_cast<size_t>(size)) {
    if (size_ > 1) {  // else nobody to meet
        const auto start = Clock::now();
        if (rank_ == 0) {
            connect_as_root(timeout);
        } else {
            connect_as_peer(timeout);
        }
        timeout = std::max(std::chrono::milliseconds(1000),
                           timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start));
    }
    exchange_identities(timeout);
}

void LocalProcessCommunicator::exchange_identities(std::chrono::milliseconds timeout) {
    processes_.assign(size_t(size_), ProcessIdentity{});
    process_visible_.assign(size_t(size_), false);
    const ProcessIdentity mine = own_identity();
    if (size_ > 1)
        all_gather(&mine, sizeof mine, processes_.data(), timeout);
    else
        processes_[0] = mine;
    for (int r = 0; r < size_; ++r) {
        uint64_t start_ticks = 0;
        char state = 0;
        process_visible_[r] = processes_[r].start_ticks != 0 &&
                              read_process(processes_[r].pid, start_ticks, state) &&
                              start_ticks == processes_[r].start_ticks;
    }
}

PeerStatus LocalProcessCommunicator::peer_status(int rank) const {
    if (rank == rank_) return PeerStatus::kAlive;
    if (rank < 0 || rank >= size_ || !process_visible_[rank]) return PeerStatus::kUnknown;
    uint64_t start_ticks = 0;
    char state = 0;
    if (!read_process(processes_[rank].pid, start_ticks, state)) return PeerStatus::kGone;
    if (start_ticks != processes_[rank].start_ticks) return PeerStatus::kGone;  // the id was reused
    if (state == 'Z' || state == 'X' || state == 'x') return PeerStatus::kGone;  // exited, not yet reaped
    return PeerStatus::kAlive;
}

std::string LocalProcessCommunicator::describe_process(int rank) const {
    if (rank < 0 || rank >= size_ || !process_visible_[rank]) return {};
    return "process " + std::to_string(processes_[rank].pid) + " on this host";
}

std::shared_ptr<Communicator> LocalProcessCommunicator::shrink(const std::vector<int>& gone,
                                                               std::chrono::milliseconds timeout) {
    const std::vector<int> sorted = comm_detail::checked_gone(gone, rank_, size_, describe());
    std::string key = key_ + "/without";
    for (int r : sorted) key += "-" + std::to_string(r);
    auto survivors = std::make_shared<LocalProcessCommunicator>(key, shrunk_rank(rank_, sorted),
                                                                size_ - int(sorted.size()), timeout);
    comm_detail::verify_shrink(*survivors, rank_, sorted, timeout);
    return survivors;
}

// --- Rendezvous -------------------------------------------------------------------------------------

sockaddr_un make_address(const std::string& key, socklen_t& length) {
    const std::string name = comm_detail::abstract_socket_name(key);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, name.data(), name.size());
    // Abstract names are not NUL-terminated: the length says where the name ends.
    length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
    return address;
}

void LocalProcessCommunicator::connect_as_root(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    socklen_t length = 0;
    const sockaddr_un address = make_address(key_, length);
    Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!listener.valid()) comm_detail::throw_system_error("socket(AF_UNIX) failed");
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
        if (errno == EADDRINUSE) {
            throw InvalidArgument("switchyard: local-process communicator key '" + key_ +
                                  "' is already in use on this host: another rank 0 with the same key is "
                                  "running (use a key unique to the job)");
        }
        comm_detail::throw_system_error("bind of the rendezvous socket for key '" + key_ + "' failed");
    }
    if (::listen(listener.get(), std::min(size_, SOMAXCONN)) != 0)
        comm_detail::throw_system_error("listen failed");

    std::vector<Pending> pending;
    int joined = 0;
    while (joined < size_ - 1) {
        std::vector<pollfd> fds{{listener.get(), POLLIN, 0}};
        for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
        const int rc = ::poll(fds.data(), fds.size(), comm_detail::remaining_ms(deadline));
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) comm_detail::throw_system_error("poll on the rendezvous socket failed");
        if (rc == 0) {
            int missing = -1, count = 0;
            for (int r = 1; r < size_; ++r) {
                if (peers_[r].valid()) continue;
                if (missing < 0) missing = r;
                ++count;
            }
            std::string waiting_for = "rank " + std::to_string(missing) + " to connect";
            if (count > 1) waiting_for += " (and " + std::to_string(count - 1) + " more)";
            fail_root(Status::kTimeout, missing, Op::kConnect,
                      comm_detail::timeout_message(0, timeout, "connect", waiting_for, where()), &pending);
        }
        if (fds[0].revents & POLLIN) {
            for (;;) {
                const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd >= 0) {
                    pending.push_back(Pending{Fd(fd)});
                    continue;
                }
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                comm_detail::throw_system_error("accept on the rendezvous socket failed");
            }
        }
        for (size_t i = 1; i < fds.size(); ++i) {
            if (fds[i].revents == 0) continue;
            Pending& p = pending[i - 1];
            const long n = comm_detail::read_some(p.fd.get(), reinterpret_cast<char*>(&p.hello) + p.got,
                                                  sizeof(Hello) - p.got);
            if (n < 0) {
                p.fd.reset();  // connected and left before saying hello: forget it
                continue;
            }
            p.got += static_cast<size_t>(n);
            if (p.got < sizeof(Hello)) continue;
            const Hello& h = p.hello;
            std::string problem;
            if (h.magic != kHelloMagic) {
                problem = "a process connected with a foreign or different-version hello";
            } else if (h.size != size_) {
                problem = "rank " + std::to_string(h.rank) + " was created with size " +
                          std::to_string(h.size) + " but rank 0 with size " + std::to_string(size_);
            } else if (h.rank < 1 || h.rank >= size_) {
                problem = "a process connected claiming rank " + std::to_string(h.rank) + " of " +
                          std::to_string(size_);
            } else if (peers_[h.rank].valid()) {
                problem = "two processes claim rank " + std::to_string(h.rank);
            }
            if (!problem.empty()) {
                fail_root(Status::kInvalidArgument, h.rank, Op::kConnect,
                          "switchyard: " + problem + " (" + where() + ")", &pending);
            }
            peers_[h.rank] = std::move(p.fd);
            ++joined;
        }
        std::erase_if(pending, [](const Pending& p) { return !p.fd.valid(); });
    }
    listener.reset();  // the group is complete; late or stray processes get ECONNREFUSED

    const Reply welcome{kReplyMagic, Status::kOk, -1, 0, 0};
    for (int r = 1; r < size_; ++r) {
        const IoStatus io =
            comm_detail::write_all(peers_[r].get(), &welcome, sizeof welcome, deadline, false);
        if (io == IoStatus::kClosed) {
            fail_root(Status::kTimeout, r, Op::kConnect,
                      "switchyard: rank 0 lost rank " + std::to_string(r) +
                          " in connect: it closed its connection (exited or crashed) (" + where() + ")");
        }
        if (io != IoStatus::kDone) {
            fail_root(
                Status::kTimeout, r, Op::kConnect,
                comm_detail::timeout_message(0, timeout, "connect", "rank " + std::to_string(r), where()));
        }
    }
}

void LocalProcessCommunicator::connect_as_peer(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    socklen_t length = 0;
    const sockaddr_un address = make_address(key_, length);
    auto backoff = std::chrono::milliseconds(2);
    // Rank 0 may start later than us: retry until the listener exists (ECONNREFUSED) or has room in
    // its backlog (EAGAIN).
    for (;;) {
        Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!fd.valid()) comm_detail::throw_system_error("socket(AF_UNIX) failed");
        if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), length) == 0) {
            peers_[0] = std::move(fd);
            break;
        }
        if (errno != ECONNREFUSED && errno != EAGAIN && errno != ENOENT && errno != EINTR) {
            comm_detail::throw_system_error("connect to rank 0 for key '" + key_ + "' failed");
        }
        if (Clock::now() >= deadline) fail_peer_timeout(Op::kConnect, timeout);
        std::this_thread::sleep_for(
            std::min<Clock::duration>(backoff, std::max<Clock::duration>(deadline - Clock::now(), {})));
        backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
    }
    const Hello hello{kHelloMagic, rank_, size_, 0};
    const IoStatus io = comm_detail::write_all(peers_[0].get(), &hello, sizeof hello, deadline, true);
    if (io == IoStatus::kTimedOut) fail_peer_timeout(Op::kConnect, timeout);
    // Also after kClosed: rank 0 may have sent its verdict before closing; read_reply finds it or
    // reports the closed connection.
    read_reply(Op::kConnect, nullptr, 0, deadline, timeout);
}

// --- Failures ----------------------------------------------------------------------------------------

void LocalProcessCommunicator::fail_root(Status status, int peer, Op op, const std::string& message,
                                         std::vector<Pending>* extra) {
    broken_ = message;
    const Reply notice{kReplyMagic, status, peer, 0, message.size()};
    std::string wire(reinterpret_cast<const char*>(&notice), sizeof notice);
    wire += message;
    // Peers are at a message boundary (waiting for a reply, or still writing and watching for one),
    // so the notice is read as a reply. Shutting down our side afterwards makes any later read on
    // theirs end with EOF instead of waiting.
    auto notify = [&](Fd& fd) {
        if (!fd.valid()) return;
        comm_detail::send_best_effort(fd.get(), wire.data(), wire.size());
        ::shutdown(fd.get(), SHUT_WR);
    };
    for (int r = 1; r < size_; ++r) notify(peers_[r]);
    if (extra) {
        for (Pending& p : *extra) notify(p.fd);
    }
    switch (status) {
        case Status::kInvalidArgument:
            throw InvalidArgument(message);
        case Status::kTimeout:
            throw TimeoutError(message, 0, peer, op_name(op));
        default:
            throw Error(message);
    }
}

void LocalProcessCommunicator::fail_peer_timeout(Op op, std::chrono::milliseconds timeout) {
    broken_ = comm_detail::timeout_message(rank_, timeout, op_name(op), "rank 0", where());
    throw TimeoutError(broken_, rank_, 0, op_name(op));
}

void LocalProcessCommunicator::fail_peer_closed(Op op) {
    broken_ = "switchyard: rank " + std::to_string(rank_) + " lost rank 0 in " + op_name(op) +
              ": it closed the connection (exited or crashed) (" + where() + ")";
    throw TimeoutError(broken_, rank_, 0, op_name(op));
}

void LocalProcessCommunicator::check_usable(Op op) const {
    if (broken_.empty()) return;
    throw Error("switchyard: rank " + std::to_string(rank_) + " cannot enter " + op_name(op) +
                ": the local-process communicator is unusable after an earlier failure (" +
                strip_prefix(broken_) + "); create a new one with a new key");
}

// Reads rank 0's reply: the result (status kOk) or its verdict, which is rethrown here.
void LocalProcessCommunicator::read_reply(Op op, void* recv, uint64_t expected, Clock::time_point deadline,
                                          std::chrono::milliseconds timeout) {
    Reply reply{};
    IoStatus io = comm_detail::read_all(peers_[0].get(), &reply, sizeof reply, deadline);
    if (io == IoStatus::kClosed) fail_peer_closed(op);
    if (io == IoStatus::kTimedOut) fail_peer_timeout(op, timeout);
    if (reply.magic != kReplyMagic || (reply.status == Status::kOk && reply.length != expected) ||
        (reply.status != Status::kOk && reply.length > kMaxMessage)) {
        broken_ = "switchyard: rank " + std::to_string(rank_) + " got a malformed reply from rank 0 in " +
                  op_name(op) + " (" + where() + ")";
        throw Error(broken_);
    }
    if (reply.status == Status::kOk) {
        io = comm_detail::read_all(peers_[0].get(), recv, expected, deadline);
        if (io == IoStatus::kClosed) fail_peer_closed(op);
        if (io == IoStatus::kTimedOut) fail_peer_timeout(op, timeout);
        return;
    }
    std::string verdict(reply.length, '\0');
    io = comm_detail::read_all(peers_[0].get(), verdict.data(), verdict.size(), deadline);
    if (io != IoStatus::kDone) verdict = "(rank 0's message was cut off)";
    broken_ = "switchyard: rank " + std::to_string(rank_) + " stopped in " + op_name(op) +
              " because rank 0 reported: " + strip_prefix(verdict);
    switch (reply.status) {
        case Status::kInvalidArgument:
            throw InvalidArgument(broken_);
        case Status::kTimeout:
            throw TimeoutError(broken_, rank_, reply.peer, op_name(op));
        default:
            throw Error(broken_);
    }
}

// --- Collectives -------------------------------------------------------------------------------------

void LocalProcessCommunicator::all_gather(const void* send, size_t bytes, void* recv,
                                          std::chrono::milliseconds timeout) {
    comm_detail::check_collective_args(send, bytes, recv, timeout, describe());
    run(Op::kAllGather, send, bytes, recv, timeout);
}

void LocalProcessCommunicator::barrier(std::chrono::milliseconds timeout) {
    comm_detail::check_collective_args(nullptr, 0, nullptr, timeout, describe());
    const unsigned char token = 1;
    std::vector<unsigned char> sink(static_cast<size_t>(size_));
    run(Op::kBarrier, &token, 1, sink.data(), timeout);
}

void LocalProcessCommunicator::run(Op op, const void* send, size_t bytes, void* recv,
                                   std::chrono::milliseconds timeout) {
    check_usable(op);
    const auto deadline = Clock::now() + timeout;
    ++sequence_;
    if (rank_ == 0) {
        auto* out = static_cast<unsigned char*>(recv);
        if (bytes > 0) std::memmove(out, send, bytes);  // memmove: send may alias recv
        if (size_ > 1) run_root(op, bytes, out, deadline, timeout);
    } else {
        run_peer(op, send, bytes, recv, deadline, timeout);
    }
}

void LocalProcessCommunicator::run_root(Op op, size_t bytes, unsigned char* recv, Clock::time_point deadline,
                                        std::chrono::milliseconds timeout) {
    struct Inbound {
        Request header{};
        size_t header_got = 0;
        size_t payload_got = 0;
        bool done = false;
    };
    std::vector<Inbound> inbound(static_cast<size_t>(size_));
    int remaining = size_ - 1;
    // Read all peers concurrently so a peer that disconnects is noticed at once, whatever its rank.
    while (remaining > 0) {
        std::vector<pollfd> fds;
        std::vector<int> ranks;
        for (int r = 1; r < size_; ++r) {
            if (inbound[r].done) continue;
            fds.push_back({peers_[r].get(), POLLIN, 0});
            ranks.push_back(r);
        }
        const int rc = ::poll(fds.data(), fds.size(), comm_detail::remaining_ms(deadline));
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) comm_detail::throw_system_error("poll on communicator sockets failed");
        if (rc == 0) {
            std::string waiting_for = "rank " + std::to_string(ranks[0]);
            if (ranks.size() > 1) waiting_for += " (and " + std::to_string(ranks.size() - 1) + " more)";
            fail_root(Status::kTimeout, ranks[0], op,
                      comm_detail::timeout_message(0, timeout, op_name(op), waiting_for, where()));
        }
        for (size_t i = 0; i < fds.size(); ++i) {
            if (fds[i].revents == 0) continue;
            const int r = ranks[i];
            Inbound& in = inbound[r];
            long n;
            if (in.header_got < sizeof(Request)) {
                n = comm_detail::read_some(fds[i].fd, reinterpret_cast<char*>(&in.header) + in.header_got,
                                           sizeof(Request) - in.header_got);
                if (n > 0) in.header_got += static_cast<size_t>(n);
                if (n > 0 && in.header_got == sizeof(Request)) {
                    const Request& h = in.header;
                    std::string problem;
                    if (h.magic != kRequestMagic || h.sequence != sequence_) {
                        problem = "rank " + std::to_string(r) + " sent a malformed or out-of-order request";
                    } else if (h.op != op) {
                        problem = "rank " + std::to_string(r) + " entered " + op_name(h.op) +
                                  " but rank 0 entered " + op_name(op) +
                                  " (ranks must call the same collectives in the same order)";
                    } else if (h.bytes != bytes) {
                        problem = "rank " + std::to_string(r) + " entered " + op_name(op) + " with " +
                                  std::to_string(h.bytes) + " bytes but rank 0 with " +
                                  std::to_string(bytes) + " bytes (every rank must pass the same size)";
                    }
                    if (!problem.empty()) {
                        fail_root(Status::kInvalidArgument, r, op,
                                  "switchyard: " + problem + " (" + where() + ", collective #" +
                                      std::to_string(sequence_) + ")");
                    }
                }
            } else {
                n = comm_detail::read_some(fds[i].fd, recv + static_cast<size_t>(r) * bytes + in.payload_got,
                                           bytes - in.payload_got);
                if (n > 0) in.payload_got += static_cast<size_t>(n);
            }
            if (n < 0) {
                fail_root(Status::kTimeout, r, op,
                          "switchyard: rank 0 lost rank " + std::to_string(r) + " in " + op_name(op) +
                              ": it closed its connection (exited or crashed) (" + where() + ")");
            }
            if (in.header_got == sizeof(Request) && in.payload_got == bytes) {
                in.done = true;
                --remaining;
            }
        }
    }

    const Reply reply{kReplyMagic, Status::kOk, -1, 0, static_cast<uint64_t>(size_) * bytes};
    for (int r = 1; r < size_; ++r) {
        IoStatus io = comm_detail::write_all(peers_[r].get(), &reply, sizeof reply, deadline, false);
        if (io == IoStatus::kDone)
            io = comm_detail::write_all(peers_[r].get(), recv, reply.length, deadline, false);
        if (io == IoStatus::kClosed) {
            fail_root(Status::kTimeout, r, op,
                      "switchyard: rank 0 lost rank " + std::to_string(r) + " in " + op_name(op) +
                          " while sending the result: it closed its connection (" + where() + ")");
        }
        if (io != IoStatus::kDone) {
            fail_root(
                Status::kTimeout, r, op,
                comm_detail::timeout_message(0, timeout, op_name(op),
                                             "rank " + std::to_string(r) + " to read the result", where()));
        }
    }
}

void LocalProcessCommunicator::run_peer(Op op, const void* send, size_t bytes, void* recv,
                                        Clock::time_point deadline, std::chrono::milliseconds timeout) {
    const Request request{kRequestMagic, op, sequence_, bytes};
    IoStatus io = comm_detail::write_all(peers_[0].get(), &request, sizeof request, deadline, true);
    if (io == IoStatus::kDone) io = comm_detail::write_all(peers_[0].get(), send, bytes, deadline, true);
    if (io == IoStatus::kTimedOut) fail_peer_timeout(op, timeout);
    // kDone; or kPeerSpoke / kClosed: rank 0 answered early (a verdict, possibly followed by closing
    // the socket, which makes our send fail with ECONNRESET) and read_reply rethrows the verdict.
    read_reply(op, recv, static_cast<uint64_t>(size_) * bytes, deadline, timeout);
}

}  // namespace

std::shared_ptr<Communicator> make_local_process_communicator(const std::string& key, int rank, int size,
                                                              std::chrono::milliseconds timeout) {
    if (size < 1 || rank < 0 || rank >= size) {
        throw InvalidArgument(
            "switchyard: make_local_process_communicator needs 0 <= rank < size, got rank " +
            std::to_string(rank) + " of " + std::to_string(size));
    }
    if (key.empty())
        throw InvalidArgument("switchyard: make_local_process_communicator needs a non-empty key");
    if (timeout.count() < 0)
        throw InvalidArgument("switchyard: make_local_process_communicator: negative timeout");
    return std::make_shared<LocalProcessCommunicator>(key, rank, size, timeout);
}

}  // namespace switchyard
