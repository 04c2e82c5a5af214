// The Prometheus instruments of clients and the exporters they share (dlock_internal/metrics.hpp).
#include "dlock_internal/metrics.hpp"

#include "dlock_internal/common.hpp"

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

namespace dlock::core {

using detail::error;

// One HTTP endpoint (`/metrics` on its address) and the metric families served there.
struct metrics_exporter {
    std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
    prometheus::Family<prometheus::Histogram>& acquire_latency =
        prometheus::BuildHistogram()
            .Name("dlock_acquire_latency_seconds")
            .Help("Duration of try-once acquires (wait 0): the backend's round trip, by outcome")
            .Register(*registry);
    prometheus::Family<prometheus::Histogram>& acquire_wait =
        prometheus::BuildHistogram()
            .Name("dlock_acquire_wait_seconds")
            .Help("Duration of acquires with a wait, from the call until granted, timed out or failed, by outcome")
            .Register(*registry);
    prometheus::Family<prometheus::Counter>& acquisitions =
        prometheus::BuildCounter()
            .Name("dlock_acquisitions_total")
            .Help("Acquire calls by outcome: acquired, timeout, cancelled, or the error status")
            .Register(*registry);
    prometheus::Family<prometheus::Counter>& releases =
        prometheus::BuildCounter()
            .Name("dlock_releases_total")
            .Help("Releases of holds in the backend by outcome: released, already_lost, unknown")
            .Register(*registry);
    prometheus::Family<prometheus::Gauge>& held =
        prometheus::BuildGauge().Name("dlock_leases_held").Help("Locks this process holds now (HELD or SUSPECT)").Register(*registry);
    prometheus::Family<prometheus::Counter>& renew_failures =
        prometheus::BuildCounter()
            .Name("dlock_renew_failures_total")
            .Help("Renewals of a hold that were not confirmed, by status")
            .Register(*registry);
    prometheus::Family<prometheus::Counter>& transitions =
        prometheus::BuildCounter()
            .Name("dlock_lease_transitions_total")
            .Help("Leases that became SUSPECT (renewal failing) or LOST")
            .Register(*registry);
    std::unique_ptr<prometheus::Exposer> exposer;
    int clients = 0;  // guarded by exporters_mutex
};

namespace {

// Exporters by listen address. An exporter is created and destroyed under this mutex, so a client
// opening on an address never races the last one closing there into a second bind of the port.
std::mutex exporters_mutex;
std::map<std::string, std::shared_ptr<metrics_exporter>>& exporters() {
    static auto* instance = new std::map<std::string, std::shared_ptr<metrics_exporter>>;  // never destroyed:
    return *instance;  // a client closed by a static destructor still finds it
}

const prometheus::Histogram::BucketBoundaries& latency_buckets() {
    static const prometheus::Histogram::BucketBoundaries b{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
    return b;
}

const prometheus::Histogram::BucketBoundaries& wait_buckets() {
    static const prometheus::Histogram::BucketBoundaries b{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
    return b;
}

// "DLOCK_UNAVAILABLE" -> "unavailable": a bounded label value for a status.
std::string status_label(int status) {
    std::string name = detail::status_name(status);
    name = name.substr(sizeof "DLOCK_" - 1);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return name == "<unknown>" ? "other" : name;
}

std::string acquire_outcome(int status) { return status == DLOCK_OK ? "acquired" : status_label(status); }

}  // namespace

client_metrics::client_metrics(const std::string& listen, const std::string& backend) : backend_(backend) {
    std::lock_guard<std::mutex> lock(exporters_mutex);
    auto& slot = exporters()[listen];
    if (!slot) {
        auto made = std::make_shared<metrics_exporter>();
        try {
            made->exposer = std::make_unique<prometheus::Exposer>(listen, 1);
        } catch (const std::exception& e) {
            exporters().erase(listen);
            throw error(DLOCK_CONFIG, fmt::format("metrics.listen `{}`: cannot listen there ({}); is the port taken by "
                                                  "another process, or the address not one of this host's?",
                                                  listen, e.what()));
        }
        made->exposer->RegisterCollectable(made->registry);
        slot = std::move(made);
    }
    ++slot->clients;
    exporter_ = slot;
    held_ = &exporter_->held.Add({{"backend", backend_}});
    acquired_ = acquire_series_for(DLOCK_OK);
    timed_out_ = acquire_series_for(DLOCK_TIMEOUT);
    released_ = &exporter_->releases.Add({{"backend", backend_}, {"outcome", "released"}});
    already_lost_ = &exporter_->releases.Add({{"backend", backend_}, {"outcome", "already_lost"}});
    release_unknown_ = &exporter_->releases.Add({{"backend", backend_}, {"outcome", "unknown"}});
}

client_metrics::acquire_series client_metrics::acquire_series_for(int status) {
    const prometheus::Labels labels{{"backend", backend_}, {"outcome", acquire_outcome(status)}};
    return {&exporter_->acquire_latency.Add(labels, latency_buckets()), &exporter_->acquire_wait.Add(labels, wait_buckets()),
            &exporter_->acquisitions.Add(labels)};
}

client_metrics::~client_metrics() {
    std::lock_guard<std::mutex> lock(exporters_mutex);
    if (--exporter_->clients == 0) {
        exporters().erase(std::find_if(exporters().begin(), exporters().end(),
                                       [&](const auto& entry) { return entry.second == exporter_; }));
        exporter_->exposer.reset();  // stops the HTTP threads and frees the port, under the mutex
    }
}

void client_metrics::acquire_finished(bool waited, int status, int64_t duration_ns) {
    const acquire_series series = status == DLOCK_OK ? acquired_ : status == DLOCK_TIMEOUT ? timed_out_ : acquire_series_for(status);
    (waited ? series.wait : series.latency)->Observe(double(duration_ns) / 1e9);
    series.count->Increment();
}

void client_metrics::release_finished(int status) {
    (status == DLOCK_OK ? released_ : status == DLOCK_LOST ? already_lost_ : release_unknown_)->Increment();
}

void client_metrics::held_changed(int delta) { held_->Increment(delta); }

void client_metrics::renew_failed(int status) {
    exporter_->renew_failures.Add({{"backend", backend_}, {"status", status_label(status)}}).Increment();
}

void client_metrics::became_suspect() { exporter_->transitions.Add({{"backend", backend_}, {"to", "suspect"}}).Increment(); }

void client_metrics::became_lost() { exporter_->transitions.Add({{"backend", backend_}, {"to", "lost"}}).Increment(); }

}  // namespace dlock::core
