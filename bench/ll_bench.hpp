// Low-latency (LL) benchmark: dispatch (FP8 quantized in the kernel) and combine (BF16, weighted)
// of the DeepSeek-V3 decoding shape (128 tokens per rank, hidden 7168, top-8 of 256 experts) and
// of a single token, ranks as threads over the local GPUs. Plain launches, CUDA-graph replay, and
// hook mode with the send and receive halves timed separately. Records follow DESIGN.md §9.
//
//   switchyard-bench ll [--out FILE.json] [--iters 50] [--warmup 5] [--tokens 128] [--hidden 7168]
//                       [--topk 8] [--experts 256] [--ranks 2] [--gpus 2] [--seed 1]
#pragma once

namespace switchyard::bench {

// Returns 0 on success, 1 on error, 2 on a bad command line, 77 without a CUDA GPU.
int run_ll_bench(int argc, char** argv);

}  // namespace switchyard::bench
