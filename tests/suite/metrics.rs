//! The metrics file: Prometheus text that a Prometheus parser reads, with
//! figures that match the queue.

use std::time::Duration;

use crate::common::{wait_for, Cluster};

const LONG: Duration = Duration::from_secs(20);

fn scrape(path: &std::path::Path) -> Option<prometheus_parse::Scrape> {
    let text = std::fs::read_to_string(path).ok()?;
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).ok()
}

fn value(
    scrape: &prometheus_parse::Scrape,
    metric: &str,
    label: Option<(&str, &str)>,
) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        })
}

#[test]
fn the_metrics_file_parses_and_matches_the_queue() {
    let path = std::env::temp_dir().join(format!("ysched-metrics-{}.prom", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let c = Cluster::started(&format!(
        "metrics_file = \"{}\"\nmetrics_every_secs = 1\n",
        path.display()
    ));
    let running = c.submit(&["--gpus", "2", "--wrap", "sleep 300"]);
    c.wait_state(running, "RUNNING", LONG);
    // Wants all four: waits while two sit free.
    let waiting = c.submit(&["--gpus", "4", "--wrap", "true"]);
    let mut last = None;
    wait_for("metrics showing both jobs", LONG, || {
        last = scrape(&path);
        last.as_ref().is_some_and(|s| {
            value(s, "ysched_jobs", Some(("state", "pending"))) == Some(1.0)
                && value(s, "ysched_jobs", Some(("state", "running"))) == Some(1.0)
        })
    });
    let s = last.unwrap();
    assert_eq!(value(&s, "ysched_gpus", None), Some(4.0));
    assert_eq!(
        value(&s, "ysched_gpus_allocated", Some(("account", "default"))),
        Some(2.0)
    );
    assert_eq!(value(&s, "ysched_gpus_idle_while_waiting", None), Some(2.0));
    assert_eq!(value(&s, "ysched_preemptions_total", None), Some(0.0));
    assert!(value(&s, "ysched_schedule_pass_seconds", None).is_some_and(|v| v >= 0.0));
    // No driver here: no utilisation, rather than a made-up one.
    if c.log().contains("GPU utilisation: none") {
        assert_eq!(value(&s, "ysched_gpu_utilization_ratio", None), None);
    }
    assert!(s.docs.contains_key("ysched_jobs"));
    for id in [running, waiting] {
        c.run("yscancel", &[&id.to_string()]);
    }
    let _ = std::fs::remove_file(&path);
}

/// Every metric the dashboard and the alert rules use is one ysctld writes.
/// One HTTP/1.0 request: the status line and the body.
fn http_get(port: u16, path: &str) -> std::io::Result<(String, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    Ok((
        head.lines().next().unwrap_or("").to_string(),
        body.to_string(),
    ))
}

#[test]
fn the_metrics_endpoint_serves_what_the_database_holds() {
    // A port nobody holds now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let c = Cluster::started(&format!(
        "metrics_listen = \"127.0.0.1:{port}\"\nmetrics_every_secs = 1\n"
    ));
    let done = c.submit(&["--wrap", "true"]);
    assert_eq!(c.wait_done(done, LONG), "COMPLETED");
    let running = c.submit(&["--gpus", "1", "--wrap", "sleep 300"]);
    c.wait_state(running, "RUNNING", LONG);
    let mut last = None;
    wait_for("the endpoint showing the running job", LONG, || {
        last = http_get(port, "/metrics").ok().and_then(|(status, body)| {
            assert!(status.contains("200"), "{status}");
            prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).ok()
        });
        last.as_ref()
            .is_some_and(|s| value(s, "ysched_jobs", Some(("state", "running"))) == Some(1.0))
    });
    let s = last.unwrap();
    // What the database holds: one running job, holding one GPU.
    let db = rusqlite::Connection::open(c.spool.join("ysched.db")).unwrap();
    let (running_rows, gpus): (i64, String) = db
        .query_row(
            "SELECT count(*), group_concat(gpus_alloc) FROM jobs WHERE state = 'RUNNING'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(running_rows, 1);
    assert_eq!(
        value(&s, "ysched_gpus_allocated", Some(("account", "default"))),
        Some(gpus.split(',').count() as f64)
    );
    // Two submissions and the queries that waited on them went through the spool.
    let requests = s
        .samples
        .iter()
        .find(|x| x.metric == "ysched_ingest_latency_seconds_count");
    assert!(requests.is_some(), "the ingest latency summary is there");
    let (status, _) = http_get(port, "/nothing").unwrap();
    assert!(status.contains("404"), "{status}");
}

#[test]
fn the_dashboard_and_alerts_name_metrics_that_exist() {
    use ysched::model::gpu::Gpu;
    use ysched::model::gpu::Sample;
    let gpus = vec![Gpu {
        index: 0,
        gpu_type: "a100".into(),
        ..Gpu::default()
    }];
    let samples = [ysched::report::metrics::GpuSample {
        node: "gpu01",
        gpu_type: "a100",
        sample: Sample {
            gpu: 0,
            utilization_pct: 50,
            memory_used_mb: 1,
        },
    }];
    let text = ysched::report::metrics::render(&ysched::report::metrics::Inputs {
        jobs: &[],
        gpus: &gpus,
        samples: &samples,
        last_pass_seconds: 0.0,
        preemptions_total: 0,
        quick_starts_total: 0,
        drained: &[],
        requests_total: 0,
        ingest_seconds_sum: 0.0,
        budget_left: &[("vision".into(), 1.0)],
        idle_while_waiting: 0,
        nodes: &[],
        checkpoints: &[ysched::report::usage::CheckpointLine {
            account: "vision".into(),
            stops: 1,
            ..Default::default()
        }],
    });
    let written: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "contrib/grafana/ysched-dashboard.json",
        "contrib/prometheus/ysched-alerts.yml",
    ] {
        let body = std::fs::read_to_string(root.join(file)).unwrap();
        let mut used = 0;
        for (i, _) in body.match_indices("ysched_") {
            let name: String = body[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                written.contains(&name.as_str()),
                "{file} uses {name}, which ysctld does not write"
            );
            used += 1;
        }
        assert!(used > 0, "{file} uses no ysched metric");
    }
}
