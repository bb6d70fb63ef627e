//! A bad configuration is refused with the file, the line and the key: at
//! start (the daemon does not start) and at reload (the running one stays).

use crate::common;

use crate::common::{stderr, stdout, Cluster};

#[test]
fn the_daemon_refuses_to_start_with_a_bad_config() {
    let c = Cluster::new("");
    let text = std::fs::read_to_string(&c.config).unwrap()
        + "[[gpus]]\ntype = \"t4\"\ncount = \"two\"\nmemory = \"16G\"\n";
    std::fs::write(&c.config, &text).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("count = \"two\""))
        .unwrap()
        + 1;
    let out = c.run(
        "ysctld",
        &["--foreground", "--config", c.config.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "ysctld: error: {}: line {line}: key 'count': invalid type: string \"two\", expected u32\n",
            c.config.display()
        )
    );
    // Detached, it says the same and returns only then.
    let out = c.run("ysctld", &["--config", c.config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("line {line}: key 'count'")),
        "{}",
        stderr(&out)
    );
    let out = c.run("ysqueue", &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the commands read the same file: {}",
        stderr(&out)
    );
}

#[test]
fn a_bad_reload_changes_nothing_and_a_good_one_applies() {
    let c = Cluster::started("");
    let good = std::fs::read_to_string(&c.config).unwrap();
    let bad = good.replace("kill_wait = 1", "kill_wait = 1\nbogus_key = 3");
    std::fs::write(&c.config, &bad).unwrap();
    // The commands read the file too, and say what is wrong with it.
    let out = c.run("yscontrol", &["reload"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("line 5: key 'bogus_key': unknown field `bogus_key`"),
        "{}",
        stderr(&out)
    );
    // The daemon, told by SIGHUP, refuses it and keeps its config.
    nix::sys::signal::kill(c.daemon_pid(), nix::sys::signal::Signal::SIGHUP).unwrap();
    common::wait_for(
        "the refusal in the log",
        std::time::Duration::from_secs(10),
        || c.log().contains("config not reloaded") && c.log().contains("unknown field `bogus_key`"),
    );
    std::fs::write(&c.config, &good).unwrap();
    let id = c.submit(&["--wrap", "true"]);
    assert_eq!(
        c.wait_done(id, std::time::Duration::from_secs(20)),
        "COMPLETED"
    );

    // A good change applies at once: a new QoS becomes usable.
    std::fs::write(
        &c.config,
        good.replace("kill_wait = 1", "kill_wait = 1\ndefault_qos = \"normal\"")
            + "[[qos]]\nname = \"normal\"\npriority = 1\n",
    )
    .unwrap();
    let out = c.run("yscontrol", &["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("reloaded"), "{}", stdout(&out));
    let id = c.submit(&["--wrap", "true"]);
    assert_eq!(c.field(id, "QOS"), "normal");

    // CPUs and memory apply at once; what needs a restart is named.
    std::fs::write(
        &c.config,
        good.replace("cpus = 16", "cpus = 4")
            .replace("cgroup_parent = \"", "cgroup_parent = \"other-"),
    )
    .unwrap();
    let out = c.run("yscontrol", &["reload"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out)
            .contains("(4 CPUs, 65536 MiB); not applied until ysctld restarts: cgroup_parent"),
        "{}",
        stdout(&out)
    );
    let out = c.run("ysbatch", &["-c", "8", "--wrap", "true"]);
    assert_eq!(out.status.code(), Some(1), "8 CPUs of 4 are refused");

    // GPUs cannot change under running jobs: that needs a restart.
    std::fs::write(&c.config, good.replace("count = 4", "count = 2")).unwrap();
    let out = c.run("yscontrol", &["reload"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("[[gpus]] changed; restart ysctld"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_broken_pipe_is_not_an_error() {
    let c = Cluster::started("");
    // Enough output to overflow a pipe's 64 KiB, so ysqueue does hit EPIPE.
    for _ in 0..80 {
        c.submit(&["-H", "--wrap", "true"]);
    }
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; {} --json | head -1",
            common::bin_dir().join("ysqueue").display()
        ))
        .env("YS_CONF", &c.config)
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "{\n");
    assert_eq!(stderr(&out), "", "no error about the closed pipe");
    assert!(out.status.success(), "ysqueue | head must exit 0");
}

#[test]
fn check_config_validates_and_shows_what_would_be_detected_without_starting() {
    let c = Cluster::new("notify_command = \"/bin/true\"\npurge_after_months = 6\n");
    let out = c.run("ysctld", &["--check-config", c.config.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("{}: valid\n", c.config.display())),
        "{text}"
    );
    for wanted in [
        "a100 x4",
        "(declared in the config)",
        "notifications    /bin/true",
        "jobs purged 6 whole months after their month",
        "QoS              critical, high, medium, low",
        "requests         state changes on ",
    ] {
        assert!(text.contains(wanted), "{wanted} missing:\n{text}");
    }
    // A spool too deep for a socket: everything through the files, and why.
    let deep = c.dir.path().join("d".repeat(110));
    let long = c.dir.path().join("long.toml");
    std::fs::write(&long, format!("spool_dir = \"{}\"\n", deep.display())).unwrap();
    let out = c.run("ysctld", &["--check-config", long.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "a warning: {}", stderr(&out));
    assert!(
        stdout(&out).contains("all through ") && stdout(&out).contains("over the 107"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("warning: no GPUs"),
        "{}",
        stdout(&out)
    );
    // What would keep ysctld from starting: a missing device file, a
    // spool it cannot write, a notify_command that is not there.
    let broken = c.dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        "spool_dir = \"/etc/hostname/ysched-spool\"\nnotify_command = \"/no/such/notifier\"\n[[gpus]]\ntype = \"a100\"\nmemory = \"80GiB\"\ndevices = \"/dev/ysched-test-nvidia[0-1]\"\n",
    )
    .unwrap();
    let out = c.run("ysctld", &["--check-config", broken.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    for wanted in [
        "error: spool_dir /etc/hostname/ysched-spool: /etc/hostname is not a directory",
        "error: notify_command: /no/such/notifier not found",
        "error: GPU 0 (a100): device file /dev/ysched-test-nvidia0",
    ] {
        assert!(text.contains(wanted), "{wanted} missing:\n{text}");
    }
    assert!(stderr(&out).contains("3 errors"), "{}", stderr(&out));
    assert!(
        !c.spool.join("ysched.db").exists(),
        "nothing started: no database"
    );
    // Without FILE: the file ysctld would read (here $YS_CONF).
    let out = c.run("ysctld", &["--check-config"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(&format!("{}: valid\n", c.config.display())),
        "{}",
        stdout(&out)
    );
    // A bad file: the line and key, exit 1.
    std::fs::write(&c.config, "purge_after_months = 0\n").unwrap();
    let out = c.run("ysctld", &["--check-config", c.config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("line 1") && stderr(&out).contains("purge_after_months = 0"),
        "{}",
        stderr(&out)
    );
}
