// stats.hpp — the numbers every benchmark of the comparison suite reports: latency distributions
// (microseconds) and Jain's fairness index. Header-only; shared by the driver and the probes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace dlock::bench {

// A latency sample set, kept whole (the report plots CDFs from it), with its percentiles.
struct distribution {
    std::vector<double> us;  // every sample, sorted ascending, in microseconds
    std::size_t n = 0;
    double p50 = NAN, p99 = NAN, p999 = NAN, mean = NAN, min = NAN, max = NAN;

    bool empty() const { return n == 0; }
};

// Sorts the samples and computes the percentiles (nearest rank). An empty set gives NaNs.
inline distribution summarize(std::vector<double> samples_us) {
    distribution d;
    std::sort(samples_us.begin(), samples_us.end());
    d.us = std::move(samples_us);
    d.n = d.us.size();
    if (d.n == 0) return d;
    auto at = [&](double q) { return d.us[std::min(d.n - 1, static_cast<std::size_t>(q * static_cast<double>(d.n)))]; };
    d.p50 = at(0.50);
    d.p99 = at(0.99);
    d.p999 = at(0.999);
    double sum = 0;
    for (double x : d.us) sum += x;
    d.mean = sum / static_cast<double>(d.n);
    d.min = d.us.front();
    d.max = d.us.back();
    return d;
}

// Jain's fairness index over per-client counts: 1 when every client got the same share, 1/n when
// one client got everything. NaN for no clients or no acquisitions.
inline double jain_index(const std::vector<double>& per_client) {
    double sum = 0, squares = 0;
    for (double x : per_client) {
        sum += x;
        squares += x * x;
    }
    if (per_client.empty() || squares == 0) return NAN;
    return sum * sum / (static_cast<double>(per_client.size()) * squares);
}

}  // namespace dlock::bench
