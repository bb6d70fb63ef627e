//! Hostile and broken files in the spool: each is refused with a reason,
//! removed, and disturbs nothing else.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use crate::common::{stderr, stdout, wait_for, Cluster};

/// Drops a file straight into incoming/ (as a careless or hostile user would)
/// with a reply file next to it, and returns the daemon's answer.
fn drop_raw(c: &Cluster, name: &str, make: impl FnOnce(&std::path::Path)) -> serde_json::Value {
    let reply = c.spool.join("replies").join(name);
    std::fs::write(&reply, b"").unwrap();
    let path = c.spool.join("incoming").join(name);
    make(&path);
    let mut answer = serde_json::Value::Null;
    wait_for(
        &format!("a reply to {name}"),
        Duration::from_secs(10),
        || {
            answer = std::fs::read(&reply)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(serde_json::Value::Null);
            !answer.is_null()
        },
    );
    wait_for(
        &format!("{name} to be removed"),
        Duration::from_secs(10),
        || std::fs::symlink_metadata(&path).is_err(),
    );
    let _ = std::fs::remove_file(&reply);
    answer
}

fn rejection(answer: &serde_json::Value) -> String {
    assert_eq!(answer["kind"], "rejected", "{answer}");
    answer["error"].as_str().unwrap().to_string()
}

#[test]
fn hostile_spool_files_are_refused_and_the_daemon_carries_on() {
    let c = Cluster::started("max_spool_file = \"1MiB\"");
    let secret = c.dir.path().join("secret");
    std::fs::write(&secret, b"{\"version\":1}").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();

    let link = drop_raw(&c, "job-link", |p| {
        std::os::unix::fs::symlink(&secret, p).unwrap()
    });
    assert!(rejection(&link).contains("symbolic link"), "{link}");
    assert!(secret.exists(), "the link's target is untouched");

    let hard = drop_raw(&c, "job-hard", |p| std::fs::hard_link(&secret, p).unwrap());
    assert!(rejection(&hard).contains("2 hard links"), "{hard}");
    assert!(secret.exists());

    let fifo = drop_raw(&c, "job-fifo", |p| {
        nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
    });
    assert!(rejection(&fifo).contains("FIFO"), "{fifo}");

    let big = drop_raw(&c, "job-big", |p| {
        std::fs::write(p, vec![b' '; 2 << 20]).unwrap()
    });
    assert!(
        rejection(&big).contains("over the limit of 1048576"),
        "{big}"
    );

    let truncated = drop_raw(&c, "job-trunc", |p| {
        std::fs::write(
            p,
            br#"{"version":1,"request":{"kind":"submit","body":{"name":"x""#,
        )
        .unwrap()
    });
    assert!(rejection(&truncated).contains("truncated"), "{truncated}");

    let binary = drop_raw(&c, "job-bin", |p| {
        std::fs::write(p, [0x7b, 0xff, 0xfe, 0x00]).unwrap()
    });
    assert!(rejection(&binary).contains("not valid UTF-8"), "{binary}");

    let garbage = drop_raw(&c, "job-json", |p| {
        std::fs::write(p, br#"{"version":1,"request":{"kind":"launch_missiles"}}"#).unwrap()
    });
    assert!(
        rejection(&garbage).contains("not a valid ysched request"),
        "{garbage}"
    );

    let version = drop_raw(&c, "job-v2", |p| {
        std::fs::write(p, br#"{"version":2,"request":{}}"#).unwrap()
    });
    assert!(
        rejection(&version).contains("protocol version 2"),
        "{version}"
    );

    let dir = drop_raw(&c, "job-dir", |p| std::fs::create_dir(p).unwrap());
    assert!(rejection(&dir).contains("directory"), "{dir}");

    // A name the protocol never produces is refused too (no reply file can
    // be made for it, so only the removal is visible).
    let odd = c.spool.join("incoming").join("job name with spaces");
    std::fs::write(&odd, b"{}").unwrap();
    wait_for(
        "the oddly named file to be removed",
        Duration::from_secs(10),
        || !odd.exists(),
    );

    // Still serving: a real job goes through.
    let id = c.submit(&["--wrap", "echo still here"]);
    assert_eq!(c.wait_done(id, Duration::from_secs(20)), "COMPLETED");
    assert_eq!(c.output_of(id), "still here\n");
    assert!(
        c.log().contains("rejected request job-link"),
        "rejections are logged"
    );
    let q = c.run("ysqueue", &["-h"]);
    assert!(q.status.success(), "{}", stderr(&q));
    assert_eq!(stdout(&q), "");
}

#[test]
fn a_stale_request_file_without_a_reply_file_is_still_taken() {
    // A client killed after renaming its request in: the job is taken, no
    // reply is written anywhere.
    let c = Cluster::started("");
    let request = serde_json::json!({
        "version": 1,
        "request": {"kind": "submit", "body": {
            "name": "orphan", "account": null, "qos": null, "gpus": {"count": 1, "gpu_type": null},
            "cpus": 1, "mem_mb": null, "time_limit": null, "output": null, "error": null,
            "open_append": false, "work_dir": c.work, "submit_dir": c.work, "environment": [],
            "hold": false, "begin_time": null, "comment": null,
            "script": "#!/bin/sh\necho orphan ran\n", "args": []
        }}
    });
    let temp = c.spool.join("incoming").join(".job-orphan.tmp");
    std::fs::write(&temp, serde_json::to_vec(&request).unwrap()).unwrap();
    std::fs::rename(&temp, c.spool.join("incoming").join("job-orphan")).unwrap();
    let mut id = 0;
    wait_for("the orphan job", Duration::from_secs(10), || {
        let out = stdout(&c.run("ysacct", &["-n", "-P", "-o", "JobID", "--name", "orphan"]));
        id = out.trim().parse().unwrap_or(0);
        id > 0
    });
    assert_eq!(c.wait_done(id, Duration::from_secs(20)), "COMPLETED");
    assert_eq!(c.output_of(id), "orphan ran\n");
}
