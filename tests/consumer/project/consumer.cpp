// Takes a lock through the installed C++ API and prints its fencing token.
#include <dlock/dlock.hpp>

#include <iostream>
#include <mutex>

int main(int argc, char** argv) {
    if (argc != 2) return 2;
    auto client = dlock::client::from_yaml(std::string("backend: file\noptions: {directory: ") + argv[1] + "}\n");
    dlock::mutex m(client, "consumer");
    std::lock_guard<dlock::mutex> guard(m);
    std::cout << "consumer_cpp: fencing token " << m.fencing_token() << "\n";
    return m.fencing_token() > 0 ? 0 : 1;
}
