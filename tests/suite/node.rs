//! The server's GPUs as users see them (ysinfo, yscontrol show node), and
//! GPUs taken out of service and put back (yscontrol drain / resume gpu).

use std::time::Duration;

use crate::common::{stderr, stdout, wait_for, Cluster};

const LONG: Duration = Duration::from_secs(20);

fn states(c: &Cluster) -> String {
    let out = c.run("ysinfo", &["-h", "-o", "gpu,state,jobs"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn drained_gpus_take_no_new_job_and_come_back_when_resumed() {
    let mut c = Cluster::started("");
    let a = c.submit(&["--gpus", "2", "--wrap", "sleep 3"]);
    c.wait_state(a, "RUNNING", LONG);
    assert_eq!(
        states(&c),
        format!("0 allocated {a}\n1 allocated {a}\n2 idle -\n3 idle -")
    );

    // GPU 0 (under job a) and GPU 3 go out of service.
    let out = c.run("yscontrol", &["drain", "0,3", "--reason", "ECC errors"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said = stdout(&out);
    assert!(
        said.contains(&format!("GPU 0 draining: ECC errors; job {a} runs on")),
        "{said}"
    );
    assert!(said.contains("GPU 3 drained: ECC errors"), "{said}");
    // A drain outlives a restart.
    c.stop();
    c.start();
    assert_eq!(
        states(&c),
        format!("0 draining {a}\n1 allocated {a}\n2 idle -\n3 drained -")
    );
    let text = stdout(&c.run("ysinfo", &[]));
    assert!(text.contains("ECC errors (root)"), "{text}");
    assert!(text.contains("isolation:"), "{text}");

    // Three GPUs wanted, two in service once job a ends: it waits.
    let b = c.submit(&[
        "--gpus",
        "3",
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS",
    ]);
    assert_eq!(c.wait_done(a, LONG), "COMPLETED");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(c.state(b), "PENDING");
    assert_eq!(states(&c), "0 drained -\n1 idle -\n2 idle -\n3 drained -");

    // GPU 3 back: b runs on 1, 2 and 3, never on 0.
    let out = c.run("yscontrol", &["resume", "gpu", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("GPU 3 back in service"));
    assert_eq!(c.wait_done(b, LONG), "COMPLETED");
    assert!(
        c.output_of(b).trim_end().ends_with("1,2,3"),
        "{}",
        c.output_of(b)
    );

    let node = stdout(&c.run("yscontrol", &["show", "node"]));
    assert!(node.contains("State=IDLE+DRAIN"), "{node}");
    assert!(
        node.contains("GPU=0 Type=a100") && node.contains("Reason=\"ECC errors\""),
        "{node}"
    );
    let config = stdout(&c.run("yscontrol", &["show", "config"]));
    assert!(
        config.contains("MinJobAge") && config.contains("= 300 sec"),
        "{config}"
    );
    assert!(config.contains("DetectedGPUs"), "{config}");
    let audit = stdout(&c.run("yscontrol", &["show", "audit"]));
    assert!(audit.contains("drain GPU 0: ECC errors"), "{audit}");
    assert!(audit.contains("resume-gpu GPU 3"), "{audit}");

    // Bad input: a GPU that does not exist, no reason, an unknown field.
    let out = c.run("yscontrol", &["drain", "9", "--reason", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("GPU 9 does not exist: this server has GPUs 0 to 3"));
    let out = c.run("yscontrol", &["drain", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let out = c.run("ysinfo", &["-o", "gpu,colour"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown field 'colour'"));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&c.run("ysinfo", &["--json"]))).unwrap();
    assert_eq!(json[0]["gpus"][0]["drain"]["reason"], "ECC errors");
    assert_eq!(json[0]["name"], "gpu01");
    wait_for("nothing left running", LONG, || {
        states(&c).contains("1 idle")
    });
}

#[test]
fn a_drained_node_takes_no_new_job_and_says_why() {
    // The test cluster's node is named gpu01.
    let mut c = Cluster::started("");
    let node_line = |c: &Cluster| {
        let out = c.run("ysinfo", &["-N", "-h"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        node_line(&c).starts_with("gpu01 idle "),
        "{}",
        node_line(&c)
    );

    let out = c.run(
        "yscontrol",
        &["node", "drain", "gpu01", "--reason", "new fans"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("node gpu01 drained: new fans"));
    let job = c.submit(&["--gpus", "1", "--wrap", "true"]);
    std::thread::sleep(Duration::from_millis(500));
    let reason = stdout(&c.run("ysqueue", &["-h", "-j", &job.to_string(), "-o", "%T"]));
    assert_eq!(reason.trim(), "PENDING", "nothing starts on a drained node");
    assert!(
        node_line(&c).starts_with("gpu01 drain ") && node_line(&c).ends_with("0/4 new fans (root)"),
        "{}",
        node_line(&c)
    );
    // The drain outlives a restart.
    c.stop();
    c.start();
    assert!(node_line(&c).contains(" drain "), "{}", node_line(&c));
    let shown = stdout(&c.run("yscontrol", &["show", "node", "gpu01"]));
    assert!(
        shown.contains("State=DRAINED Reason=\"new fans (root)\""),
        "{shown}"
    );

    // Bad input: an unknown node, no reason, not an admin's request.
    let out = c.run("yscontrol", &["node", "drain", "gpu09", "--reason", "x"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown node 'gpu09' (nodes: gpu01)"),
        "{}",
        stderr(&out)
    );
    let out = c.run("yscontrol", &["node", "drain", "gpu01"]);
    assert_eq!(out.status.code(), Some(2));

    let out = c.run("yscontrol", &["node", "resume", "gpu01"]);
    assert!(stdout(&out).contains("node gpu01 back in service"));
    assert_eq!(c.wait_done(job, LONG), "COMPLETED");
    let audit = stdout(&c.run("yscontrol", &["show", "audit"]));
    assert!(audit.contains("drain-node gpu01: new fans"), "{audit}");
    assert!(audit.contains("resume-node gpu01"), "{audit}");
}
