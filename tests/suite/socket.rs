//! The daemon's socket (`SPOOL/ysctld.sock`): state changes sent on it are
//! applied once, whichever way they come, by the uid the kernel reports;
//! hostile connections are answered or dropped and block nobody; a sender
//! that gets no answer on the socket falls back to the spool files.

use crate::common;

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use crate::common::{stderr, stdout, wait_for, Cluster, TestUser};

/// A submission's envelope exactly as ysbatch writes it: submitted while
/// the daemon is down, it waits in `incoming/`, from where it is taken.
fn envelope_of_a_submission(c: &mut Cluster) -> Vec<u8> {
    common::spooled_submission(c, &["-H", "-G", "1", "--wrap", "true"])
}

/// Sends `message` on the daemon's socket and returns all it answers.
fn exchange(c: &Cluster, message: &[u8]) -> Vec<u8> {
    let mut s = UnixStream::connect(c.spool.join("ysctld.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(message).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    answer
}

fn request(name: &str, body: &[u8]) -> Vec<u8> {
    [name.as_bytes(), b"\n", body].concat()
}

fn reply(answer: &[u8]) -> serde_json::Value {
    serde_json::from_slice(answer)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(answer)))
}

fn jobs_listed(c: &Cluster) -> usize {
    stdout(&c.run("ysqueue", &["-h", "-t", "all", "-o", "%i"]))
        .lines()
        .count()
}

#[test]
fn a_state_change_on_the_socket_is_applied_once_whichever_way_it_comes() {
    let mut c = Cluster::started("");
    let socket = c.spool.join("ysctld.sock");
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o666);

    let body = envelope_of_a_submission(&mut c);
    let name = "job-1-18ecc5851ae8ee6b-0123456789abcdef";
    let first = reply(&exchange(&c, &request(name, &body)));
    assert_eq!(first["kind"], "submitted", "{first}");
    let id = first["job_id"].as_u64().unwrap();
    assert_eq!(jobs_listed(&c), 1);

    // The same name again, on the socket and then as a file: the same job.
    let again = reply(&exchange(&c, &request(name, &body)));
    assert_eq!(again["job_id"].as_u64(), Some(id), "{again}");
    let reply_file = c.spool.join("replies").join(name);
    std::fs::write(&reply_file, b"").unwrap();
    std::fs::write(c.spool.join("incoming").join(name), &body).unwrap();
    let mut by_file = serde_json::Value::Null;
    wait_for("the reply to the file", Duration::from_secs(10), || {
        by_file = std::fs::read(&reply_file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        !by_file.is_null()
    });
    assert_eq!(by_file["job_id"].as_u64(), Some(id), "{by_file}");
    assert_eq!(jobs_listed(&c), 1);

    // Identity is the connection's: the same name from another user is
    // refused, and a new one is that user's job whatever the envelope says.
    if common::is_root() {
        let user = TestUser::create("sock");
        let send_as = |name: &str| {
            let script = format!(
                "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect({socket:?})\ns.sendall(sys.stdin.buffer.read())\ns.shutdown(socket.SHUT_WR)\nsys.stdout.buffer.write(s.makefile('rb').read())",
                socket = socket.display().to_string()
            );
            let mut child = std::process::Command::new("runuser")
                .args(["-u", &user.name, "--", "python3", "-c", &script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(&request(name, &body))
                .unwrap();
            reply(&child.wait_with_output().unwrap().stdout)
        };
        let stolen = send_as(name);
        assert_eq!(stolen["kind"], "rejected", "{stolen}");
        assert!(
            stolen["error"].as_str().unwrap().contains("another user"),
            "{stolen}"
        );
        let theirs = send_as("job-2-18ecc5851ae8ee6b-0123456789abcdef");
        assert_eq!(theirs["kind"], "submitted", "{theirs}");
        let their_id = theirs["job_id"].as_u64().unwrap().to_string();
        let owner = stdout(&c.run("ysqueue", &["-h", "-j", &their_id, "-o", "%u"]));
        assert_eq!(owner.trim(), user.name);
    }

    // A clean stop takes the socket away; a crash leaves it, and the next
    // daemon replaces it.
    c.stop();
    assert!(!socket.exists());
    c.start();
    c.crash();
    assert!(socket.exists());
    c.start();
    assert!(c.submit(&["-H", "--wrap", "true"]) > id);
}

#[test]
fn hostile_connections_are_answered_or_dropped_and_block_nobody() {
    let mut c = Cluster::started("max_spool_file = \"1MiB\"");
    let body = envelope_of_a_submission(&mut c);

    // A connection that never sends holds up no one; one that closes
    // without a word is not a request, and goes unanswered and unlogged.
    let idle = UnixStream::connect(c.spool.join("ysctld.sock")).unwrap();
    assert!(exchange(&c, b"").is_empty());

    let answer = reply(&exchange(&c, b"no name line at all"));
    assert!(
        answer["error"].as_str().unwrap().contains("no name line"),
        "{answer}"
    );
    let answer = reply(&exchange(&c, &request("../../etc/passwd", &body)));
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("'../../etc/passwd' is not a valid spool name"),
        "{answer}"
    );
    let answer = reply(&exchange(
        &c,
        &request(
            "job-3-18ecc5851ae8ee6b-0123456789abcdef",
            b"{\"version\":1,",
        ),
    ));
    assert!(
        answer["error"].as_str().unwrap().contains("truncated"),
        "{answer}"
    );
    let answer = reply(&exchange(
        &c,
        &request("job-4-18ecc5851ae8ee6b-0123456789abcdef", b"\xff\xfe"),
    ));
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("not valid UTF-8"),
        "{answer}"
    );
    // Queries are answered through the spool files only.
    let query = br#"{"version":1,"request":{"kind":"query","body":"node"}}"#;
    let answer = reply(&exchange(
        &c,
        &request("qry-5-18ecc5851ae8ee6b-0123456789abcdef", query),
    ));
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("through the spool directory"),
        "{answer}"
    );
    // Over max_spool_file (1 MiB): dropped unanswered, so that a real
    // client sends it as a file and hears the limit from there.
    let huge = vec![b' '; (1 << 20) + 1024];
    let answer = exchange(
        &c,
        &request("job-6-18ecc5851ae8ee6b-0123456789abcdef", &huge),
    );
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));

    assert_eq!(jobs_listed(&c), 0);
    let id = c.submit(&["-H", "--wrap", "true"]);
    assert_eq!(
        stdout(&c.run("ysqueue", &["-h", "-o", "%i"])).trim(),
        id.to_string()
    );
    // The two without a usable name, and not the empty one.
    let log = c.log();
    assert_eq!(
        log.matches("rejected a request on the daemon's socket")
            .count(),
        2,
        "{log}"
    );
    drop(idle);
}

/// Puts a listener of the test's own where the daemon's socket was.
fn impostor(c: &Cluster) -> UnixListener {
    let path = c.spool.join("ysctld.sock");
    std::fs::remove_file(&path).unwrap();
    UnixListener::bind(&path).unwrap()
}

#[test]
fn a_sender_without_an_answer_on_the_socket_sends_the_request_as_a_file() {
    let c = Cluster::started("");
    // A socket that takes the request and closes without answering (a
    // daemon that crashed mid-request): the request goes as a file, under
    // the same name, and is applied once.
    let listener = impostor(&c);
    let taker = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        s.read_to_end(&mut request).unwrap();
        (listener, String::from_utf8_lossy(&request).into_owned())
    });
    let out = c.run("ysbatch", &["-H", "--wrap", "true"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("Submitted batch job "),
        "{}",
        stdout(&out)
    );
    let (listener, request) = taker.join().unwrap();
    assert!(request.starts_with("job-"), "{request}");
    assert_eq!(jobs_listed(&c), 1);

    // A socket that never answers: the sender gives up after YS_TIMEOUT,
    // leaves the request in the spool, flushed, and says so; the daemon
    // takes it from there.
    let holder = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let out = c
        .command("ysbatch")
        .args(["-H", "--wrap", "true"])
        .env("YS_TIMEOUT", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is spooled as job-"),
        "{}",
        stderr(&out)
    );
    wait_for("the spooled job", Duration::from_secs(10), || {
        jobs_listed(&c) == 2
    });
    holder.join().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(jobs_listed(&c), 2);
}

#[test]
fn a_daemon_that_cannot_make_its_socket_serves_through_the_files() {
    let mut c = Cluster::new("");
    // Something in the socket's place that is not ours to remove.
    std::fs::create_dir_all(c.spool.join("ysctld.sock").join("x")).unwrap();
    c.start();
    assert!(
        c.log()
            .contains("requests come through the spool files only: cannot listen on"),
        "{}",
        c.log()
    );
    let id = c.submit(&["--wrap", "echo by file"]);
    assert_eq!(c.wait_done(id, Duration::from_secs(20)), "COMPLETED");
    assert_eq!(c.output_of(id), "by file\n");
    let out = c.run(
        "yscancel",
        &[&c.submit(&["-H", "--wrap", "true"]).to_string()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Holds every inotify instance its user may have, then runs the
/// command it is given: what a thousand commands at once (a workflow
/// manager polling its jobs) do to the per-user limit.
const INOTIFY_HOG: &str = r#"
import ctypes, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
held = []
while True:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    held.append(fd)
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(f"held {len(held)}", file=sys.stderr)
sys.stdout.write(done.stdout)
sys.stderr.write(done.stderr)
sys.exit(done.returncode)
"#;

/// With no inotify instance left to its user, a command still gets its
/// answer: it looks for the reply file every few milliseconds instead of
/// failing with "Too many open files".
#[test]
fn a_command_answers_when_its_user_has_no_inotify_instance_left() {
    require_root!();
    let user = TestUser::create("ino");
    let mut c = Cluster::new("");
    c.start();
    let id = c.submit(&["-H", "--wrap", "true"]);
    let out = std::process::Command::new("runuser")
        .args(["-u", &user.name, "--", "env"])
        .arg(format!("YS_CONF={}", c.config.display()))
        .args(["python3", "-c", INOTIFY_HOG])
        .arg(common::bin_dir().join("ysqueue"))
        .args(["-h", "-o", "%i %T"])
        .current_dir(&c.work)
        .output()
        .unwrap();
    let held: usize = stderr(&out)
        .split_whitespace()
        .skip_while(|w| *w != "held")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(held > 0, "{}", stderr(&out));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), format!("{id} PENDING"));
    c.run("yscancel", &[&id.to_string()]);
}
