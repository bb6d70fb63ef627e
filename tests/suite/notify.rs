//! Notifications: the config's notify_command gets each event a job's
//! `--mail-type` asks for, and budget crossings, as JSON on stdin; a slow
//! command holds up nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{stderr, wait_for, Cluster};

const LONG: Duration = Duration::from_secs(20);

/// A notify command that files each event under `dir` by its name, after
/// sleeping `delay` seconds.
fn recorder(dir: &Path, delay: u32) -> PathBuf {
    let script = dir.join("record.sh");
    std::fs::create_dir_all(dir.join("events")).unwrap();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nsleep {delay}\ncat > '{}/events/'\"$YSCHED_EVENT\"-$$.json\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

/// The events recorded so far: (event name, parsed JSON).
fn events(dir: &Path) -> Vec<(String, serde_json::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir.join("events")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue; // still being written
        };
        out.push((json["event"].as_str().unwrap().to_string(), json));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn jobs_tell_what_their_mail_type_asks_for() {
    let dir = tempfile::tempdir().unwrap();
    let script = recorder(dir.path(), 0);
    let c = Cluster::started(&format!("notify_command = \"{}\"\n", script.display()));
    let ok = c.submit(&["--mail-type=BEGIN,END", "-J", "train", "--wrap", "true"]);
    let failed = c.submit(&[
        "--mail-type=FAIL",
        "--mail-user=team@example.org",
        "--wrap",
        "exit 3",
    ]);
    let quiet = c.submit(&["--wrap", "exit 4"]);
    for id in [ok, failed, quiet] {
        c.wait_done(id, LONG);
    }
    wait_for("three notifications", LONG, || {
        events(dir.path()).len() >= 3
    });
    std::thread::sleep(Duration::from_millis(300));
    let got = events(dir.path());
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        vec!["job_began", "job_ended", "job_failed"],
        "{got:?}"
    );
    let began = &got[0].1;
    assert_eq!(began["job"]["id"], ok.to_string());
    assert_eq!(began["mail_user"], "root", "the job's user by default");
    let ended = &got[1].1;
    assert_eq!(ended["job"]["state"], "COMPLETED");
    assert_eq!(ended["job"]["exit_code"], 0);
    assert!(
        ended["subject"].as_str().unwrap().starts_with(&format!(
            "ysched job {ok} (train) ended: COMPLETED, exit 0, ran"
        )),
        "{ended}"
    );
    let fail = &got[2].1;
    assert_eq!(fail["job"]["id"], failed.to_string());
    assert_eq!(fail["job"]["exit_code"], 3);
    assert_eq!(fail["mail_user"], "team@example.org");

    // A type that does not exist: refused with the allowed ones, exit 2.
    let out = c.run("ysbatch", &["--mail-type=SOMETIMES", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown mail type 'SOMETIMES' (allowed: NONE, BEGIN, END"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_slow_notify_command_holds_up_no_job() {
    let dir = tempfile::tempdir().unwrap();
    let script = recorder(dir.path(), 4);
    let c = Cluster::started(&format!(
        "notify_command = \"{}\"\nnotify_timeout_secs = 10\n",
        script.display()
    ));
    let started = Instant::now();
    let ids: Vec<u64> = (0..4)
        .map(|_| c.submit(&["--mail-type=ALL", "--wrap", "true"]))
        .collect();
    for id in &ids {
        assert_eq!(c.wait_done(*id, LONG), "COMPLETED");
    }
    // Eight events at four seconds each take 32 s to deliver; the jobs
    // did not wait for them.
    assert!(
        started.elapsed() < Duration::from_secs(16),
        "jobs waited for notifications: {:?}",
        started.elapsed()
    );
    assert!(events(dir.path()).len() < 8);
}

#[test]
fn an_account_crossing_its_budget_warning_tells_its_coordinators() {
    let dir = tempfile::tempdir().unwrap();
    let script = recorder(dir.path(), 0);
    // 0.003 tokens: 10.8 GPU-seconds; warned at half.
    let c = Cluster::started(&format!(
        "notify_command = \"{}\"\n[[accounts]]\nname = \"vision\"\nusers = [\"*\"]\n\
         coordinators = [\"root\", \"carol\"]\nbudget = 0.003\nbudget_warning = 0.5\n\
         over_budget = \"lowest_qos\"\n",
        script.display()
    ));
    let id = c.submit(&[
        "-A", "vision", "--gpus", "4", "-t", "1", "--wrap", "sleep 2",
    ]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    wait_for("the budget notification", LONG, || {
        events(dir.path())
            .iter()
            .any(|(n, _)| n.starts_with("budget_"))
    });
    let got = events(dir.path());
    let (name, budget) = got.iter().find(|(n, _)| n.starts_with("budget_")).unwrap();
    // 4 GPUs × ≥ 2 s ≥ 8 GPU-seconds: past the warning, maybe past all of it.
    assert!(
        name == "budget_warning" || name == "budget_exhausted",
        "{name}"
    );
    assert_eq!(budget["mail_user"], "root,carol");
    assert_eq!(budget["budget"]["account"], "vision");
    assert!(budget["budget"]["used_fraction"].as_f64().unwrap() >= 0.5);
}

/// The mail helper passes recipients to sendmail as arguments, never
/// through headers, and refuses an address that carries anything else.
#[test]
fn notify_mail_cannot_be_made_to_add_recipients_or_headers() {
    let dir = tempfile::tempdir().unwrap();
    let sendmail = dir.path().join("sendmail");
    let record = dir.path().join("sent");
    std::fs::write(
        &sendmail,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{0}.args'\ncat > '{0}.body'\n",
            record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&sendmail, std::fs::Permissions::from_mode(0o755)).unwrap();
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/notify/notify-mail");
    let run = |user: &str, subject: &str| {
        let mut child = std::process::Command::new(&helper)
            .env("SENDMAIL", &sendmail)
            .env("MAIL_DOMAIN", "example.org")
            .env("YSCHED_MAIL_USER", user)
            .env("YSCHED_SUBJECT", subject)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"{}\n").unwrap();
        child.wait_with_output().unwrap()
    };
    for hostile in [
        "a@b.org\nBcc: eve@evil.org",
        "-oQ/tmp/x",
        "a b@c.org",
        "\"x\"@y",
    ] {
        let out = run(hostile, "job 1 ended");
        assert!(!out.status.success(), "{hostile:?} accepted");
        assert!(
            stderr(&out).contains("refusing recipient"),
            "{}",
            stderr(&out)
        );
        assert!(
            !record.with_extension("args").exists(),
            "sendmail ran for {hostile:?}"
        );
    }
    let out = run("alice", "job 1 ended\nBcc: eve@evil.org");
    assert!(out.status.success(), "{}", stderr(&out));
    let args = std::fs::read_to_string(record.with_extension("args")).unwrap();
    assert_eq!(args, "-i\n--\nalice@example.org\n");
    let body = std::fs::read_to_string(record.with_extension("body")).unwrap();
    assert!(
        body.contains("Subject: job 1 endedBcc: eve@evil.org\n"),
        "the subject stays one line: {body}"
    );
    assert!(!body.lines().any(|l| l.starts_with("Bcc:")), "{body}");
}
