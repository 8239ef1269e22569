// How the emulated network's engine hands one call to its copy kernel (transport/net_copy.cuh):
// each copy cut into pieces of at most kNetCopyPieceBytes, in order, into the kernel's by-value
// argument struct, which is launched whenever its pieces are full; the call's words ride in the
// launch with its last pieces (the kernel writes them once that launch's pieces have landed, and
// the stream ran the call's earlier launches before it), and words beyond what one launch holds in
// launches of words alone after it. Pure (addresses come from the caller), so the CPU tests check it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "net/emulated_scheduler.hpp"
#include "switchyard/transport/net_copy.cuh"

namespace switchyard::net {

// `address(copy, &dst, &src)` gives a copy's device addresses; `launch(args)` runs the kernel on
// args.count pieces (0 to kNetCopyMaxItems) and args.num_words words (0 to kNetCopyMaxWords), at
// least one of them. Returns the launches made.
template <class Address, class Launch>
int plan_call(const Executor::Copy* copies, size_t count, const device::NetCopyWord* words, size_t num_words,
              device::NetCopyArgs& args, Address&& address, Launch&& launch) {
    int launches = 0;
    args.count = 0;
    args.num_words = 0;
    auto flush = [&] {
        launch(static_cast<const device::NetCopyArgs&>(args));
        ++launches;
        args.count = 0;
        args.num_words = 0;
    };
    for (size_t i = 0; i < count; ++i) {
        uint64_t dst = 0, src = 0;
        address(copies[i], &dst, &src);
        for (uint64_t done = 0; done < copies[i].bytes; done += device::kNetCopyPieceBytes) {
            if (args.count == device::kNetCopyMaxItems) flush();
            args.items[args.count++] = {dst + done, src + done,
                                        std::min(device::kNetCopyPieceBytes, copies[i].bytes - done)};
        }
    }
    for (size_t w = 0; w < num_words; ++w) {
        if (args.num_words == device::kNetCopyMaxWords) flush();
        args.words[args.num_words++] = words[w];
    }
    if (args.count > 0 || args.num_words > 0) flush();
    return launches;
}

}  // namespace switchyard::net
