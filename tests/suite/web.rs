//! `yswebd`, the JSON API, end to end: a real `ysctld`, `yswebd` running
//! as an unprivileged account, users made for the test with their tokens
//! from `ystoken`, and HTTP on loopback. Each case asserts what a client
//! sees (status, JSON) and what happened (job states, files, the audit
//! log).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, bin_dir, stderr, stdout, wait_for, Cluster, TestUser};

/// A running `yswebd`, stopped when dropped.
pub(crate) struct WebServer {
    child: Child,
    pub(crate) port: u16,
    log: std::path::PathBuf,
}

impl Drop for WebServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl WebServer {
    /// `yswebd` as `user`, on a free loopback port, once it answers.
    pub(crate) fn start(c: &Cluster, user: &str) -> WebServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = c.dir.path().join(format!("yswebd-{port}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("runuser")
            .args(["-u", user, "--", "env"])
            .arg(format!("YS_CONF={}", c.config.display()))
            .arg("YS_LOG=debug")
            .arg(bin_dir().join("yswebd"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        let server = WebServer { child, port, log };
        wait_for("yswebd to listen", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        server
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One request; the status and the body.
    fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        let mut raw = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            raw.push_str(&format!("{name}: {value}\r\n"));
        }
        raw.push_str("\r\n");
        let mut bytes = raw.into_bytes();
        bytes.extend_from_slice(body);
        self.raw(&bytes)
    }

    fn raw(&self, request: &[u8]) -> (u16, String) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(40)))
            .unwrap();
        let _ = stream.write_all(request);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    fn get(&self, path: &str, token: &str) -> (u16, serde_json::Value) {
        let (status, body) = self.call("GET", path, &[("X-SLURM-USER-TOKEN", token)], b"");
        (status, json(&body))
    }
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// `user`'s token, from `ystoken` run as them.
pub(crate) fn token_of(c: &Cluster, user: &str, args: &[&str]) -> String {
    let out = c.run_as(user, "ystoken", args);
    assert!(out.status.success(), "ystoken as {user}: {}", stderr(&out));
    stdout(&out)
        .trim()
        .strip_prefix("SLURM_JWT=")
        .unwrap()
        .to_string()
}

fn submit_body(c: &Cluster, script: &str, name: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "script": script,
        "job": {
            "name": name,
            "current_working_directory": c.work,
            "environment": ["PATH=/usr/bin:/bin"],
            "tres_per_job": "gres/gpu:1",
            "time_limit": 10,
        }
    }))
    .unwrap()
}

fn submitted(web: &WebServer, token: &str, body: &[u8]) -> u64 {
    let (status, answer) = web.call(
        "POST",
        "/slurm/v0.0.45/job/submit",
        &[("X-SLURM-USER-TOKEN", token)],
        body,
    );
    assert_eq!(status, 200, "{answer}");
    json(&answer)["job_id"].as_u64().unwrap()
}

fn cluster_with_web(web_user: &str, extra: &str) -> Cluster {
    Cluster::started(&format!(
        "{extra}\n[web]\nuser = \"{web_user}\"\nmax_body_kb = 64\n"
    ))
}

#[test]
fn users_submit_watch_and_cancel_through_the_api_by_the_command_line_rules() {
    require_root!();
    let (alice, bob, www) = (
        TestUser::create("wa"),
        TestUser::create("wb"),
        TestUser::create("ww"),
    );
    let c = cluster_with_web(&www.name, "");
    let web = WebServer::start(&c, &www.name);
    let (a, b) = (token_of(&c, &alice.name, &[]), token_of(&c, &bob.name, &[]));

    // The description needs no token; the API does.
    let (status, doc) = web.call("GET", "/openapi.json", &[], b"");
    assert_eq!(status, 200);
    assert!(json(&doc)["paths"]["/slurm/v0.0.45/job/submit"]["post"].is_object());
    let (status, body) = web.call("GET", "/slurm/v0.0.45/jobs", &[], b"");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("ystoken"), "{body}");

    // Alice's job runs as her and writes its output.
    let id = submitted(
        &web,
        &a,
        &submit_body(&c, "#!/bin/sh\necho from the api; id -un\n", "api-one"),
    );
    assert_eq!(c.wait_done(id, Duration::from_secs(30)), "COMPLETED");
    let out = std::fs::read_to_string(c.work.join(format!("ys-{id}.out"))).unwrap();
    assert_eq!(out, format!("from the api\n{}\n", alice.name));
    let (status, one) = web.get(&format!("/slurm/v0.0.44/job/{id}"), &a);
    assert_eq!(status, 200, "{one}");
    assert_eq!(
        one["jobs"][0]["job_state"],
        serde_json::json!(["COMPLETED"])
    );
    assert_eq!(one["jobs"][0]["user_name"], alice.name.as_str());
    assert_eq!(one["jobs"][0]["exit_code"]["return_code"]["number"], 0);

    // Usage by GPU type, this month.
    let (status, usage) = web.get("/ysched/v1/usage", &a);
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["gpu_types"][0]["gpu_type"], "any", "{usage}");
    assert_eq!(usage["gpu_types"][0]["jobs"], 1, "{usage}");
    // Its output: hers to read, not Bob's.
    let (status, tail) = web.get(&format!("/ysched/v1/job/{id}/output"), &a);
    assert_eq!(status, 200, "{tail}");
    assert_eq!(tail["text"], format!("from the api\n{}\n", alice.name));
    let (status, refused) = web.get(&format!("/ysched/v1/job/{id}/output"), &b);
    assert_eq!(status, 403, "{refused}");

    // Bob may not cancel Alice's job; she may.
    let long = submitted(
        &web,
        &a,
        &submit_body(&c, "#!/bin/sh\nsleep 300\n", "api-long"),
    );
    c.wait_state(long, "RUNNING", Duration::from_secs(20));
    let path = format!("/slurm/v0.0.45/job/{long}");
    let (status, refused) = web.call("DELETE", &path, &[("X-SLURM-USER-TOKEN", &b)], b"");
    assert_eq!(status, 403, "{refused}");
    assert!(refused.contains("permission denied"), "{refused}");
    assert_eq!(c.state(long), "RUNNING");
    let (status, done) = web.call("DELETE", &path, &[("X-SLURM-USER-TOKEN", &a)], b"");
    assert_eq!(status, 200, "{done}");
    assert_eq!(c.wait_done(long, Duration::from_secs(20)), "CANCELLED");

    listings_accounting_and_nodes(&web, (&a, &b), &alice.name, (id, long));

    // The audit log names the channel of what came through the web.
    let audit = stdout(&c.run("yscontrol", &["show", "audit"]));
    assert!(
        audit.contains(&format!("{} submit via=rest job={id}", alice.name)),
        "{audit}"
    );
    assert!(
        audit.contains(&format!(
            "{} cancel via=rest job={long} {long}: permission denied",
            bob.name
        )),
        "{audit}"
    );
    assert!(!web.log().contains(&a), "a token was logged");
}

/// The listing, the accounting query and the nodes, after job `id` ended
/// and `long` was cancelled (both Alice's).
fn listings_accounting_and_nodes(
    web: &WebServer,
    (a, b): (&str, &str),
    alice: &str,
    (id, long): (u64, u64),
) {
    // The listing and the accounting query; the nodes.
    let (status, jobs) = web.get("/slurm/v0.0.45/jobs/", a);
    assert_eq!(status, 200);
    let ids: Vec<u64> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    assert!(ids.contains(&id) && ids.contains(&long), "{jobs}");
    let (status, acct) = web.get(&format!("/slurmdb/v0.0.45/jobs?users={}", alice), a);
    assert_eq!(status, 200, "{acct}");
    let states: Vec<&str> = acct["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["state"]["current"][0].as_str().unwrap())
        .collect();
    assert_eq!(states, ["COMPLETED", "CANCELLED"], "{acct}");
    let (status, nodes) = web.get("/slurm/v0.0.45/nodes", b);
    assert_eq!(status, 200);
    assert_eq!(nodes["nodes"][0]["name"], "gpu01");
    assert_eq!(nodes["nodes"][0]["gres"], "gpu:a100:4");
}

/// A token for nodes and a revoked one are not the API's: 401, saying
/// why. A fresh token for the API.
fn node_and_revoked_tokens_are_not_the_apis(c: &Cluster, web: &WebServer, alice: &str) -> String {
    let for_nodes = token_of(c, alice, &["--audience", "node"]);
    let (status, body) = web.get("/slurm/v0.0.45/jobs", &for_nodes);
    assert_eq!(status, 401);
    assert!(
        body.to_string()
            .contains("the token is for the pool's nodes, not for the REST API"),
        "{body}"
    );
    let revoked = token_of(c, alice, &[]);
    let out = c.run_as(alice, "ystoken", &["--revoke", "all"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Nothing left to revoke, and an id that is not hers: said.
    let out = c.run_as(alice, "ystoken", &["--revoke", "all"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("none is valid to revoke"),
        "{}",
        stderr(&out)
    );
    let out = c.run_as(alice, "ystoken", &["--revoke", "0123abcd"]);
    assert!(
        stderr(&out).contains(&format!(
            "no token 0123abcd of {alice}'s is valid to revoke"
        )),
        "{}",
        stderr(&out)
    );
    let (status, body) = web.get("/slurm/v0.0.45/jobs", &revoked);
    assert_eq!(status, 401);
    assert!(body.to_string().contains("revoked"), "{body}");
    token_of(c, alice, &[])
}

#[test]
fn tokens_that_are_forged_expired_foreign_or_someone_elses_are_refused() {
    require_root!();
    let (alice, www) = (TestUser::create("wt"), TestUser::create("wx"));
    let c = cluster_with_web(&www.name, "");
    let web = WebServer::start(&c, &www.name);
    let good = token_of(&c, &alice.name, &[]);
    let (status, _) = web.get("/slurm/v0.0.45/jobs", &good);
    assert_eq!(status, 200);

    // Signed with another key.
    let dir = tempfile::tempdir().unwrap();
    let foreign = ysched::token::TokenKey::load_or_create(&dir.path().join("k"))
        .unwrap()
        .mint(
            &alice.name,
            &[ysched::token::Audience::Rest],
            "j",
            ysched::model::units::now(),
            600,
        )
        .unwrap();
    let (status, body) = web.get("/slurm/v0.0.45/jobs", &foreign);
    assert_eq!(status, 401, "{body}");
    assert!(body["errors"][0]["description"]
        .as_str()
        .unwrap()
        .contains("not one this controller signed"));
    // A claim changed: the signature no longer holds.
    let parts: Vec<&str> = good.split('.').collect();
    use base64::Engine as _;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(br#"{"sun":"root","iat":1,"exp":99999999999}"#);
    let (status, _) = web.get(
        "/slurm/v0.0.45/jobs",
        &format!("{}.{claims}.{}", parts[0], parts[2]),
    );
    assert_eq!(status, 401);
    // Garbage, and a name that is not the token's.
    let (status, _) = web.get("/slurm/v0.0.45/jobs", "not-a-token");
    assert_eq!(status, 401);
    let (status, body) = web.call(
        "GET",
        "/slurm/v0.0.45/jobs",
        &[("X-SLURM-USER-TOKEN", &good), ("X-SLURM-USER-NAME", "root")],
        b"",
    );
    assert_eq!(status, 401);
    assert!(body.contains("not root's"), "{body}");
    // Expired.
    let short = token_of(&c, &alice.name, &["--lifespan", "1"]);
    std::thread::sleep(Duration::from_millis(2_100));
    let (status, body) = web.get("/slurm/v0.0.45/jobs", &short);
    assert_eq!(status, 401);
    assert!(
        body["errors"][0]["description"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{body}"
    );
    let good = node_and_revoked_tokens_are_not_the_apis(&c, &web, &alice.name);
    // Bearer works as the header does.
    let (status, _) = web.call(
        "GET",
        "/ysched/v1/shares",
        &[("Authorization", &format!("Bearer {good}"))],
        b"",
    );
    assert_eq!(status, 200);
    // Every endpoint, a cancel too, answers a token it does not take 401,
    // and the refused action is in the audit log.
    let id = c.submit(&["--wrap", "sleep 30"]);
    let job = submit_body(&c, "#!/bin/sh\ntrue\n", "forged");
    for (method, path, body) in [
        ("DELETE", format!("/slurm/v0.0.45/job/{id}"), &b""[..]),
        ("POST", "/slurm/v0.0.45/job/submit".into(), &job[..]),
    ] {
        for token in [foreign.as_str(), short.as_str()] {
            let (status, answer) = web.call(method, &path, &[("X-SLURM-USER-TOKEN", token)], body);
            assert_eq!(status, 401, "{method} {path}: {answer}");
        }
    }
    let audit = stdout(&c.run("yscontrol", &["show", "audit"]));
    assert!(
        audit
            .lines()
            .any(|l| l.contains("- cancel via=rest refused:") && l.contains("expired")),
        "{audit}"
    );
    assert_eq!(c.state(id), "RUNNING");
    let out = c.run("yscancel", &[&id.to_string()]);
    assert!(out.status.success());
}

#[test]
fn bad_requests_get_the_right_status_and_a_message() {
    require_root!();
    let (alice, www) = (TestUser::create("wr"), TestUser::create("wy"));
    let c = cluster_with_web(&www.name, "");
    let web = WebServer::start(&c, &www.name);
    let a = token_of(&c, &alice.name, &[]);
    let auth = [("X-SLURM-USER-TOKEN", a.as_str())];
    let submit = |body: &[u8]| web.call("POST", "/slurm/v0.0.45/job/submit", &auth, body);

    let cases: [(&[u8], u16, &str); 5] = [
        (b"{not json", 400, "not JSON"),
        (
            br##"{"script":"#!/bin/sh\n","job":{"name":"n","frobnicate":1}}"##,
            400,
            "unknown field 'job.frobnicate'",
        ),
        (
            b"{\"script\":\"#!/bin/sh\\n\\u0000\",\"job\":{}}",
            400,
            "NUL",
        ),
        (br#"{"script":"true\n","job":{}}"#, 400, "#!"),
        (
            br##"{"script":"#!/bin/sh\n","job":{"time_limit":"soon"}}"##,
            400,
            "job.time_limit",
        ),
    ];
    for (body, want, says) in cases {
        let (status, answer) = submit(body);
        assert_eq!(status, want, "{}: {answer}", String::from_utf8_lossy(body));
        assert!(answer.contains(says), "{says} not in {answer}");
    }
    // An account she is not in: the daemon's own refusal.
    let body = serde_json::json!({"script": "#!/bin/sh\ntrue\n", "job": {"account": "nosuch", "current_working_directory": c.work}});
    let (status, answer) = submit(&serde_json::to_vec(&body).unwrap());
    assert_eq!(status, 400, "{answer}");
    assert!(answer.contains("nosuch"), "{answer}");
    // Too large, announced: refused before it is read.
    let (status, answer) =
        web.raw(b"POST /slurm/v0.0.45/job/submit HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n");
    assert_eq!(status, 413, "{answer}");
    let (status, _) = web.raw(
        b"POST /slurm/v0.0.45/job/submit HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert_eq!(status, 411);
    let (status, _) = web.raw(b"\x16\x03\x01garbage\r\n\r\n");
    assert_eq!(status, 400);
    let (status, _) = web.call("PUT", "/slurm/v0.0.45/jobs", &auth, b"");
    assert_eq!(status, 405);
    let (status, answer) = web.call("GET", "/slurm/v0.0.39/jobs", &auth, b"");
    assert_eq!(status, 404);
    assert!(answer.contains("v0.0.45"), "{answer}");
    let (status, _) = web.call("GET", "/slurm/v0.0.45/job/999999", &auth, b"");
    assert_eq!(status, 404);
    let (status, _) = web.call("GET", "/slurm/v0.0.45/job/abc", &auth, b"");
    assert_eq!(status, 400);
    // Nothing of it reached the queue.
    assert_eq!(stdout(&c.run("ysqueue", &["-h"])), "");
}

#[test]
fn a_client_that_trickles_its_request_loses_its_worker_at_the_deadline() {
    require_root!();
    let www = TestUser::create("wk");
    let c = Cluster::started(&format!(
        "[web]\nuser = \"{}\"\nmax_connections = 2\n",
        www.name
    ));
    let web = WebServer::start(&c, &www.name);
    // Both workers and both places in the queue, each connection sending
    // a byte of its request every second for 30 s: never a whole request.
    let port = web.port;
    let tricklers: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                for b in b"GET /openapi.json HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                    .iter()
                    .take(30)
                {
                    if s.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // One deadline for the whole request, 10 s from accept: well before
    // the tricklers are done, a normal request is served.
    let started = Instant::now();
    wait_for(
        "a normal request to be served",
        Duration::from_secs(15),
        || web.call("GET", "/openapi.json", &[], b"").0 == 200,
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    drop(tricklers);
}

#[test]
fn a_flood_of_connections_is_bounded_and_scheduling_goes_on() {
    require_root!();
    let www = TestUser::create("wf");
    let c = Cluster::started(&format!(
        "[web]\nuser = \"{}\"\nmax_connections = 4\n",
        www.name
    ));
    let web = WebServer::start(&c, &www.name);
    // Idle connections that never send a request: 4 workers, 4 queued.
    let idle: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", web.port)).ok())
        .collect();
    assert!(idle.len() >= 100, "only {} connections opened", idle.len());
    let (status, body) = web.call("GET", "/openapi.json", &[], b"");
    assert_eq!(status, 503, "{body}");
    // Its threads: the workers and the listener, whatever the flood.
    let listen = format!("127.0.0.1:{}", web.port);
    let most = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|p| {
            let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
            comm.trim() == "yswebd"
                && cmdline
                    .split(|b| *b == 0)
                    .any(|arg| arg == listen.as_bytes())
        })
        .filter_map(|p| std::fs::read_to_string(p.path().join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse::<u32>().ok())
        })
        .max()
        .unwrap_or(0);
    assert!(
        (5..=6).contains(&most),
        "yswebd has {most} threads: {}",
        web.log()
    );
    // Meanwhile the daemon schedules as ever.
    let started = Instant::now();
    let id = c.submit(&["--wrap", "true"]);
    assert_eq!(c.wait_done(id, Duration::from_secs(20)), "COMPLETED");
    assert!(started.elapsed() < Duration::from_secs(20));
    drop(idle);
    // The idle ones time out (10 s); then requests are served again.
    wait_for("yswebd to serve again", Duration::from_secs(30), || {
        web.call("GET", "/openapi.json", &[], b"").0 == 200
    });
}

#[test]
fn https_with_the_configured_certificate() {
    require_root!();
    if Command::new("curl").arg("--version").output().is_err() {
        common::skip(module_path!(), "curl is not installed");
        return;
    }
    let (alice, www) = (TestUser::create("wh"), TestUser::create("wz"));
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.path().join("web.crt"), dir.path().join("web.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let c = Cluster::started(&format!(
        "[web]\nuser = \"{}\"\ncertificate = \"{}\"\nkey = \"{}\"\n",
        www.name,
        cert_path.display(),
        key_path.display()
    ));
    let web = WebServer::start(&c, &www.name);
    let token = token_of(&c, &alice.name, &[]);
    let url = format!("https://localhost:{}/slurm/v0.0.45/ping", web.port);
    let out = Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&cert_path)
        .args([
            "-H",
            &format!("X-SLURM-USER-TOKEN: {token}"),
            "-D",
            "-",
            &url,
        ])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{}{}", text, stderr(&out));
    assert!(
        text.contains("HTTP/1.1 200") && text.contains("Strict-Transport-Security"),
        "{text}"
    );
    assert!(text.contains("\"pinged\":\"UP\""), "{text}");
    // Plain HTTP to the HTTPS port gets nothing served.
    let out = Command::new("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "15",
        ])
        .arg(format!("http://localhost:{}/openapi.json", web.port))
        .output()
        .unwrap();
    assert_ne!(stdout(&out), "200");
}

/// A second name for uid 0, removed when dropped (by name alone: never
/// with pkill, which would take it for root).
struct RootAlias(String);

impl RootAlias {
    fn create() -> RootAlias {
        let name = format!("ysroot{}", std::process::id() % 100_000);
        let _ = Command::new("userdel").args(["-f", &name]).output();
        let out = Command::new("useradd")
            .args([
                "-o",
                "-u",
                "0",
                "-g",
                "0",
                "--no-create-home",
                "--shell",
                "/bin/sh",
                &name,
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "useradd {name}: {}", stderr(&out));
        RootAlias(name)
    }
}

impl Drop for RootAlias {
    fn drop(&mut self) {
        let _ = Command::new("userdel").args(["-f", &self.0]).output();
    }
}

#[test]
fn a_trusted_proxy_names_the_user_and_an_untrusted_one_is_ignored() {
    require_root!();
    let (alice, www) = (TestUser::create("wp"), TestUser::create("wq"));
    const SECRET: &str = "0123456789abcdef0123456789abcdef";
    let secret_dir = tempfile::tempdir().unwrap();
    let secret_file = secret_dir.path().join("proxy.secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let chown = Command::new("chown")
        .arg(&www.name)
        .arg(&secret_file)
        .status()
        .unwrap();
    assert!(chown.success());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(secret_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let proxied = |addresses: &str| {
        Cluster::started(&format!(
            "[web]\nuser = \"{}\"\nproxy_header = \"X-Remote-User\"\nproxy_addresses = [{addresses}]\nproxy_secret_file = \"{}\"\n",
            www.name,
            secret_file.display()
        ))
    };
    let c = proxied("\"127.0.0.1\"");
    let web = WebServer::start(&c, &www.name);
    // Any local account shares the proxy's address: without the proxy's
    // secret, or with a wrong one, the header names nobody.
    for extra in [
        vec![],
        vec![("X-Ysched-Proxy-Secret", "guessed-guessed-guessed-guessed")],
    ] {
        let mut headers = vec![("X-Remote-User", alice.name.as_str())];
        headers.extend(extra);
        let (status, body) = web.call("GET", "/slurm/v0.0.45/jobs", &headers, b"");
        assert_eq!(status, 401, "{body}");
    }
    assert!(
        web.log().contains("without the proxy's secret"),
        "{}",
        web.log()
    );
    let (status, body) = web.call(
        "POST",
        "/slurm/v0.0.45/job/submit",
        &[
            ("X-Remote-User", &alice.name),
            ("X-Ysched-Proxy-Secret", SECRET),
        ],
        &submit_body(&c, "#!/bin/sh\nid -un\n", "via-proxy"),
    );
    assert_eq!(status, 200, "{body}");
    let id = json(&body)["job_id"].as_u64().unwrap();
    assert_eq!(c.wait_done(id, Duration::from_secs(30)), "COMPLETED");
    assert_eq!(c.field(id, "User"), alice.name);
    // Never root, nor an administrator, through the proxy.
    let (status, body) = web.call(
        "GET",
        "/slurm/v0.0.45/jobs",
        &[("X-Remote-User", "root"), ("X-Ysched-Proxy-Secret", SECRET)],
        b"",
    );
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("permission denied"), "{body}");
    // Nor root under a second name: uids are compared, not names.
    let alias = RootAlias::create();
    let (status, body) = web.call(
        "GET",
        "/slurm/v0.0.45/jobs",
        &[
            ("X-Remote-User", &alias.0),
            ("X-Ysched-Proxy-Secret", SECRET),
        ],
        b"",
    );
    assert_eq!(status, 403, "{body}");
    drop(web);
    drop(c);

    // The header from an address that is no trusted proxy counts for nothing.
    let c = proxied("\"192.0.2.1\"");
    let web = WebServer::start(&c, &www.name);
    let (status, _) = web.call(
        "GET",
        "/slurm/v0.0.45/jobs",
        &[
            ("X-Remote-User", &alice.name),
            ("X-Ysched-Proxy-Secret", SECRET),
        ],
        b"",
    );
    assert_eq!(status, 401);
    assert!(web.log().contains("no trusted proxy"), "{}", web.log());
}

#[test]
fn failed_portal_sign_ins_are_limited_and_a_good_one_sets_a_safe_cookie() {
    require_root!();
    let (alice, www) = (TestUser::create("wl"), TestUser::create("wm"));
    let c = cluster_with_web(&www.name, "");
    let web = WebServer::start(&c, &www.name);
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    for _ in 0..10 {
        let (status, body) = web.call("POST", "/login", &form, b"token=forged");
        assert_eq!(status, 401, "{body}");
        assert!(body.contains("not a token"), "{body}");
    }
    let (status, _) = web.call("POST", "/login", &form, b"token=forged");
    assert_eq!(status, 429);
    // Whoever sent those locked out themselves, not every user of this
    // address (all of a proxy's clients share it): alice's good token
    // passes at once.
    let token = token_of(&c, &alice.name, &[]);
    let mut stream = TcpStream::connect(("127.0.0.1", web.port)).unwrap();
    let body = format!("token={token}");
    write!(
        stream,
        "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let cookie = answer
        .lines()
        .find(|l| l.starts_with("Set-Cookie: "))
        .unwrap_or_else(|| panic!("no cookie: {answer}"));
    for flag in [
        "ysched_session=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/",
        "Max-Age=",
    ] {
        assert!(cookie.contains(flag), "{flag} missing: {cookie}");
    }
    // Pages without a session go to sign in; the API never takes the cookie.
    let (status, _) = web.call("GET", "/queue", &[], b"");
    assert_eq!(status, 303);
    let session = format!("ysched_session={token}");
    let (status, _) = web.call("GET", "/slurm/v0.0.45/jobs", &[("Cookie", &session)], b"");
    assert_eq!(status, 401);
    let (status, page) = web.call("GET", "/queue", &[("Cookie", &session)], b"");
    assert_eq!(status, 200, "{page}");
    // A state change without the form's CSRF token is refused.
    let (status, _) = web.call("POST", "/job/1/cancel", &[("Cookie", &session)], b"");
    assert_eq!(status, 403);
}

#[test]
fn a_jobs_steps_are_in_its_accounting_answer_as_slurmdbd_nests_them() {
    require_root!();
    let (alice, www) = (TestUser::create("wsa"), TestUser::create("wsw"));
    let c = cluster_with_web(&www.name, "");
    let web = WebServer::start(&c, &www.name);
    let token = token_of(&c, &alice.name, &[]);
    let shims = c.dir.path().join("shims");
    std::fs::create_dir_all(&shims).unwrap();
    let _ = std::os::unix::fs::symlink(common::bin_dir().join("ysched-slurm"), shims.join("srun"));
    std::fs::set_permissions(&c.work, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let wrap = format!(
        "export PATH={}:$PATH; srun true; srun sh -c 'exit 2'; true",
        shims.display()
    );
    let out = c.run_as(&alice.name, "ysbatch", &["--parsable", "--wrap", &wrap]);
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(
        c.wait_done(id, Duration::from_secs(20)),
        "COMPLETED",
        "{}",
        c.output_of(id)
    );
    let (status, answer) = web.get(&format!("/slurmdb/v0.0.45/job/{id}"), &token);
    assert_eq!(status, 200, "{answer}");
    let jobs = answer["jobs"].as_array().unwrap();
    assert_eq!(
        jobs.len(),
        1,
        "the steps are in the job, not beside it: {answer}"
    );
    let steps = jobs[0]["steps"].as_array().unwrap();
    let seen: Vec<(&str, &str, &str)> = steps
        .iter()
        .map(|s| {
            (
                s["step"]["id"].as_str().unwrap(),
                s["step"]["name"].as_str().unwrap(),
                s["state"].as_str().unwrap(),
            )
        })
        .collect();
    let ids = [".batch", ".extern", ".0", ".1"].map(|s| format!("{id}{s}"));
    assert_eq!(
        seen,
        [
            (ids[0].as_str(), "batch", "COMPLETED"),
            (ids[1].as_str(), "extern", "COMPLETED"),
            (ids[2].as_str(), "true", "COMPLETED"),
            (ids[3].as_str(), "sh", "FAILED")
        ]
    );
    assert_eq!(
        steps[3]["exit_code"]["return_code"]["number"], 2,
        "{answer}"
    );
    assert_eq!(steps[2]["tasks"]["count"], 1);
    // The portal's page of the job lists them too.
    let session = format!("ysched_session={token}");
    let (status, page) = web.call("GET", &format!("/job/{id}"), &[("Cookie", &session)], b"");
    assert_eq!(status, 200, "{page}");
    let table = page.split("<table id=\"steps\">").nth(1).expect(&page);
    assert!(
        table.contains(&format!(
            "<td>{id}.0</td><td>true</td><td>COMPLETED</td><td>0:0</td>"
        )) && table.contains(&format!(
            "<td>{id}.1</td><td>sh</td><td>FAILED</td><td>2:0</td>"
        )),
        "{table}"
    );
}

/// Asks `c`'s daemon for a token proven by `token` on the REST channel,
/// as yswebd passes its caller's token on (the kernel's word, root's
/// here, counts for nothing beside a token).
fn mint_with(
    c: &Cluster,
    token: &str,
    audience: &str,
    lifespan: u64,
    user: Option<&str>,
) -> ysched::proto::Reply {
    use ysched::proto::{Channel, Control, Envelope, Request};
    let mut envelope = Envelope::new(Request::Control(Control::Token {
        lifespan: Some(lifespan),
        user: user.map(str::to_string),
        audience: Some(audience.to_string()),
    }));
    envelope.token = Some(token.to_string());
    envelope.channel = Some(Channel::Rest);
    let spool = ysched::spool::Spool::new(&c.spool);
    let mut sent = spool
        .send(&envelope, ysched::spool::Durability::OnDemand)
        .unwrap();
    sent.wait(Duration::from_secs(20))
        .unwrap()
        .expect("the daemon answers")
}

/// The refusal in `reply`, or a panic.
fn refusal_of(reply: ysched::proto::Reply) -> String {
    match reply {
        ysched::proto::Reply::Rejected { error }
        | ysched::proto::Reply::Unauthenticated { error } => error,
        other => panic!("not refused: {other:?}"),
    }
}

/// A token that asks for a token gets no more than itself: no wider use,
/// no later end, no other user; revoking it revokes what it made. The web
/// server's account gets the web's uses, for an hour at most, and no
/// token for nodes (it could otherwise hand out week-long node tokens of
/// anyone its proxy names).
#[test]
fn a_token_makes_no_wider_token_and_what_it_made_goes_when_it_is_revoked() {
    require_root!();
    let (alice, bob, www) = (
        TestUser::create("wm"),
        TestUser::create("wn"),
        TestUser::create("wo"),
    );
    let c = cluster_with_web(&www.name, "");
    let rest = token_of(
        &c,
        &alice.name,
        &["--audience", "rest", "--lifespan", "600"],
    );
    for wider in ["node", "portal", "node:gpu01", "rest,portal"] {
        let error = refusal_of(mint_with(&c, &rest, wider, 60, None));
        assert!(
            error
                .starts_with("a token made with a token is for no more than it: yours is for rest"),
            "{wider}: {error}"
        );
    }
    let error = refusal_of(mint_with(&c, &rest, "rest", 60, Some(&bob.name)));
    assert!(error.contains("makes tokens for its own user"), "{error}");
    // Asked for a month, it ends with the token that made it.
    let ysched::proto::Reply::Token {
        token: child,
        expires,
        ..
    } = mint_with(&c, &rest, "rest", 30 * 86_400, None)
    else {
        panic!("no token")
    };
    let parent = ysched::token::unverified_claims(&rest).unwrap();
    let claims = ysched::token::unverified_claims(&child).unwrap();
    assert!(
        expires <= parent.exp && claims.exp == expires,
        "{claims:?} {parent:?}"
    );
    let grandchild = match mint_with(&c, &child, "rest", 60, None) {
        ysched::proto::Reply::Token { token, .. } => token,
        other => panic!("{other:?}"),
    };
    let list = stdout(&c.run_as(&alice.name, "ystoken", &["--list"]));
    let row = |jti: &str| {
        list.lines()
            .find(|l| l.starts_with(jti))
            .unwrap_or_else(|| panic!("{jti} not in {list}"))
            .to_string()
    };
    assert!(row(&claims.jti).ends_with(&parent.jti), "{list}");
    // Revoking the first revokes the line it started.
    let out = c.run_as(&alice.name, "ystoken", &["--revoke", &parent.jti]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("and 2 made with it or with those"),
        "{}",
        stdout(&out)
    );
    for token in [&child, &grandchild] {
        let error = refusal_of(mint_with(&c, token, "rest", 60, None));
        assert!(error.contains("the token was revoked"), "{error}");
    }
    // The web server's account: the web's uses, an hour at most.
    let as_web = |args: &[&str]| c.run_as(&www.name, "ystoken", args);
    let out = as_web(&["-u", &alice.name, "--audience", "node"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("gets tokens for rest or portal only, not node"),
        "{}",
        stderr(&out)
    );
    let out = as_web(&["-u", &alice.name, "--lifespan", "30-00:00:00"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("1 s to an hour"), "{}", stderr(&out));
    let out = as_web(&[
        "-u",
        &alice.name,
        "--audience",
        "portal",
        "--lifespan",
        "3600",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The children of process `pid`, each with its state letter.
fn children_of(pid: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in children.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(") ").map_or("?", |(_, rest)| &rest[..1]);
            found.push((child.to_string(), state.to_string()));
        }
    }
    found
}

/// The processes yswebd (the child of the `runuser` that is `launcher`)
/// has left as zombies: its children that ended and were never reaped.
fn zombies_of(launcher: u32) -> Vec<String> {
    let webd = children_of(&launcher.to_string());
    assert_eq!(webd.len(), 1, "runuser's children: {webd:?}");
    children_of(&webd[0].0)
        .into_iter()
        .filter(|(_, state)| state == "Z")
        .map(|(pid, _)| pid)
        .collect()
}

/// yswebd sends every request through the spool and forks nothing: a
/// hundred requests (answered, and refused for a bad token) leave no
/// zombie behind (each left one before, reachable without a token).
#[test]
fn a_hundred_requests_leave_yswebd_no_zombie() {
    require_root!();
    let (alice, www) = (TestUser::create("wz"), TestUser::create("wy"));
    let c = cluster_with_web(&www.name, "");
    let web = WebServer::start(&c, &www.name);
    let good = token_of(&c, &alice.name, &[]);
    for i in 0..100 {
        let token = if i % 2 == 0 {
            good.clone()
        } else {
            format!("{good}x")
        };
        let (status, _) = web.get("/slurm/v0.0.45/jobs", &token);
        assert!(status == 200 || status == 401, "{status}");
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        zombies_of(web.child.id()),
        Vec::<String>::new(),
        "{}",
        web.log()
    );
}

/// The accounting records come a page at a time: `limit` jobs (1,000
/// unless asked), from the job after `after`; a full page says where the
/// next begins, and following it walks the whole history once.
#[test]
fn accounting_records_come_in_pages_that_walk_the_history_once() {
    require_root!();
    let (alice, www) = (TestUser::create("wpa"), TestUser::create("wpw"));
    let c = cluster_with_web(&www.name, "");
    let web = WebServer::start(&c, &www.name);
    let token = token_of(&c, &alice.name, &[]);
    std::fs::set_permissions(&c.work, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mut submitted = Vec::new();
    for _ in 0..5 {
        let out = c.run_as(
            &alice.name,
            "ysbatch",
            &["--parsable", "--hold", "--wrap", "true"],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        submitted.push(stdout(&out).trim().parse::<u64>().unwrap());
    }
    let mut path = format!("/slurmdb/v0.0.45/jobs?users={}&limit=2", alice.name);
    let mut walked = Vec::new();
    let mut pages = 0;
    loop {
        let (status, answer) = web.get(&path, &token);
        assert_eq!(status, 200, "{answer}");
        pages += 1;
        let jobs = answer["jobs"].as_array().unwrap();
        assert!(jobs.len() <= 2, "{answer}");
        walked.extend(jobs.iter().map(|j| j["job_id"].as_u64().unwrap()));
        match answer["next_page"].as_str() {
            Some(next) => {
                assert!(next.contains("after="), "{next}");
                path = next.to_string();
            }
            None => break,
        }
        assert!(pages < 10, "the pages do not end: {walked:?}");
    }
    assert_eq!(walked, submitted, "each job once, in order");
    assert_eq!(pages, 3);
    for (bad, why) in [
        (
            "limit=0",
            "limit: '0' is not a whole number from 1 to 10000",
        ),
        (
            "limit=10001",
            "limit: '10001' is not a whole number from 1 to 10000",
        ),
        ("after=x", "after: 'x' is not a whole number from 0 to"),
    ] {
        let (status, answer) = web.get(&format!("/slurmdb/v0.0.45/jobs?{bad}"), &token);
        assert_eq!(status, 400, "{bad}: {answer}");
        assert!(answer.to_string().contains(why), "{bad}: {answer}");
    }
}
