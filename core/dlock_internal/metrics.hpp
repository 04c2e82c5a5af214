// metrics.hpp — a client's Prometheus instruments (docs/operations.md, "Metrics", lists them).
//
// A client whose config has `metrics: { listen: ADDR }` owns a client_metrics; without it the client
// holds none, and every call site is one null check: no thread, no socket. The HTTP exporter behind
// ADDR is shared: every client of the process configured with the same ADDR joins the one exporter
// (and its registry) already listening there, each adding its series under its own `backend` label;
// the exporter stops when the last of them is destroyed. Series of two clients with the same backend
// and labels are the same series (the process's total), as Prometheus expects of one target.
//
// Thread-safe: prometheus-cpp's counters, gauges and histograms are atomic or internally locked.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace dlock::core {

struct metrics_exporter;

class client_metrics {
public:
    // Joins the exporter at `listen` (a checked address, config::parse_metrics_listen) or starts
    // it. Throws detail::error(DLOCK_CONFIG) naming the address and why it cannot listen there.
    client_metrics(const std::string& listen, const std::string& backend);
    ~client_metrics();
    client_metrics(const client_metrics&) = delete;
    client_metrics& operator=(const client_metrics&) = delete;

    // One dlock_acquire call ended with `status` after `duration_ns`; `waited` is false for a
    // try-once (wait 0), whose duration is the backend's latency, true for a wait.
    void acquire_finished(bool waited, int status, int64_t duration_ns);
    // A release of a hold in the backend ended: DLOCK_OK, DLOCK_LOST or DLOCK_UNKNOWN.
    void release_finished(int status);
    // A hold was handed out (+1) or stopped being held: released, lost, given up (-1).
    void held_changed(int delta);
    // A renewal of one hold was not confirmed (`status`: DLOCK_LOST, or why it is unconfirmed).
    void renew_failed(int status);
    void became_suspect();
    void became_lost();

private:
    // The series of the common outcomes, made (at zero) when the client opens, so that recording
    // one is an atomic update, not a look-up by labels; and so that rates start from zero.
    struct acquire_series {
        prometheus::Histogram* latency;
        prometheus::Histogram* wait;
        prometheus::Counter* count;
    };
    acquire_series acquire_series_for(int status);

    std::shared_ptr<metrics_exporter> exporter_;
    std::string backend_;
    prometheus::Gauge* held_;
    acquire_series acquired_, timed_out_;
    prometheus::Counter* released_;
    prometheus::Counter* already_lost_;
    prometheus::Counter* release_unknown_;
};

}  // namespace dlock::core
