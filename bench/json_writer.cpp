#include "json_writer.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

void newline(std::string& out, int indent, int depth) {
    if (indent <= 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * depth, ' ');
}

void write_double(std::string& out, double value) {
    if (!std::isfinite(value)) {
        out += "null";
        return;
    }
    // Shortest text that reads back to the same double.
    char text[64];
    const auto [end, error] = std::to_chars(text, text + sizeof(text), value);
    if (error != std::errc()) {
        out += "null";
        return;
    }
    out.append(text, end);
}

}  // namespace

std::string json_quote(const std::string& text) {
    std::string out = "\"";
    for (const char c : text) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char escaped[8];
                    std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
                    out += escaped;
                } else {
                    out += c;
                }
        }
    }
    out += '"';
    return out;
}

JsonValue::JsonValue(const JsonValue& other) : value_(other.value_) {
    if (auto* array = std::get_if<std::shared_ptr<JsonArray>>(&value_)) {
        *array = std::make_shared<JsonArray>(**array);
    } else if (auto* object = std::get_if<std::shared_ptr<JsonObject>>(&value_)) {
        *object = std::make_shared<JsonObject>(**object);
    }
}

JsonValue& JsonValue::operator=(const JsonValue& other) {
    if (this != &other) *this = JsonValue(other);
    return *this;
}

JsonValue& JsonValue::set(const std::string& key, JsonValue value) {
    auto* object = std::get_if<std::shared_ptr<JsonObject>>(&value_);
    if (!object) throw InvalidArgument("JsonValue::set(\"" + key + "\") on a value that is not an object");
    for (auto& [existing, slot] : **object) {
        if (existing == key) {
            slot = std::move(value);
            return *this;
        }
    }
    (*object)->emplace_back(key, std::move(value));
    return *this;
}

void JsonValue::push_back(JsonValue value) {
    auto* array = std::get_if<std::shared_ptr<JsonArray>>(&value_);
    if (!array) throw InvalidArgument("JsonValue::push_back on a value that is not an array");
    (*array)->push_back(std::move(value));
}

std::string JsonValue::dump(int indent) const {
    std::string out;
    write(out, indent, 0);
    return out;
}

void JsonValue::write(std::string& out, int indent, int depth) const {
    if (std::holds_alternative<std::monostate>(value_)) {
        out += "null";
    } else if (const bool* b = std::get_if<bool>(&value_)) {
        out += *b ? "true" : "false";
    } else if (const int64_t* integer = std::get_if<int64_t>(&value_)) {
        out += std::to_string(*integer);
    } else if (const double* d = std::get_if<double>(&value_)) {
        write_double(out, *d);
    } else if (const std::string* s = std::get_if<std::string>(&value_)) {
        out += json_quote(*s);
    } else if (const auto* array = std::get_if<std::shared_ptr<JsonArray>>(&value_)) {
        const JsonArray& items = **array;
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
            if (i) out += ',';
            newline(out, indent, depth + 1);
            items[i].write(out, indent, depth + 1);
        }
        if (!items.empty()) newline(out, indent, depth);
        out += ']';
    } else {
        const JsonObject& members = *std::get<std::shared_ptr<JsonObject>>(value_);
        out += '{';
        for (size_t i = 0; i < members.size(); ++i) {
            if (i) out += ',';
            newline(out, indent, depth + 1);
            out += json_quote(members[i].first);
            out += indent > 0 ? ": " : ":";
            members[i].second.write(out, indent, depth + 1);
        }
        if (!members.empty()) newline(out, indent, depth);
        out += '}';
    }
}

}  // namespace switchyard::bench
