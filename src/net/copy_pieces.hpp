// How the emulated network's engine hands one call's copies to its copy kernel
// (transport/net_copy.cuh): each copy cut into pieces of at most kNetCopyPieceBytes, in order, into
// the kernel's by-value argument struct, which is launched whenever it is full and once at the end.
// Pure (addresses come from the caller), so the CPU tests check it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "net/emulated_scheduler.hpp"
#include "switchyard/transport/net_copy.cuh"

namespace switchyard::net {

// `address(copy, &dst, &src)` gives a copy's device addresses; `launch(args)` runs the kernel on
// args.count pieces (1 to kNetCopyMaxItems). Returns the launches made.
template <class Address, class Launch>
int cut_into_pieces(const Executor::Copy* copies, size_t count, device::NetCopyArgs& args, Address&& address,
                    Launch&& launch) {
    int launches = 0;
    args.count = 0;
    auto flush = [&] {
        launch(static_cast<const device::NetCopyArgs&>(args));
        ++launches;
        args.count = 0;
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
    if (args.count > 0) flush();
    return launches;
}

}  // namespace switchyard::net
