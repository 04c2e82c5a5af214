#include "backends.hpp"

#include <fstream>

namespace dlock::conformance {

std::vector<backend_case> backend_cases() {
    std::vector<backend_case> cases;
    cases.push_back({"file", [](const std::string& scratch) {
                         const std::string path = scratch + "/file.yaml";
                         std::ofstream(path) << "backend: file\noptions:\n  directory: " << scratch << "/locks\n";
                         return path;
                     }});
    return cases;
}

}  // namespace dlock::conformance
