//! The portal in a real browser (headless Chromium through WebDriver):
//! users sign in with their tokens, watch the queue refresh by itself,
//! submit through the form (seeing the cost first), read their job's
//! output, cancel their own job and fail to cancel another's, see a
//! hostile job name as text, a cross-site form is refused, and a
//! coordinator approves a big job. With YSCHED_SCREENSHOTS=DIR it leaves
//! a PNG of each page there (docs/portal/ holds them).

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::browser::{self, Browser};
use crate::common::{self, stderr, stdout, Cluster, TestUser};
use crate::web::{token_of, WebServer};

const LONG: Duration = Duration::from_secs(30);

struct Scene {
    c: Cluster,
    /// Kept running for the scene.
    _web: WebServer,
    base: String,
    alice: TestUser,
    bob: TestUser,
    carol: TestUser,
    shots: Option<PathBuf>,
    _www: TestUser,
}

impl Scene {
    fn new() -> Scene {
        let (alice, bob, carol, www) = (
            TestUser::create("pq"),
            TestUser::create("pr"),
            TestUser::create("ps"),
            TestUser::create("pw"),
        );
        let c = Cluster::started(&format!(
            "[[accounts]]\nname = \"vision\"\nusers = [\"{a}\", \"{b}\", \"{c}\"]\ncoordinators = [\"{c}\"]\napproval_above_gpu_hours = 2\nbudget = 500\n[web]\nuser = \"{w}\"\n",
            a = alice.name,
            b = bob.name,
            c = carol.name,
            w = www.name
        ));
        let web = WebServer::start(&c, &www.name);
        let base = format!("http://127.0.0.1:{}", web.port);
        let shots = std::env::var_os("YSCHED_SCREENSHOTS").map(PathBuf::from);
        Scene {
            c,
            _web: web,
            base,
            alice,
            bob,
            carol,
            shots,
            _www: www,
        }
    }

    fn shot(&self, b: &Browser, name: &str) {
        if let Some(dir) = &self.shots {
            std::fs::create_dir_all(dir).unwrap();
            b.screenshot(&dir.join(format!("{name}.png")));
        }
    }

    fn sign_in(&self, b: &Browser, user: &str) {
        b.open(&format!("{}/login", self.base));
        b.type_into("#token", &token_of(&self.c, user, &["--lifespan", "3600"]));
        b.click("#sign-in");
        b.element("#jobs");
        assert!(b.url().ends_with("/queue"), "{}", b.url());
    }

    /// A job submitted at the command line as `user`.
    fn submit_as(&self, user: &str, args: &[&str]) -> u64 {
        let out = self.c.run_as(
            user,
            "ysbatch",
            &[&["--parsable", "-t", "10"], args].concat(),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    }

    /// The job whose page the browser went to after a submission.
    fn job_id_of(&self, b: &Browser) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let url = b.url();
            if let Some(id) = url.split("/job/").nth(1).and_then(|id| id.parse().ok()) {
                return id;
            }
            let problem = b.find("#problem").map(|_| b.text("#problem"));
            assert!(
                Instant::now() < deadline,
                "not a job page: {url}: {problem:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn the_portal_in_a_real_browser() {
    crate::require_root!();
    if !browser::available() {
        assert!(
            std::env::var_os("YSCHED_REQUIRE_CHROMIUM").is_none(),
            "chromium and chromedriver are required here"
        );
        common::skip(module_path!(), "chromium or chromedriver is not installed");
        return;
    }
    let s = Scene::new();
    let b = Browser::start();
    s.sign_in(&b, &s.alice.name);
    submit_through_the_form(&s, &b);
    hostile_names_and_live_refresh(&s, &b);
    another_users_job(&s, &b);
    cross_site_forms_are_refused(&s, &b);
    a_coordinator_approves(&s, &b);
}

fn submit_through_the_form(s: &Scene, b: &Browser) {
    b.open(&format!("{}/submit", s.base));
    b.type_into("#command", "echo portal-ok; id -un");
    b.type_into("#gpus", "1");
    b.type_into("#time", "0:10:00");
    b.type_into("#dir", &s.c.work.display().to_string());
    // The cost shows as the form is filled in (the page's script).
    b.wait_text("tokens at most", Duration::from_secs(10), false);
    assert!(b.text("#approval").contains("Needs no approval"));
    s.shot(b, "submit");
    b.click("#submit");
    let id = s.job_id_of(b);
    b.wait_text("COMPLETED", LONG, true);
    assert_eq!(b.text("#output"), format!("portal-ok\n{}", s.alice.name));
    s.shot(b, "job");
    assert_eq!(s.c.field(id, "User"), s.alice.name);
}

fn hostile_names_and_live_refresh(s: &Scene, b: &Browser) {
    let hostile = s.submit_as(
        &s.bob.name,
        &["-J", "<script>alert(1)</script>", "--wrap", "sleep 300"],
    );
    b.open(&format!("{}/queue", s.base));
    let cell = b.text(&format!("#job-{hostile} td:nth-child(2)"));
    assert_eq!(cell, "<script>alert(1)</script>");
    assert!(!b.alert_open(), "a job name ran as a script");
    // Another user's row has no buttons for her.
    assert!(b.find(&format!("#job-{hostile} button")).is_none());
    // A job submitted elsewhere appears without a reload.
    let live = s.submit_as(&s.alice.name, &["-J", "live-one", "--wrap", "sleep 300"]);
    b.wait_text(&format!("job-{live}"), Duration::from_secs(15), false);
    s.shot(b, "queue");
    // Her own job, cancelled with its button on "My jobs".
    b.open(&format!("{}/mine", s.base));
    b.click(&format!("#job-{live} button.danger"));
    assert_eq!(s.c.wait_done(live, LONG), "CANCELLED");
    assert!(b.url().ends_with("/mine"), "{}", b.url());
}

fn another_users_job(s: &Scene, b: &Browser) {
    let theirs = s.submit_as(
        &s.bob.name,
        &["-J", "bobs", "--wrap", "echo secret-of-bob; sleep 300"],
    );
    s.c.wait_state(theirs, "RUNNING", LONG);
    b.open(&format!("{}/job/{theirs}", s.base));
    let output = b.text("#output");
    assert!(output.contains("permission denied"), "{output}");
    assert!(!b.source().contains("secret-of-bob"));
    // A cancel she forges with her own session's form token: refused.
    b.execute(&format!(
        "var f = document.createElement('form'); f.method = 'post'; f.action = '/job/{theirs}/cancel';\
         var i = document.createElement('input'); i.type = 'hidden'; i.name = 'csrf';\
         i.value = document.querySelector('input[name=csrf]').value; f.appendChild(i);\
         document.body.appendChild(f); f.submit();"
    ));
    b.wait_text("permission denied", Duration::from_secs(10), false);
    assert_eq!(s.c.state(theirs), "RUNNING");
    let audit = stdout(&s.c.run("yscontrol", &["show", "audit"]));
    assert!(
        audit.contains(&format!("{} cancel via=portal job={theirs}", s.alice.name)),
        "{audit}"
    );
}

/// A page of another site (another port: another origin) whose form
/// posts to the portal, with the browser's cookie but no form token.
fn cross_site_forms_are_refused(s: &Scene, b: &Browser) {
    let victim = s.submit_as(&s.alice.name, &["-J", "victim", "--wrap", "sleep 300"]);
    let evil = TcpListener::bind("127.0.0.1:0").unwrap();
    let evil_port = evil.local_addr().unwrap().port();
    let page = format!(
        "<!doctype html><form id=\"f\" method=\"post\" action=\"{}/job/{victim}/cancel\"><button id=\"go\">win a prize</button></form>",
        s.base
    );
    evil.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut served = 0;
        while Instant::now() < deadline && served < 3 {
            match evil.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf);
                    let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}", page.len());
                    served += 1;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    });
    b.open(&format!("http://127.0.0.1:{evil_port}/"));
    b.click("#go");
    b.wait_text(
        "did not come from this site",
        Duration::from_secs(10),
        false,
    );
    assert_eq!(s.c.state(victim), "RUNNING");
    drop(server);
}

fn a_coordinator_approves(s: &Scene, b: &Browser) {
    b.open(&format!("{}/submit", s.base));
    b.type_into("#name", "big-train");
    b.type_into("#command", "sleep 300");
    b.type_into("#gpus", "4");
    b.type_into("#time", "1:00:00");
    b.type_into("#dir", &s.c.work.display().to_string());
    b.wait_text("Needs a coordinator", Duration::from_secs(10), false);
    b.click("#submit");
    let big = s.job_id_of(b);
    assert_eq!(s.c.state(big), "PENDING");
    b.open(&format!("{}/accounting", s.base));
    b.wait_text("Token budgets", Duration::from_secs(5), false);
    assert!(b.source().contains("vision"));
    s.shot(b, "accounting");
    b.click("header form button");
    s.sign_in(b, &s.carol.name);
    b.open(&format!("{}/approvals", s.base));
    b.element(&format!("#job-{big}"));
    s.shot(b, "approvals");
    b.click(&format!("#job-{big} button[value=approve]"));
    s.c.wait_state(big, "RUNNING", LONG);
    b.open(&format!("{}/gpus", s.base));
    assert_eq!(
        b.text(".gpu"),
        format!("0 a100\njob {big}\n{}", s.alice.name)
    );
    s.shot(b, "gpus");
    // On a phone: the page fits its width; the table scrolls in its box.
    b.resize(390, 844);
    b.open(&format!("{}/queue", s.base));
    let width = b.execute("return document.documentElement.scrollWidth;");
    assert!(
        width.as_u64().unwrap() <= 390,
        "the page is {width} px wide on a phone"
    );
    s.shot(b, "phone-queue");
    b.resize(1280, 1000);
    let _ = s.c.run("yscancel", &["--user", &s.alice.name]);
    let _ = s.c.run("yscancel", &["--user", &s.bob.name]);
}
