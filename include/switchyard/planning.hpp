// Planning before a Buffer exists: the memory a BufferConfig takes, the shapes of every output of
// an op (and of the combine's `y`) for given arguments, and loading an op shape's kernels.
//
// Nothing here needs a Buffer or a tensor: an engine sizes its memory and warms its kernels from
// shapes alone. The sizes are computed by the functions the Buffer and the ops use themselves, so
// they are what the ops allocate. Only the kernel loaders need a GPU.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "switchyard/config.hpp"
#include "switchyard/dtype.hpp"
#include "switchyard/formats.hpp"

namespace switchyard {

struct DispatchArgs;
struct LowLatencyDispatchArgs;

// ---------------------------------------------------------------------------------------------
// Memory of a BufferConfig
// ---------------------------------------------------------------------------------------------

// Device memory one rank's Buffer takes for `config` with `num_ranks` ranks, by part (bytes).
struct BufferSizes {
    // The symmetric allocation every peer maps (Buffer::buffer_bytes()): the control workspace and
    // the data regions, each region aligned to 4 KiB and the whole to 2 MiB (so the regions do not
    // add up to `symmetric`).
    int64_t workspace = 0;    // signals and counters (HT combine arrival counters included)
    int64_t ht_dispatch = 0;  // HT dispatch receive region: R * T_max records
    int64_t ht_combine = 0;   // HT combine receive region: K * T_max combine records
    int64_t low_latency = 0;  // both LL sets
    int64_t ll_forward = 0;   // LL across nodes: the combine's forward area
    int64_t ll_zero_copy = 0; // LL zero-copy combine send area (BufferConfig::ll_zero_copy_combine)
    int64_t symmetric = 0;
    // Beside it, on the same device: the output pool reserved at creation for the largest single
    // op's outputs (capped at 1 GiB; beyond that the pool grows on demand) and the routing
    // kernel's scratch (HT).
    int64_t output_pool_reserve = 0;
    int64_t routing_scratch = 0;
    int64_t total = 0;  // symmetric + output_pool_reserve + routing_scratch
};

// `num_nodes`: the nodes (scale-up domains) the ranks span, emulated ones included
// (Topology::num_nodes); the LL regions grow with it. Throws InvalidArgument for a configuration
// Buffer would refuse (validate_config), num_ranks < 1, or num_nodes that does not divide it.
BufferSizes buffer_sizes(const BufferConfig& config, int num_ranks, int num_nodes = 1);
// buffer_sizes(config, num_ranks, num_nodes).symmetric: what Buffer::buffer_bytes() will report.
size_t buffer_bytes(const BufferConfig& config, int num_ranks, int num_nodes = 1);

// ---------------------------------------------------------------------------------------------
// Shapes of an op's outputs
// ---------------------------------------------------------------------------------------------

// The dtype, extents and strides (in elements) of one tensor an op returns or takes. ndim == 0:
// the op has no such tensor for these arguments.
struct TensorSpec {
    DType dtype = DType::kUInt8;
    int32_t ndim = 0;
    std::array<int64_t, 4> shape{};
    std::array<int64_t, 4> strides{};

    bool defined() const { return ndim > 0; }
    int64_t numel() const;
    // Bytes from the first element to one past the last (strided views span their whole stride).
    int64_t span_bytes() const;
};

// What an HT dispatch (Buffer::dispatch) is, without its tensors: what its outputs' shapes and its
// kernels depend on.
struct HtDispatchShape {
    int32_t num_tokens = 0;  // T of this rank (rows of x)
    int32_t hidden = 0;      // H
    int32_t topk = 0;        // K
    int32_t num_experts = 0; // E
    DType x_dtype = DType::kBFloat16;                 // kBFloat16, or kFloat8E4M3 with x_scales
    ScaleFormat x_scales = ScaleFormat::kNone;        // an fp8 x: kFloat32 or kUE8M0 scales
    bool quantize_fp8 = false;                        // a bf16 x quantized in the dispatch
    ScaleFormat quantize_format = ScaleFormat::kFloat32;
    bool has_weights = false;  // topk_weights given
    RecvLayout layout = RecvLayout::kRankMajor;
    int32_t expert_alignment = 1;
    CountMode counts = CountMode::kHostSynced;
    // A buffer whose ranks span several nodes runs the hierarchical kernels (ht_load_kernels): its
    // node count and network backend (kEmulated or kGin; kAuto counts as emulated). The outputs'
    // shapes are the same on any number of nodes.
    int32_t num_nodes = 1;
    NetworkBackend network_backend = NetworkBackend::kEmulated;

    // The shape of a call (its tensors' extents and dtypes; nothing is read from them; num_nodes
    // and network_backend stay as defaulted: the buffer knows them).
    static HtDispatchShape of(const DispatchArgs& args);
};

// Every tensor an HT dispatch returns and what the combine that answers it takes and returns.
struct HtOutputShapes {
    // Rows of recv_x (and of the combine's y): with host-synced counts given, exact; otherwise the
    // worst case, which a dispatch with device counts allocates (rank-major R * T_max; contiguous
    // R * T_max * min(K, L) + L * (alignment - 1)); masked always L * R * T_max. This is
    // DispatchResult::num_recv_rows's value once the op ran, except in the worst case, where that
    // tensor holds the rows actually written (rank-major: rows received; contiguous: including
    // padding; masked: L * R * T_max).
    int64_t num_recv_rows = 0;
    bool exact = false;  // num_recv_rows is the host-synced count given (or fixed, masked)
    // DispatchResult's tensors. Rank-major outputs are strided views of the receive region (one
    // record per row); expert-major ones are contiguous, with at least one row (an empty output
    // still has a valid pointer).
    TensorSpec recv_x;                      // [rows, H] (masked: [L, R*T_max, H]), bf16 or fp8
    TensorSpec recv_scales;                 // fp8: [rows, words] fp32 or int32 (masked: 3-D)
    TensorSpec recv_topk_idx;               // rank-major: int32 [rows, K]
    TensorSpec recv_topk_weights;           // with weights: rank-major fp32 [rows, K]; expert-major [rows]
    TensorSpec num_recv_tokens_per_expert;  // int32 [L]
    TensorSpec num_recv_rows_tensor;        // int32 [1]: DispatchResult::num_recv_rows
    // The combine of this dispatch (Buffer::combine).
    TensorSpec combine_y;            // bf16 [rows, H]; masked [L, R*T_max, H] (its 2-D flattening too)
    TensorSpec combine_row_weights;  // optional input: rank-major fp32 [rows, K], expert-major [rows]
    TensorSpec combine_out;          // bf16 [T, H]
    TensorSpec combined_topk_weights;  // fp32 [T, K], returned when row weights are sent back
};

// `host_num_recv_rows`: DispatchResult::host_num_recv_rows of a host-synced dispatch (exact
// shapes), or -1 for the worst case (what a dispatch with device counts allocates, and the most a
// host-synced one can). Throws InvalidArgument for arguments the op would refuse on shape
// grounds (E % R, T > T_max, H or K beyond the buffer, layout options).
HtOutputShapes ht_output_shapes(const BufferConfig& config, int num_ranks, const HtDispatchShape& shape,
                                int64_t host_num_recv_rows = -1);

// What an LL dispatch (Buffer::ll_dispatch) is, without its tensors.
struct LlDispatchShape {
    int32_t num_tokens = 0;  // T of this rank (<= ll_max_tokens_per_rank)
    int32_t hidden = 0;
    int32_t topk = 0;
    int32_t num_experts = 0;
    DType index_dtype = DType::kInt64;  // topk_idx's dtype (the kernels are specialized on it)
    bool use_fp8 = true;
    ScaleFormat scale_format = ScaleFormat::kFloat32;  // kFloat32 or kUE8M0 when use_fp8
    RecvLayout layout = RecvLayout::kExpertMasked;     // or kExpertContiguous
    int32_t expert_alignment = 1;
    // The kernels of a buffer whose ranks span several nodes are others (ll_load_kernels): its
    // node count and the network backend it runs on (kEmulated or kGin; kAuto counts as emulated).
    int32_t num_nodes = 1;
    NetworkBackend network_backend = NetworkBackend::kEmulated;

    // A call's shape (num_nodes and network_backend stay as defaulted: the buffer knows them).
    static LlDispatchShape of(const LowLatencyDispatchArgs& args);
};

// Every tensor an LL dispatch returns and what the LL combine that answers it takes and returns.
// LL outputs are always sized for the worst case (no host round trip).
struct LlOutputShapes {
    int64_t num_recv_rows = 0;       // rows of recv_x: masked L * R * T_ll, contiguous its capacity
    TensorSpec recv_x;               // masked [L, R*T_ll, H]; contiguous [rows, H]; fp8 or bf16
    TensorSpec recv_scales;          // fp8: column-major, masked [L, R*T_ll, words], contiguous [rows, words]
    TensorSpec recv_count;           // int32 [L]
    TensorSpec recv_expert_offsets;  // int32 [L + 1]
    TensorSpec combine_y;            // bf16 like recv_x (masked: its 2-D flattening too)
    TensorSpec combine_out;          // bf16 [T, H]
};

LlOutputShapes ll_output_shapes(const BufferConfig& config, int num_ranks, const LlDispatchShape& shape);

// ---------------------------------------------------------------------------------------------
// Kernels from shapes alone
// ---------------------------------------------------------------------------------------------

// Loads (JIT-compiling on a cache miss) into `device`'s primary context every HT kernel that a
// dispatch of `shape`, a cached dispatch of its handle and the combines of that handle can use
// (every reduction its layout allows, at any SM count; across nodes, the hierarchical path's for
// the shape's backend). Kernels are specialized on hidden, top-k, the payload and scale format and
// the layout (not on T, E, the alignment or the count mode).
// Loaded kernels belong to the process: with ranks as threads of one process, call it once per
// device and shape for all of them, before any rank's first HT op of the shape (required with
// ranks sharing a GPU, DESIGN.md §4 rule 7; otherwise it takes the compile and load out of the
// first op). Buffer::ht_load_kernels(args) is the same from a call's tensors. Launches nothing;
// the caller's current device is unchanged.
void ht_load_kernels(int device, const HtDispatchShape& shape);

// The same for the LL kernels of `shape` (its num_tokens and num_experts do not matter): the
// dispatch, both halves together and each alone, and the combines that answer it, flat and
// hierarchical; across nodes (shape.num_nodes > 1), the kernels for its network backend.
// Buffer::ll_load_kernels(args) is the same from a call's tensors.
void ll_load_kernels(int device, const LlDispatchShape& shape);

}  // namespace switchyard
