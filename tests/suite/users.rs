//! Several users on one server (as root: the test creates real users).
//! Jobs run as their submitter, users act only on their own jobs, and one
//! user's views show nothing private of another.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::time::Duration;

use crate::common::{stderr, stdout, Cluster, TestUser};

const LONG: Duration = Duration::from_secs(20);

fn submit_as(c: &Cluster, user: &TestUser, args: &[&str]) -> u64 {
    let out = c.run_as(&user.name, "ysbatch", &[&["--parsable"], args].concat());
    assert!(
        out.status.success(),
        "ysbatch as {}: {}",
        user.name,
        stderr(&out)
    );
    stdout(&out).trim().parse().unwrap()
}

#[test]
fn jobs_run_as_their_submitter_who_alone_may_cancel_them() {
    require_root!();
    let alice = TestUser::create("a");
    let bob = TestUser::create("b");
    let c = Cluster::started("");

    let id = submit_as(&c, &alice, &["--wrap", "id -un; id -u; echo $USER $HOME"]);
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let output = c.output_of(id);
    assert!(
        output.starts_with(&format!("{}\n{}\n{} ", alice.name, alice.uid, alice.name)),
        "{output}"
    );
    let meta = std::fs::metadata(c.work.join(format!("ys-{id}.out"))).unwrap();
    assert_eq!(
        meta.uid(),
        alice.uid,
        "the output file belongs to the job's user"
    );
    assert_eq!(c.field(id, "User"), alice.name);

    let long = submit_as(
        &c,
        &alice,
        &[
            "-J",
            "alices",
            "--comment",
            "secret plan",
            "--wrap",
            "sleep 60",
        ],
    );
    c.wait_state(long, "RUNNING", LONG);
    let out = c.run_as(&bob.name, "yscancel", &[&long.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "yscancel: error: permission denied: job {long} belongs to {}\n",
            alice.name
        )
    );
    let out = c.run_as(&bob.name, "yscancel", &["-u", &alice.name]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("permission denied"),
        "{}",
        stderr(&out)
    );
    let out = c.run_as(&bob.name, "yscontrol", &["hold", &long.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    let out = c.run_as(&bob.name, "yscontrol", &["reload"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("only root and the config's admins may reload"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        c.state(long),
        "RUNNING",
        "nothing bob did touched alice's job"
    );

    // Bob sees that the job exists, not where it runs or writes.
    let q = stdout(&c.run_as(&bob.name, "ysqueue", &["-h", "-o", "%i %u %j %Z"]));
    assert_eq!(q.trim(), format!("{long} {} alices", alice.name));
    let acct = stdout(&c.run_as(
        &bob.name,
        "ysacct",
        &[
            "-a",
            "-j",
            &long.to_string(),
            "-n",
            "-P",
            "-o",
            "User,WorkDir,StdOut,Comment",
        ],
    ));
    assert_eq!(acct.trim(), format!("{}|||", alice.name));
    let mine = stdout(&c.run_as(
        &alice.name,
        "ysacct",
        &["-j", &long.to_string(), "-n", "-P", "-o", "WorkDir,Comment"],
    ));
    assert_eq!(mine.trim(), format!("{}|secret plan", c.work.display()));
    let show = stdout(&c.run_as(&bob.name, "yscontrol", &["show", "job", &long.to_string()]));
    assert!(!show.contains("WorkDir"), "{show}");

    let out = c.run_as(&alice.name, "yscancel", &[&long.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(c.wait_done(long, LONG), "CANCELLED");
}

#[test]
fn root_jobs_are_refused_unless_the_config_allows_them() {
    require_root!();
    let c = Cluster::started("");
    let text = std::fs::read_to_string(&c.config)
        .unwrap()
        .replace("allow_root_jobs = true", "allow_root_jobs = false");
    std::fs::write(&c.config, text).unwrap();
    let out = c.run("yscontrol", &["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.run("ysbatch", &["--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("jobs may not run as root; set allow_root_jobs = true"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_admin_hold_binds_the_user_and_admins_act_on_any_job() {
    require_root!();
    let alice = TestUser::create("c");
    let carol = TestUser::create("d");
    let c = Cluster::started(&format!("admins = [\"{}\"]", carol.name));
    let id = submit_as(&c, &alice, &["-H", "--wrap", "true"]);
    let out = c.run_as(&carol.name, "yscontrol", &["hold", &id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = c.run_as(&alice.name, "yscontrol", &["release", &id.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is held by an administrator"),
        "{}",
        stderr(&out)
    );
    let out = c.run_as(&carol.name, "yscontrol", &["release", &id.to_string()]);
    assert!(out.status.success());
    // Raising one's own priority is an admin's business.
    let out = c.run_as(
        &alice.name,
        "ysbatch",
        &["--nice", "-100", "--wrap", "true"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("a negative --nice (-100) raises priority, which only root and the config's admins may do"), "{}", stderr(&out));
    let out = c.run_as(
        &carol.name,
        "ysbatch",
        &["--parsable", "--nice", "-100", "--wrap", "true"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let nice = c.run(
        "ysacct",
        &["-j", stdout(&out).trim(), "-n", "-P", "-o", "JobID"],
    );
    assert!(nice.status.success());
    assert_eq!(c.wait_done(id, LONG), "COMPLETED");
    let running = submit_as(&c, &alice, &["--wrap", "sleep 60"]);
    c.wait_state(running, "RUNNING", LONG);
    let out = c.run_as(&carol.name, "yscancel", &[&running.to_string()]);
    assert!(
        out.status.success(),
        "an admin may cancel any job: {}",
        stderr(&out)
    );
    assert_eq!(c.wait_done(running, LONG), "CANCELLED");
}

#[test]
fn personal_mode_runs_everything_as_one_unprivileged_user() {
    require_root!();
    let dana = TestUser::create("p");
    let home = tempfile::Builder::new()
        .prefix("ysched-personal-")
        .tempdir()
        .unwrap();
    std::os::unix::fs::chown(home.path(), Some(dana.uid), None).unwrap();
    let config = home.path().join("ysched.toml");
    std::fs::write(
        &config,
        format!(
            "spool_dir = \"{}/spool\"\n[[gpus]]\ntype = \"t4\"\ncount = 2\nmemory = \"16GiB\"\n",
            home.path().display()
        ),
    )
    .unwrap();
    let as_dana = |args: &[&str]| {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", &dana.name, "--", "env"])
            .arg(format!("YS_CONF={}", config.display()))
            .args(args)
            .current_dir(home.path());
        cmd
    };
    let bin = |name: &str| common::bin_dir().join(name).display().to_string();
    let mut daemon = as_dana(&[&bin("ysctld"), "--foreground"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let spool = ysched::spool::Spool::new(home.path().join("spool"));
    common::wait_for("the personal daemon", LONG, || {
        spool.daemon_state() == ysched::spool::DaemonState::Running
    });
    let meta = std::fs::metadata(spool.incoming()).unwrap();
    assert_eq!(meta.uid(), dana.uid, "the spool belongs to its user");
    assert_eq!(meta.mode() & 0o777, 0o700, "and to nobody else");

    let out = as_dana(&[
        &bin("ysbatch"),
        "--parsable",
        "-G",
        "t4:1",
        "--wrap",
        "id -un; echo $CUDA_VISIBLE_DEVICES",
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    common::wait_for("the personal job", LONG, || {
        let out = as_dana(&[
            &bin("ysacct"),
            "-j",
            &id.to_string(),
            "-n",
            "-P",
            "-o",
            "State",
        ])
        .output()
        .unwrap();
        stdout(&out).trim() == "COMPLETED"
    });
    let output = std::fs::read_to_string(home.path().join(format!("ys-{id}.out"))).unwrap();
    assert_eq!(output, format!("{}\n0\n", dana.name));

    // A personal spool serves its user only: others are told so at once.
    let out = Command::new(common::bin_dir().join("ysbatch"))
        .env("YS_CONF", &config)
        .args(["--wrap", "true"])
        .current_dir(home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!(
            "is the personal spool of {}; only they can use it",
            dana.name
        )),
        "{}",
        stderr(&out)
    );
    let _ = daemon.kill();
    let _ = daemon.wait();
}

#[test]
fn private_data_hides_other_users_jobs_except_from_their_coordinators() {
    require_root!();
    let alice = TestUser::create("pa");
    let bob = TestUser::create("pb");
    let carol = TestUser::create("pc");
    let c = Cluster::started(&format!(
        "private_data = \"jobs\"\n[[accounts]]\nname = \"vision\"\nusers = [\"*\"]\ncoordinators = [\"{}\"]\n",
        carol.name
    ));
    let id = submit_as(
        &c,
        &alice,
        &["-A", "vision", "--comment", "secret", "--wrap", "sleep 60"],
    );
    c.wait_state(id, "RUNNING", LONG);
    let listed = |user: &TestUser, command: &str, args: &[&str]| {
        let out = c.run_as(&user.name, command, args);
        assert!(
            out.status.success(),
            "{command} as {}: {}",
            user.name,
            stderr(&out)
        );
        stdout(&out)
    };
    // Bob sees nothing of alice's job.
    let q = listed(&bob, "ysqueue", &["-h", "-o", "%i"]);
    assert_eq!(q.trim(), "", "{q}");
    let acct = listed(&bob, "ysacct", &["-a", "-n", "-P", "-o", "JobID"]);
    assert_eq!(acct.trim(), "", "{acct}");
    let out = c.run_as(&bob.name, "yscontrol", &["show", "job", &id.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("private_data"), "{}", stderr(&out));
    // Carol coordinates vision: she sees it whole, comment included.
    let acct = listed(&carol, "ysacct", &["-a", "-n", "-P", "-o", "JobID,Comment"]);
    assert_eq!(acct.trim(), format!("{id}|secret"));
    // Alice sees her own.
    let q = listed(&alice, "ysqueue", &["-h", "-o", "%i"]);
    assert_eq!(q.trim(), id.to_string());
    c.run("yscancel", &[&id.to_string()]);
}
