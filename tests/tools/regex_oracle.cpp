// What llama.cpp does with an -ot pattern: std::regex (ECMAScript, the default) and
// std::regex_search over each tensor name (src/llama-model-loader.cpp, llama-model.cpp).
// stdin: lines "N<name>" (names, first), then "P<pattern>" lines; stdout: one line per
// pattern, "E <what>" if std::regex refuses it, else one '0'/'1' per name.
#include <iostream>
#include <regex>
#include <string>
#include <vector>

int main() {
    std::vector<std::string> names;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.empty()) continue;
        if (line[0] == 'N') {
            names.push_back(line.substr(1));
            continue;
        }
        std::string out;
        try {
            std::regex rx(line.substr(1));
            for (const auto & name : names) out += std::regex_search(name, rx) ? '1' : '0';
        } catch (const std::regex_error & e) {
            out = std::string("E ") + e.what();
        }
        std::cout << out << '\n';
    }
    return 0;
}
