//! What the daemon counts, in Prometheus' text format: served by [`serve`] when the operator
//! asks for it (`-o metrics=ADDR` on the mount, `vikingfs.metrics` in the config; off by
//! default) and summarised by `vikingfs status` from there.
//!
//! One registry per process, as the prometheus crate intends: each layer counts where the
//! event happens — the FUSE adapter each request, its latency and the errno of a failure; the
//! lock manager each wait and each busy answer; the worker pool each job's outcome and time —
//! and the daemon adds, at each scrape, what the stores say ([`Gauges`]: queue depth and dead
//! jobs per queue, index size, the state of each store, a full disk). Counting never fails
//! and never blocks an operation: a metric that cannot be registered is simply not exported.
//!
//! Names follow node_exporter's style: `vikingfs_<subsystem>_<what>_<unit>`, counters ending
//! in `_total`, durations in `_seconds`.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Latency buckets from 50 µs (a cached lookup) to 10 s (a lock wait at its limit).
const BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Every metric of the process.
pub struct Metrics {
    registry: Registry,
    /// `vikingfs_fuse_request_duration_seconds{op}`: each FUSE request, reply included (its
    /// `_count` is the number of requests).
    pub fuse_requests: HistogramVec,
    /// `vikingfs_fuse_errors_total{op,errno}`: requests answered with an error.
    pub fuse_errors: IntCounterVec,
    /// `vikingfs_lock_wait_seconds{work}`: time to take a batch of path locks (foreground:
    /// a program's call or a CLI command; background: a job's write-back).
    pub lock_wait: HistogramVec,
    /// `vikingfs_lock_busy_total{work}`: batches given up as busy (EBUSY through the mount).
    pub lock_busy: IntCounterVec,
    /// `vikingfs_jobs_total{queue,outcome}`: jobs run (`done`; `deferred`: retried later for
    /// a normal reason, such as a file still open for writing; `failed`).
    pub jobs: IntCounterVec,
    /// `vikingfs_job_duration_seconds{queue}`: time a handler took.
    pub job_seconds: HistogramVec,
    /// `vikingfs_queue_jobs{queue,state}`: jobs pending, running or dead (at scrape).
    pub queue_jobs: IntGaugeVec,
    /// `vikingfs_index_records`: records in the index (at scrape).
    pub index_records: IntGauge,
    /// `vikingfs_index_size_bytes`: the index database's size (at scrape).
    pub index_bytes: IntGauge,
    /// `vikingfs_store_state{store,state}`: 1 for the state each store is in (`ok`,
    /// `rebuilding`, `damaged`), 0 for the others (at scrape).
    pub store_state: IntGaugeVec,
    /// `vikingfs_store_healed_total{store}`: damaged stores moved aside and rebuilt.
    pub store_healed: IntCounterVec,
    /// `vikingfs_disk_full`: 1 while the workspace's filesystem has almost no room.
    pub disk_full: IntGauge,
}

fn registered<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> C {
    // Only a duplicate name fails, which a test of this module would catch.
    let _ = r.register(Box::new(c.clone()));
    c
}

impl Metrics {
    fn new() -> Metrics {
        let r = Registry::new();
        let hist = |name: &str, help: &str, labels: &[&str]| {
            let opts = HistogramOpts::new(name, help).buckets(BUCKETS.to_vec());
            registered(
                &r,
                HistogramVec::new(opts, labels).expect("valid histogram"),
            )
        };
        let counter = |name: &str, help: &str, labels: &[&str]| {
            registered(
                &r,
                IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter"),
            )
        };
        let gauge = |name: &str, help: &str| {
            registered(&r, IntGauge::new(name, help).expect("valid gauge"))
        };
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            registered(
                &r,
                IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge"),
            )
        };
        Metrics {
            fuse_requests: hist(
                "vikingfs_fuse_request_duration_seconds",
                "FUSE requests by operation, from the request to its reply.",
                &["op"],
            ),
            fuse_errors: counter(
                "vikingfs_fuse_errors_total",
                "FUSE requests answered with an error, by operation and errno.",
                &["op", "errno"],
            ),
            lock_wait: hist(
                "vikingfs_lock_wait_seconds",
                "Time to take a batch of path locks, by foreground or background work.",
                &["work"],
            ),
            lock_busy: counter(
                "vikingfs_lock_busy_total",
                "Lock batches given up because a lock stayed held (EBUSY).",
                &["work"],
            ),
            jobs: counter(
                "vikingfs_jobs_total",
                "Jobs finished by the worker pool, by queue and outcome.",
                &["queue", "outcome"],
            ),
            job_seconds: hist(
                "vikingfs_job_duration_seconds",
                "Time a job's handler took, by queue.",
                &["queue"],
            ),
            queue_jobs: gauges(
                "vikingfs_queue_jobs",
                "Jobs in the queue by state (pending, running, dead).",
                &["queue", "state"],
            ),
            index_records: gauge("vikingfs_index_records", "Records in the index."),
            index_bytes: gauge(
                "vikingfs_index_size_bytes",
                "Size of the index database on disk.",
            ),
            store_state: gauges(
                "vikingfs_store_state",
                "1 for the state each derived store is in (ok, rebuilding, damaged).",
                &["store", "state"],
            ),
            store_healed: counter(
                "vikingfs_store_healed_total",
                "Damaged stores moved aside and rebuilt from the files.",
                &["store"],
            ),
            disk_full: gauge(
                "vikingfs_disk_full",
                "1 while the workspace's filesystem is full (writes answer ENOSPC).",
            ),
            registry: r,
        }
    }

    /// The text a scrape gets.
    pub fn render(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        // Encoding into a Vec fails only for a metric family without metrics; skip it then.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        buf
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn get() -> &'static Metrics {
    &METRICS
}

/// Time `f` into `h`.
pub fn timed<T>(h: &prometheus::Histogram, f: impl FnOnce() -> T) -> T {
    let t = std::time::Instant::now();
    let r = f();
    h.observe(t.elapsed().as_secs_f64());
    r
}

/// The name of an errno as `errno(3)` spells it (`EBUSY`), or its number when it has none.
pub fn errno_name(e: i32) -> String {
    match nix::errno::Errno::from_raw(e) {
        nix::errno::Errno::UnknownErrno => e.to_string(),
        n => format!("{n:?}"),
    }
}

/// What the stores say, read at each scrape.
pub trait Gauges: Send + Sync {
    /// Set the scrape-time gauges of `m` (queue depth, index size, store states, disk).
    fn refresh(&self, m: &Metrics);
}

/// The metrics endpoint: `GET /metrics` answers the text format; it stops when dropped.
pub struct Server {
    http: Arc<tiny_http::Server>,
    addr: SocketAddr,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// The address it listens on (the port chosen by the system when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.http.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Listen on `addr` and answer scrapes from a thread of its own, refreshing `gauges` first.
pub fn serve(addr: SocketAddr, gauges: Arc<dyn Gauges>) -> io::Result<Server> {
    let http = tiny_http::Server::http(addr)
        .map_err(|e| io::Error::other(format!("metrics endpoint on {addr}: {e}")))?;
    let bound = http
        .server_addr()
        .to_ip()
        .ok_or_else(|| io::Error::other("metrics endpoint: not an IP address"))?;
    let http = Arc::new(http);
    let h = http.clone();
    let thread = std::thread::Builder::new()
        .name("vfs-metrics".into())
        .spawn(move || {
            for req in h.incoming_requests() {
                let resp = if req.url() == "/metrics" || req.url().starts_with("/metrics?") {
                    let m = get();
                    gauges.refresh(m);
                    let ct = "Content-Type: text/plain; version=0.0.4; charset=utf-8";
                    tiny_http::Response::from_data(m.render())
                        .with_header(ct.parse::<tiny_http::Header>().expect("valid header"))
                } else {
                    tiny_http::Response::from_data(b"see /metrics\n".to_vec()).with_status_code(404)
                };
                let _ = req.respond(resp);
            }
        })?;
    Ok(Server {
        http,
        addr: bound,
        thread: Some(thread),
    })
}

/// A scrape of `addr`'s `/metrics` (what `vikingfs status` shows), within `timeout`.
pub fn scrape(addr: &str, timeout: Duration) -> Result<Samples, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .build()
        .into();
    let body = agent
        .get(&format!("http://{addr}/metrics"))
        .call()
        .map_err(|e| e.to_string())?
        .into_body()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    Ok(Samples::parse(&body))
}

/// One sample of a scrape: its metric name, labels and value.
type Sample = (String, Vec<(String, String)>, f64);

/// Samples of a text-format scrape.
#[derive(Debug, Default)]
pub struct Samples(Vec<Sample>);

impl Samples {
    pub fn parse(text: &str) -> Samples {
        let mut out = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = match line.rsplit_once(' ') {
                Some(v) => v,
                None => continue,
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => {
                    let rest = rest.trim_end_matches('}');
                    let labels = rest
                        .split(',')
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                        .collect();
                    (n.to_string(), labels)
                }
                None => (series.to_string(), Vec::new()),
            };
            out.push((name, labels, value));
        }
        Samples(out)
    }

    /// The sum of `name`'s samples whose labels include every pair of `with`.
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// The values label `label` takes in `name`'s samples.
    pub fn label_values(&self, name: &str, label: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .0
            .iter()
            .filter(|(n, _, _)| n == name)
            .filter_map(|(_, l, _)| l.iter().find(|(k, _)| k == label).map(|(_, v)| v.clone()))
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_registered_and_rendered_in_the_text_format() {
        let m = Metrics::new();
        m.fuse_requests
            .with_label_values(&["lookup"])
            .observe(0.001);
        m.fuse_errors.with_label_values(&["unlink", "EBUSY"]).inc();
        m.lock_wait.with_label_values(&["foreground"]).observe(0.0);
        m.lock_busy.with_label_values(&["foreground"]).inc();
        m.jobs.with_label_values(&["semantic", "done"]).inc();
        m.job_seconds.with_label_values(&["semantic"]).observe(0.1);
        m.queue_jobs
            .with_label_values(&["semantic", "pending"])
            .set(3);
        m.index_records.set(7);
        m.index_bytes.set(4096);
        m.store_state.with_label_values(&["index", "ok"]).set(1);
        m.store_healed.with_label_values(&["queue"]).inc();
        m.disk_full.set(0);
        let text = String::from_utf8(m.render()).unwrap();
        let s = Samples::parse(&text);
        assert_eq!(
            s.sum(
                "vikingfs_fuse_request_duration_seconds_count",
                &[("op", "lookup")]
            ),
            1.0
        );
        assert_eq!(
            s.sum("vikingfs_fuse_errors_total", &[("errno", "EBUSY")]),
            1.0
        );
        assert_eq!(s.sum("vikingfs_queue_jobs", &[("queue", "semantic")]), 3.0);
        assert_eq!(s.sum("vikingfs_index_records", &[]), 7.0);
        assert_eq!(
            s.sum("vikingfs_store_healed_total", &[("store", "queue")]),
            1.0
        );
        for name in [
            "vikingfs_fuse_request_duration_seconds",
            "vikingfs_fuse_errors_total",
            "vikingfs_lock_wait_seconds",
            "vikingfs_lock_busy_total",
            "vikingfs_jobs_total",
            "vikingfs_job_duration_seconds",
            "vikingfs_queue_jobs",
            "vikingfs_index_records",
            "vikingfs_index_size_bytes",
            "vikingfs_store_state",
            "vikingfs_store_healed_total",
            "vikingfs_disk_full",
        ] {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing:\n{text}"
            );
        }
    }

    #[test]
    fn errno_names_as_errno_spells_them() {
        assert_eq!(errno_name(libc::EBUSY), "EBUSY");
        assert_eq!(errno_name(libc::ENOSPC), "ENOSPC");
        // An errno with two names goes by the one the old table gave it.
        assert_eq!(errno_name(libc::EWOULDBLOCK), "EAGAIN");
        assert_eq!(errno_name(libc::ENOTSUP), "EOPNOTSUPP");
        assert_eq!(errno_name(9999), "9999");
    }

    #[test]
    fn the_endpoint_answers_a_scrape_and_refreshes_the_gauges_first() {
        struct Seven;
        impl Gauges for Seven {
            fn refresh(&self, m: &Metrics) {
                m.index_records.set(7);
            }
        }
        let s = serve("127.0.0.1:0".parse().unwrap(), Arc::new(Seven)).unwrap();
        let got = scrape(&s.addr().to_string(), Duration::from_secs(5)).unwrap();
        assert_eq!(got.sum("vikingfs_index_records", &[]), 7.0);
        let other = ureq::get(&format!("http://{}/other", s.addr())).call();
        assert!(other.is_err(), "only /metrics is served");
        drop(s);
    }
}
