//! Moving to Slurm, checked against a real Slurm 22.05 (Debian's
//! packages): a MariaDB server, munged and slurmdbd of the test's own (in
//! a temporary directory, on ports of its own), and slurmctld started on
//! the slurm.conf `ysctld export-slurm` wrote (as a host of its own name,
//! in UTS and mount namespaces). The QoS script and the load file go in
//! with `sacctmgr`, and what Slurm's `sacctmgr show assoc` and `show qos`
//! print is what `sacctmgr` over ysched prints for the same config. Root
//! and the packages are needed (`.ci/run` installs them and sets
//! YSCHED_REQUIRE_SLURM); elsewhere the test says it is skipped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, bin_dir, stderr, stdout};

const CONFIG: &str = r#"node_name = "gpu07"
admins = ["root", "ops"]
cpus = 16
memory = "64GiB"
[[gpus]]
type = "a100"
count = 4
memory = "80G"
[[accounts]]
name = "vision"
shares = 3
users = ["alice", "bob"]
coordinators = ["alice"]
max_gpus = 8
max_gpus_per_user = 4
[[accounts]]
name = "nlp"
shares = 1
users = ["carol"]
[[qos]]
name = "critical"
priority = 300
preempt = ["low", "medium"]
grace_time = "3:00"
users = ["alice"]
[[qos]]
name = "medium"
priority = 100
preempt = ["low"]
max_time = "2-00:00:00"
[[qos]]
name = "low"
priority = 0
usage_factor = 0.5
"#;

/// The Slurm daemons of the test, stopped when dropped.
struct Slurm {
    dir: tempfile::TempDir,
    children: Vec<Child>,
    /// The slurm.conf the clients (sacctmgr) read.
    client_conf: PathBuf,
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for child in self.children.iter_mut().rev() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("munged.pid")) {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
        }
    }
}

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for(what: &str, log: &Path, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what} did not start:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn spawn_logged(command: &mut Command, log: &Path) -> Child {
    let file = std::fs::File::create(log).unwrap();
    command
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap()
}

impl Slurm {
    /// munged alone, with its key and socket in a directory of its own.
    fn munge() -> Slurm {
        let dir = tempfile::Builder::new()
            .prefix("ysched-slurm-")
            .tempdir()
            .unwrap();
        let d = dir.path().to_path_buf();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let slurm = Slurm {
            client_conf: d.join("client/slurm.conf"),
            dir,
            children: Vec::new(),
        };
        let key: Vec<u8> = (0..1024).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(d.join("munge.key"), key).unwrap();
        std::fs::set_permissions(d.join("munge.key"), std::fs::Permissions::from_mode(0o400))
            .unwrap();
        let munged = Command::new("munged")
            .arg("--force")
            .arg(format!("--key-file={}", d.join("munge.key").display()))
            .arg(format!("--socket={}", d.join("munge.sock").display()))
            .arg(format!("--pid-file={}", d.join("munged.pid").display()))
            .arg(format!("--log-file={}", d.join("munged.log").display()))
            .arg(format!("--seed-file={}", d.join("munge.seed").display()))
            .output()
            .unwrap();
        assert!(munged.status.success(), "munged: {}", stderr(&munged));
        slurm
    }

    /// munged, MariaDB and slurmdbd, with a client slurm.conf for them.
    fn start() -> Slurm {
        let mut slurm = Slurm::munge();
        let d = slurm.dir.path().to_path_buf();
        let install = Command::new("mariadb-install-db")
            .args([
                "--no-defaults",
                "--user=root",
                "--auth-root-authentication-method=normal",
            ])
            .arg(format!("--datadir={}", d.join("db").display()))
            .output()
            .unwrap();
        assert!(
            install.status.success(),
            "{}{}",
            stdout(&install),
            stderr(&install)
        );
        let mut mariadb = Command::new("mariadbd");
        mariadb
            .args(["--no-defaults", "--skip-networking", "--user=root"])
            .arg(format!("--datadir={}", d.join("db").display()))
            .arg(format!("--socket={}", d.join("mysql.sock").display()))
            .arg(format!("--pid-file={}", d.join("mysql.pid").display()));
        slurm
            .children
            .push(spawn_logged(&mut mariadb, &d.join("mariadb.log")));
        wait_for("MariaDB", &d.join("mariadb.log"), || {
            d.join("mysql.sock").exists()
        });
        slurm.start_slurmdbd(free_port());
        slurm
    }

    fn start_slurmdbd(&mut self, port: u16) {
        let d = self.dir.path().to_path_buf();
        let munge = d.join("munge.sock").display().to_string();
        std::fs::create_dir(d.join("client")).unwrap();
        std::fs::write(
            d.join("client/slurmdbd.conf"),
            format!(
                "AuthType=auth/munge\nAuthInfo=socket={munge}\nDbdHost=localhost\nDbdPort={port}\n\
                 SlurmUser=root\nStorageType=accounting_storage/mysql\nStorageHost=localhost\n\
                 StorageUser=root\nStorageLoc=slurm_acct_db\nPidFile={}\nLogFile={}\n",
                d.join("slurmdbd.pid").display(),
                d.join("slurmdbd.log").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            d.join("client/slurmdbd.conf"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(
            &self.client_conf,
            format!(
                "ClusterName=gpu07\nSlurmctldHost=localhost\nAuthType=auth/munge\nAuthInfo=socket={munge}\n\
                 AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n\
                 AccountingStoragePort={port}\nAccountingStoragePass={munge}\n\
                 NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=ALL Default=YES\n"
            ),
        )
        .unwrap();
        let mut dbd = Command::new("slurmdbd");
        dbd.arg("-D")
            .env("SLURM_CONF", &self.client_conf)
            .env("MYSQL_UNIX_PORT", d.join("mysql.sock"));
        self.children
            .push(spawn_logged(&mut dbd, &d.join("slurmdbd.out")));
        let log = d.join("slurmdbd.log");
        wait_for("slurmdbd", &log, || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("started"))
        });
    }

    /// slurmctld on the exported slurm.conf (and gres.conf), with the
    /// test's own state, ports and munge socket added at its end; as host
    /// `host`, which the exported file names as its controller.
    fn start_slurmctld(&mut self, export: &Path, host: &str) {
        let d = self.dir.path().to_path_buf();
        let ctl = d.join("ctl");
        std::fs::create_dir_all(ctl.join("state")).unwrap();
        std::fs::copy(export.join("gres.conf"), ctl.join("gres.conf")).unwrap();
        let client = std::fs::read_to_string(&self.client_conf).unwrap();
        let storage: String = client
            .lines()
            .filter(|l| {
                l.starts_with("AccountingStorage") && !l.starts_with("AccountingStorageType")
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let mut conf = std::fs::read_to_string(export.join("slurm.conf")).unwrap();
        conf.push_str(&format!(
            "# the test's own places\nAuthInfo=socket={}\n{storage}StateSaveLocation={}\nSlurmdSpoolDir={}\n\
             SlurmctldPort={}\nSlurmUser=root\nSlurmctldPidFile={}\nSlurmctldLogFile={}\n",
            d.join("munge.sock").display(),
            ctl.join("state").display(),
            ctl.join("state").display(),
            free_port(),
            ctl.join("slurmctld.pid").display(),
            ctl.join("slurmctld.log").display()
        ));
        std::fs::write(ctl.join("slurm.conf"), conf).unwrap();
        std::fs::write(d.join("hosts"), format!("127.0.0.1 localhost {host}\n")).unwrap();
        let script = format!(
            "mount --bind {} /etc/hosts && hostname {host} && exec slurmctld -D",
            d.join("hosts").display()
        );
        let mut ctld = Command::new("unshare");
        ctld.args([
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ])
        .env("SLURM_CONF", ctl.join("slurm.conf"));
        self.children
            .push(spawn_logged(&mut ctld, &ctl.join("slurmctld.out")));
        let log = ctl.join("slurmctld.out");
        wait_for("slurmctld", &log, || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Running as primary controller"))
        });
    }

    /// slurmctld and a slurmd per name in `nodes` (each a host of that
    /// name, in a UTS namespace, on a port of its own), `gpus` fake GPUs
    /// each; a slurm.conf of the test's own, as the Slurm benchmark sets
    /// one up. Returns it once every node is idle.
    fn start_cluster(&mut self, nodes: &[&str], gpus: u32) -> PathBuf {
        let d = self.dir.path().join("cluster");
        std::fs::create_dir_all(d.join("state")).unwrap();
        let mut node_lines = String::new();
        let mut gres = String::new();
        for (n, name) in nodes.iter().enumerate() {
            std::fs::create_dir_all(d.join(format!("spool-{name}"))).unwrap();
            for g in 0..gpus {
                let device = common::fake_gpu_device(&d, n as u32 * gpus + g);
                gres.push_str(&format!(
                    "NodeName={name} Name=gpu File={}\n",
                    device.display()
                ));
            }
            node_lines.push_str(&format!(
                "NodeName={name} NodeAddr=127.0.0.1 Port={} CPUs=8 RealMemory=16000 Gres=gpu:{gpus} State=UNKNOWN\n",
                free_port()
            ));
        }
        let conf = d.join("slurm.conf");
        std::fs::write(d.join("gres.conf"), gres).unwrap();
        std::fs::write(
            &conf,
            format!(
                "ClusterName=compare\nSlurmctldHost=ctl(127.0.0.1)\nSlurmctldPort={}\nAuthType=auth/munge\n\
                 AuthInfo=socket={}\nCredType=cred/munge\nSlurmUser=root\nStateSaveLocation={}\n\
                 SlurmdSpoolDir={}/spool-%n\nSlurmctldPidFile={}/ctld.pid\nSlurmdPidFile={}/slurmd.%n.pid\n\
                 SlurmctldLogFile={}/ctld.log\nSlurmdLogFile={}/slurmd.%n.log\nProctrackType=proctrack/linuxproc\n\
                 TaskPlugin=task/none\nMpiDefault=none\nJobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\nSchedulerType=sched/backfill\n\
                 SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nGresTypes=gpu\n\
                 SlurmdParameters=config_overrides\nReturnToService=2\nMailProg=/bin/true\n{node_lines}\
                 PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
                free_port(),
                self.dir.path().join("munge.sock").display(),
                d.join("state").display(),
                d.display(),
                d.display(),
                d.display(),
                d.display(),
                d.display()
            ),
        )
        .unwrap();
        let hosts = std::iter::once("ctl").chain(nodes.iter().copied());
        for (i, host) in hosts.enumerate() {
            let daemon = if i == 0 { "slurmctld" } else { "slurmd" };
            let mut command = Command::new("unshare");
            command
                .args([
                    "--uts",
                    "sh",
                    "-c",
                    &format!("hostname {host} && exec {daemon} -D"),
                ])
                .env("SLURM_CONF", &conf);
            let log = d.join(format!("{host}.out"));
            self.children.push(spawn_logged(&mut command, &log));
        }
        let idle: Vec<String> = nodes.iter().map(|n| format!("{n} idle")).collect();
        wait_for("the Slurm cluster", &d.join("ctl.out"), || {
            let out = Command::new("sinfo")
                .args(["-N", "-h", "-o", "%N %t"])
                .env("SLURM_CONF", &conf)
                .output();
            out.is_ok_and(|o| {
                let text = stdout(&o);
                idle.iter().all(|l| text.lines().any(|s| s.trim() == l))
            })
        });
        conf
    }

    /// `sacctmgr ARGS` of Slurm, in `dir`.
    fn sacctmgr(&self, dir: &Path, args: &[&str]) -> std::process::Output {
        Command::new("sacctmgr")
            .args(args)
            .env("SLURM_CONF", &self.client_conf)
            .current_dir(dir)
            .output()
            .unwrap()
    }
}

/// `sacctmgr ARGS` over ysched, for `config`.
fn ysched_sacctmgr(config: &Path, args: &[&str]) -> String {
    use std::os::unix::process::CommandExt;
    let out = Command::new(bin_dir().join("ysched-slurm"))
        .arg0("sacctmgr")
        .args(args)
        .env("YS_CONF", config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// Whether the test is skipped here: not root, or `programs` missing
/// (never where CI installed them).
fn skipped(programs: &[&str]) -> bool {
    if common::is_root() && programs.iter().all(|p| installed(p)) {
        return false;
    }
    assert!(
        std::env::var_os("YSCHED_REQUIRE_SLURM").is_none(),
        "YSCHED_REQUIRE_SLURM is set but root or one of {programs:?} is missing"
    );
    common::skip(module_path!(), "needs root and Slurm 22.05's packages");
    true
}

/// CONFIG in `dir`, exported for Slurm (cluster gpu07) into `dir`/to-slurm.
fn exported(dir: &Path) -> (PathBuf, PathBuf) {
    let config = dir.join("ysched.toml");
    std::fs::write(
        &config,
        format!("spool_dir = \"{}\"\n{CONFIG}", dir.join("spool").display()),
    )
    .unwrap();
    let export = dir.join("to-slurm");
    let out = Command::new(bin_dir().join("ysctld"))
        .arg("--config")
        .arg(&config)
        .args([
            "export-slurm",
            export.to_str().unwrap(),
            "--cluster",
            "gpu07",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    (config, export)
}

#[test]
fn an_export_loads_into_slurm_and_its_sacctmgr_shows_what_ysched_shows() {
    if skipped(&["munged", "mariadbd", "slurmdbd", "slurmctld", "sacctmgr"]) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let (config, export) = exported(work.path());

    let mut slurm = Slurm::start();
    // The exported slurm.conf runs a controller, with the node and its GPUs.
    slurm.start_slurmctld(&export, "gpu07");
    let qos = Command::new("sh")
        .arg("qos.sh")
        .env("SLURM_CONF", &slurm.client_conf)
        .current_dir(&export)
        .output()
        .unwrap();
    assert!(
        qos.status.success(),
        "qos.sh: {}{}",
        stdout(&qos),
        stderr(&qos)
    );
    let load = slurm.sacctmgr(&export, &["-i", "load", "file=sacctmgr.cfg"]);
    assert!(
        load.status.success(),
        "load: {}{}",
        stdout(&load),
        stderr(&load)
    );
    assert!(!stdout(&load).contains("Problem"), "{}", stdout(&load));

    let assoc = [
        "-n",
        "-P",
        "show",
        "assoc",
        "format=account,user,share,grptres,qos,defaultqos",
    ];
    let theirs = stdout(&slurm.sacctmgr(&export, &assoc));
    assert_eq!(
        sorted_lines(&theirs),
        sorted_lines(&ysched_sacctmgr(&config, &assoc))
    );
    assert!(theirs.contains("vision||3|gres/gpu=8|"), "{theirs}");
    let qos = [
        "-n",
        "-P",
        "show",
        "qos",
        "format=name,priority,preempt,preemptmode,usagefactor,gracetime,maxwall",
    ];
    let theirs: Vec<String> = sorted_lines(&stdout(&slurm.sacctmgr(&export, &qos)))
        .into_iter()
        // Slurm's own default QoS, which ysched does not have.
        .filter(|l| !l.starts_with("normal|"))
        .collect();
    assert_eq!(theirs, sorted_lines(&ysched_sacctmgr(&config, &qos)));
    let users = [
        "-n",
        "-P",
        "show",
        "user",
        "format=user,defaultaccount,adminlevel",
    ];
    assert_eq!(
        sorted_lines(&stdout(&slurm.sacctmgr(&export, &users))),
        sorted_lines(&ysched_sacctmgr(&config, &users))
    );
}

/// What a job over two nodes sees, in its batch script and in each task
/// srun starts: the variables Slurm and ysched both set.
const ENVIRONMENT: &str = r#"#!/bin/sh
#SBATCH -N 2 --ntasks-per-node=2 --gres=gpu:2 -t 5
for v in SLURM_JOB_NUM_NODES SLURM_NNODES SLURM_NTASKS SLURM_NPROCS SLURM_TASKS_PER_NODE \
    SLURM_JOB_NODELIST SLURM_NODELIST SLURM_NODEID SLURMD_NODENAME SLURM_JOB_CPUS_PER_NODE \
    SLURM_CPUS_ON_NODE; do
  eval "echo batch $v=\${$v-unset}"
done
srun sh -c 'for v in SLURM_PROCID SLURM_LOCALID SLURM_NODEID SLURMD_NODENAME SLURM_NTASKS \
    SLURM_STEP_NUM_TASKS SLURM_STEP_NUM_NODES SLURM_STEP_NODELIST SLURM_STEP_ID; do
  eval "echo task $SLURM_PROCID $v=\${$v-unset}"; done' | sort
echo srun=$?
"#;

#[test]
fn the_same_two_node_script_sees_the_same_variables_under_slurm_and_ysched() {
    if skipped(&["munged", "slurmctld", "slurmd", "sbatch"]) {
        return;
    }
    // Under Slurm: two nodes named as the pool's below.
    let mut slurm = Slurm::munge();
    let conf = slurm.start_cluster(&["gpu10", "gpu11"], 2);
    let work = slurm.dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("env.sh"), ENVIRONMENT).unwrap();
    let out = Command::new("sbatch")
        .args(["--parsable", "env.sh"])
        .env("SLURM_CONF", &conf)
        .current_dir(&work)
        .output()
        .unwrap();
    assert!(out.status.success(), "sbatch: {}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let output = work.join(format!("slurm-{id}.out"));
    wait_for("the Slurm job", &output, || {
        std::fs::read_to_string(&output).is_ok_and(|t| t.contains("srun="))
    });
    let theirs = std::fs::read_to_string(&output).unwrap();

    // Under ysched: the same script, srun from the compat layer.
    let p = crate::pool::Pool::new(2, "");
    p.controller.script("env.sh", ENVIRONMENT);
    let shims = p.controller.dir.path().join("compat");
    std::fs::create_dir(&shims).unwrap();
    std::os::unix::fs::symlink(bin_dir().join("ysched-slurm"), shims.join("srun")).unwrap();
    let path = format!(
        "{}:{}",
        shims.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = p
        .controller
        .command("ysbatch")
        .args(["--parsable", "env.sh"])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(out.status.success(), "ysbatch: {}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    assert_eq!(p.controller.wait_done(id, crate::pool::LONG), "COMPLETED");
    let ours = std::fs::read_to_string(p.controller.work.join(format!("ys-{id}.out"))).unwrap();
    assert!(theirs.contains("task 3 SLURM_NODEID=1"), "{theirs}");
    assert_eq!(ours, theirs);
}
