// `switchyard-bench ht`: high-throughput dispatch and combine on the DeepSeek-V3 prefill shape,
// with the copy-engine peer bound and NCCL all-to-all measured in the same run.
#pragma once

namespace switchyard::bench {

// argv[0] is "ht". Returns the process exit code.
int run_ht_bench(int argc, char** argv);

}  // namespace switchyard::bench
