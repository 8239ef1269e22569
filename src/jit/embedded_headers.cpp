#include "jit/embedded_headers.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string_view>

#include "jit/hash.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::jit {
namespace {

std::mutex& sets_mutex() {
    static std::mutex mutex;
    return mutex;
}

std::vector<const EmbeddedHeaderSet*>& extra_sets() {
    static std::vector<const EmbeddedHeaderSet*> sets;
    return sets;
}

}  // namespace

void add_header_set(const EmbeddedHeaderSet& set) {
    std::lock_guard<std::mutex> lock(sets_mutex());
    for (const EmbeddedHeaderSet* known : extra_sets())
        if (known == &set) return;
    std::vector<const EmbeddedHeaderSet*> all = {&embedded::kLibraryHeaders};
    all.insert(all.end(), extra_sets().begin(), extra_sets().end());
    for (size_t i = 0; i < set.num_files; ++i)
        for (const EmbeddedHeaderSet* known : all)
            for (size_t j = 0; j < known->num_files; ++j)
                if (std::strcmp(set.files[i].path, known->files[j].path) == 0)
                    throw InvalidArgument(std::string("jit: device header '") + set.files[i].path +
                                          "' is already embedded; a header set may not replace one");
    extra_sets().push_back(&set);
}

std::vector<EmbeddedFile> all_headers() {
    std::lock_guard<std::mutex> lock(sets_mutex());
    std::vector<EmbeddedFile> files(embedded::kLibraryHeaders.files,
                                    embedded::kLibraryHeaders.files + embedded::kLibraryHeaders.num_files);
    for (const EmbeddedHeaderSet* set : extra_sets())
        files.insert(files.end(), set->files, set->files + set->num_files);
    return files;
}

std::string headers_digest() {
    std::lock_guard<std::mutex> lock(sets_mutex());
    std::string digest = embedded::kLibraryHeaders.digest;
    for (const EmbeddedHeaderSet* set : extra_sets()) digest += std::string("+") + set->digest;
    return digest;
}

std::string include_closure_digest(const std::string& header) {
    std::map<std::string_view, std::string_view> files;
    const std::vector<EmbeddedFile> headers = all_headers();
    for (const EmbeddedFile& file : headers)
        files.emplace(file.path, std::string_view(file.contents, file.size));
    std::set<std::string_view> closure;
    std::vector<std::string_view> pending = {header};
    while (!pending.empty()) {
        const std::string_view path = pending.back();
        pending.pop_back();
        const auto found = files.find(path);
        if (found == files.end() || !closure.insert(found->first).second) continue;
        const std::string_view text = found->second;
        for (size_t at = text.find("#include \""); at != std::string_view::npos;
             at = text.find("#include \"", at + 1)) {
            const size_t begin = at + 10, end = text.find('"', begin);
            if (end != std::string_view::npos) pending.push_back(text.substr(begin, end - begin));
        }
    }
    Hasher128 hasher;  // the closure in path order: paths and contents
    for (const std::string_view path : closure) {
        hasher.field(std::string(path));
        hasher.field(std::string(files.at(path)));
    }
    return hasher.hex();
}

}  // namespace switchyard::jit
