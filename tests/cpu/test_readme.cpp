// README.md's "Use it from C++" snippet is code that CI compiles: every line of it appears, in
// order, in examples/cpp/round_trip.cpp (built against the installed package and run by the test
// command), so the README cannot drift from a program that works.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/testing.hpp"

namespace {

std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string trim(const std::string& line) {
    const size_t first = line.find_first_not_of(" \t");
    return first == std::string::npos ? "" : line.substr(first);
}

}  // namespace

SY_TEST(Readme, CppSnippetIsCompiledByTheExample) {
    const std::string readme = read(SWITCHYARD_SOURCE_DIR "/README.md");
    const std::string example = read(SWITCHYARD_SOURCE_DIR "/examples/cpp/round_trip.cpp");
    SY_CHECK(!readme.empty() && !example.empty());
    const size_t start = readme.find("```cpp\n");
    SY_CHECK_MSG(start != std::string::npos, "README.md has no ```cpp block");
    const size_t end = readme.find("```", start + 7);
    std::istringstream snippet(readme.substr(start + 7, end - start - 7));
    std::string line;
    size_t at = 0;
    int lines = 0;
    while (std::getline(snippet, line)) {
        if (trim(line).empty()) continue;
        const size_t found = example.find(trim(line), at);
        SY_CHECK_MSG(found != std::string::npos,
                     "README line not in examples/cpp/round_trip.cpp (in order): " << line);
        at = found + trim(line).size();
        ++lines;
    }
    SY_CHECK(lines >= 5);
}

SY_TEST_MAIN()
