#include "jit/ptxas_log.hpp"

#include <cstdlib>
#include <sstream>

namespace switchyard::jit {
namespace {

// The integer right before `suffix` in `line` (e.g. "756" for " bytes spill stores"), or -1.
int number_before(const std::string& line, const std::string& suffix) {
    const size_t at = line.find(suffix);
    if (at == std::string::npos) return -1;
    size_t begin = at;
    while (begin > 0 && line[begin - 1] == ' ') --begin;
    const size_t end = begin;
    while (begin > 0 && line[begin - 1] >= '0' && line[begin - 1] <= '9') --begin;
    if (begin == end) return -1;
    return std::atoi(line.substr(begin, end - begin).c_str());
}

// The name quoted after `marker` ('...'), or the rest of the line when unquoted.
std::string name_after(const std::string& line, const std::string& marker) {
    const size_t at = line.find(marker);
    if (at == std::string::npos) return {};
    size_t begin = at + marker.size();
    if (begin < line.size() && line[begin] == '\'') {
        const size_t end = line.find('\'', begin + 1);
        return line.substr(begin + 1, end == std::string::npos ? std::string::npos : end - begin - 1);
    }
    const size_t end = line.find_first_of(" \r", begin);
    return line.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

}  // namespace

PtxasStats parse_ptxas_log(const std::string& log, const std::string& entry) {
    PtxasStats stats;
    std::istringstream lines(log);
    std::string line;
    // Which function the following "Function properties" / "Used N registers" lines describe.
    std::string current;
    std::string target = entry;  // when not given: the first entry function in the log
    bool in_entry = false;
    bool entry_seen = false;
    while (std::getline(lines, line)) {
        if (line.find("Compiling entry function") != std::string::npos) {
            current = name_after(line, "Compiling entry function ");
            if (target.empty()) target = current;
            in_entry = !entry_seen && current == target;
            entry_seen = entry_seen || in_entry;
            continue;
        }
        if (line.find("Function properties for") != std::string::npos) {
            current = name_after(line, "Function properties for ");
            continue;
        }
        const int stores = number_before(line, " bytes spill stores");
        const int loads = number_before(line, " bytes spill loads");
        if (stores >= 0 || loads >= 0) {
            stats.spill_bytes = (stats.spill_bytes < 0 ? 0 : stats.spill_bytes) + (stores > 0 ? stores : 0) +
                                (loads > 0 ? loads : 0);
            if (in_entry && current == target) stats.stack_bytes = number_before(line, " bytes stack frame");
            continue;
        }
        if (in_entry && stats.num_registers < 0) {
            const int registers = number_before(line, " registers");
            if (line.find("Used ") != std::string::npos && registers >= 0) stats.num_registers = registers;
        }
    }
    return stats;
}

}  // namespace switchyard::jit
