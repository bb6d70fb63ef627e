//! Jobs in container images (`--container-image`), run by Debian's crun
//! with images in podman's store, as root on the real kernel: the image
//! is built here with no registry (Debian's busybox-static imported as a
//! root file system), into a store that lives with the test.
//!
//! The script runs inside as its user, in the job's cgroup, with only its
//! own fake GPU; mounts are made with the user's rights; cancel, time
//! limit and the memory limit reach the container's processes; a missing
//! image or a refused registry fails the job with a reason. Jobs that
//! want an image from a registry (Debian's docker-registry on loopback)
//! wait pending for one pull, charged nothing.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{self, stderr, stdout, Cluster, TestUser};

const LONG: Duration = Duration::from_secs(60);
const IMAGE: &str = "localhost/ystest:1";

/// Whether crun, podman and busybox-static are here; CI installs them
/// and sets YSCHED_REQUIRE_CONTAINERS, so there these tests cannot skip.
fn containers_available(test: &str) -> bool {
    let have = ["/usr/bin/crun", "/usr/bin/podman", "/bin/busybox"]
        .iter()
        .all(|p| Path::new(p).exists());
    if !have {
        assert!(
            std::env::var_os("YSCHED_REQUIRE_CONTAINERS").is_none(),
            "YSCHED_REQUIRE_CONTAINERS is set but crun, podman or busybox-static is missing"
        );
        common::skip(test, "crun, podman or busybox-static is not installed");
    }
    have
}

/// A root file system of busybox: a shell and the usual tools, a marker
/// file that says which image this is, and root in /etc/passwd.
fn rootfs_tar(dir: &Path) -> PathBuf {
    rootfs_tar_marked(dir, "ysched test image")
}

/// [`rootfs_tar`] with `marker` in its marker file.
fn rootfs_tar_marked(dir: &Path, marker: &str) -> PathBuf {
    let root = dir.join("rootfs");
    for d in ["bin", "etc", "tmp"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).unwrap();
    let tools = [
        "sh", "cat", "ls", "id", "echo", "sleep", "env", "pwd", "touch", "head", "tr", "grep",
        "whoami", "mkdir", "true", "mv", "rm",
    ];
    for tool in tools {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(tool)).unwrap();
    }
    std::fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\n").unwrap();
    std::fs::write(root.join("image-marker"), format!("{marker}\n")).unwrap();
    let tar = dir.join("rootfs.tar");
    let out = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .output()
        .unwrap();
    assert!(out.status.success(), "tar: {}", stderr(&out));
    tar
}

/// podman on the test's own image store.
fn podman(store: &Path) -> Command {
    let mut c = Command::new("/usr/bin/podman");
    c.arg("--root")
        .arg(store)
        .arg("--runroot")
        .arg(store.join("run"));
    c
}

/// A cluster with four fake GPUs and an image store holding IMAGE;
/// `containers` is added to its `[containers]` table.
struct Setup {
    c: Cluster,
    store: PathBuf,
    devices: tempfile::TempDir,
}

impl Setup {
    fn new(containers: &str) -> Setup {
        Setup::with("", containers)
    }

    /// `top` is added to the config's top level (before `[containers]`).
    fn with(top: &str, containers: &str) -> Setup {
        let devices = tempfile::Builder::new()
            .prefix("ysched-dev-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(devices.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for i in 0..4 {
            common::fake_gpu_device(devices.path(), i);
        }
        let gpus = format!(
            "[[gpus]]\ntype = \"a100\"\nmemory = \"80GiB\"\ndevices = \"{}/nvidia[0-3]\"\n",
            devices.path().display()
        );
        let scratch = tempfile::Builder::new()
            .prefix("ysched-images-")
            .tempdir()
            .unwrap()
            .keep();
        let store = scratch.join("store");
        let extra = format!(
            "{top}\n[containers]\nstorage = \"{}\"\n{containers}\n",
            store.display()
        );
        let mut c = Cluster::with_gpus(&extra, &gpus);
        let tar = rootfs_tar(&scratch);
        let out = podman(&store)
            .arg("import")
            .arg(&tar)
            .arg(IMAGE)
            .output()
            .unwrap();
        assert!(out.status.success(), "podman import: {}", stderr(&out));
        std::fs::rename(&tar, c.dir.path().join("rootfs.tar")).unwrap();
        let _ = std::fs::remove_dir_all(scratch.join("rootfs"));
        c.start();
        std::fs::write(c.work.join("devdir"), devices.path().display().to_string()).unwrap();
        Setup { c, store, devices }
    }

    fn submit_as(&self, user: &TestUser, args: &[&str]) -> u64 {
        let out = self
            .c
            .run_as(&user.name, "ysbatch", &[&["--parsable"], args].concat());
        assert!(out.status.success(), "ysbatch {args:?}: {}", stderr(&out));
        stdout(&out).trim().parse().unwrap()
    }

    fn work_mount(&self) -> String {
        format!("--container-mounts={}:/work", self.c.work.display())
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        self.c.stop();
        remove_store(&self.store);
        if let Some(scratch) = self.store.parent() {
            let _ = std::fs::remove_dir_all(scratch);
        }
        let _ = &self.devices;
    }
}

/// Removes an image store's images and unmounts its layers.
fn remove_store(store: &Path) {
    let _ = podman(store).args(["rmi", "--all", "--force"]).output();
    let _ = Command::new("umount")
        .arg("-R")
        .arg(store.join("overlay"))
        .output();
}

/// The one GPU device INSIDE saw in the container.
fn the_one_gpu(out: &str) -> String {
    let gpu = out
        .lines()
        .find_map(|l| l.strip_prefix("devices="))
        .unwrap_or_default()
        .trim()
        .to_string();
    assert!(gpu.starts_with("nvidia") && !gpu.contains(' '), "{out}");
    gpu
}

/// That `user` has no process left.
fn assert_no_processes_of(user: &str) {
    let left = Command::new("pgrep").args(["-u", user]).output().unwrap();
    assert!(
        stdout(&left).trim().is_empty(),
        "processes left: {}",
        stdout(&left)
    );
}

/// What the script inside prints about where it is.
const INSIDE: &str = r#"#!/bin/sh
echo "marker=$(cat /image-marker)"
echo "uid=$(id -u) user=$(whoami) pwd=$(pwd)"
echo "visible=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID"
dev=$(cat /work/devdir)
echo "devices=$(ls $dev | tr '\n' ' ')"
for f in $dev/nvidia*; do
  msg=$( (exec 3<"$f") 2>&1 )
  case "$msg" in
    *"No such device or address"*) echo "$(basename $f) opens" ;;
    *) echo "$(basename $f) $msg" ;;
  esac
done
grep job_ /proc/self/cgroup | head -2
exit 3
"#;

#[test]
fn a_job_runs_in_its_image_as_its_user_in_its_cgroup_with_only_its_gpu() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let s = Setup::new("");
    let ana = TestUser::create("ctr");
    s.c.script("inside.sh", INSIDE);
    let id = s.submit_as(
        &ana,
        &[
            "-G",
            "1",
            "--container-image",
            IMAGE,
            &s.work_mount(),
            "inside.sh",
        ],
    );
    assert_eq!(s.c.wait_done(id, LONG), "FAILED");
    assert_eq!(
        s.c.field(id, "ExitCode"),
        "3:0",
        "{}",
        s.c.field(id, "Reason")
    );
    let out = s.c.output_of(id);
    assert!(out.contains("marker=ysched test image"), "{out}");
    assert!(
        out.contains(&format!("uid={} user={} pwd=/work", ana.uid, ana.name)),
        "{out}"
    );
    assert!(out.contains(&format!("visible=0 job={id}")), "{out}");
    // Only its own GPU exists inside, and the job's cgroup lets it open it.
    let gpu = the_one_gpu(&out);
    assert!(out.contains(&format!("{gpu} opens")), "{out}");
    assert!(
        out.contains(&format!("job_{id}")),
        "in the job's cgroup: {out}"
    );
    let image = s.c.field(id, "ContainerImage");
    assert!(image.starts_with(&format!("{IMAGE}@sha256:")), "{image}");
    let json = stdout(&s.c.run("ysacct", &["-j", &id.to_string(), "--json"]));
    assert!(json.contains("sha256:"), "{json}");
    let audit = stdout(&s.c.run("yscontrol", &["show", "audit"]));
    assert!(
        audit.contains(&format!("job {id} ran in {image}")),
        "{audit}"
    );
    let report = stdout(&s.c.run("ysreport", &["-S", "now-1hour"]));
    assert!(
        report.contains(&format!("By container image\n  {image}")),
        "{report}"
    );
    // Nothing of the container is left: no process, no mount, no layer.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&format!("jobs/{id}/container")),
        "{mounts}"
    );
}

#[test]
fn mounts_are_made_with_the_users_rights_and_read_only_where_declared() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let s = Setup::new("");
    let ana = TestUser::create("ctm");
    let private = s.c.dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let shared = s.c.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("data.txt"), "dataset\n").unwrap();
    s.c.script(
        "ro.sh",
        "#!/bin/sh\ncat /data/data.txt\ntouch /data/new 2>&1 || echo refused\ntouch /work/ok && echo wrote\n",
    );
    let mounts = format!(
        "--container-mounts={}:/work,{}:/data:ro",
        s.c.work.display(),
        shared.display()
    );
    let ro = s.submit_as(&ana, &["--container-image", IMAGE, &mounts, "ro.sh"]);
    assert_eq!(s.c.wait_done(ro, LONG), "COMPLETED");
    let out = s.c.output_of(ro);
    assert!(out.contains("dataset"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.contains("wrote"), "{out}");
    assert!(!shared.join("new").exists());
    // Root could mount it; the user may not read it, so neither may the job.
    let mounts = format!("--container-mounts={}:/secret", private.display());
    let denied = s.submit_as(&ana, &["--container-image", IMAGE, &mounts, "ro.sh"]);
    assert_eq!(s.c.wait_done(denied, LONG), "FAILED");
    let reason = s.c.field(denied, "Reason");
    assert!(
        reason.contains(&format!("cannot mount {}", private.display()))
            && reason.contains("Permission denied"),
        "{reason}"
    );
}

#[test]
fn cancel_time_limit_and_memory_reach_the_processes_in_the_container() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let s = Setup::new("");
    let ana = TestUser::create("cts");
    s.c.script(
        "trap.sh",
        "#!/bin/sh\ntrap 'echo got TERM; exit 5' TERM\necho started\nsleep 300 &\nwait\n",
    );
    let mount = s.work_mount();
    let cancelled = s.submit_as(&ana, &["--container-image", IMAGE, &mount, "trap.sh"]);
    common::wait_for("the job to start", LONG, || {
        s.c.output_of(cancelled).contains("started")
    });
    let out = s.c.run_as(&ana.name, "yscancel", &[&cancelled.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(s.c.wait_done(cancelled, LONG), "CANCELLED");
    let out = s.c.output_of(cancelled);
    assert_eq!(
        out.matches("got TERM").count(),
        1,
        "the trap ran once: {out}"
    );
    let timed = s.submit_as(
        &ana,
        &[
            "-t",
            "0:03",
            "--container-image",
            IMAGE,
            &mount,
            "--wrap",
            "sleep 300",
        ],
    );
    assert_eq!(s.c.wait_done(timed, LONG), "TIMEOUT");
    let big = s.submit_as(
        &ana,
        &[
            "--mem",
            "32M",
            "--container-image",
            IMAGE,
            &mount,
            "--wrap",
            "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo ${#x}",
        ],
    );
    assert_eq!(s.c.wait_done(big, LONG), "OUT_OF_MEMORY");
    assert_no_processes_of(&ana.name);
}

#[test]
fn images_from_archives_and_the_errors_that_end_a_job_with_a_reason() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let s = Setup::new("allowed_registries = [\"localhost\", \"nvcr.io\"]");
    let ana = TestUser::create("cta");
    let archive = s.c.dir.path().join("yolo.tar");
    let out = podman(&s.store)
        .args(["save", "--format", "oci-archive", "-o"])
        .arg(&archive)
        .arg(IMAGE)
        .output()
        .unwrap();
    assert!(out.status.success(), "podman save: {}", stderr(&out));
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
    let loaded = s.submit_as(
        &ana,
        &[
            "--container-image",
            archive.to_str().unwrap(),
            "--wrap",
            "cat /image-marker",
        ],
    );
    assert_eq!(s.c.wait_done(loaded, LONG), "COMPLETED");
    assert!(s.c.output_of(loaded).contains("ysched test image"));
    let image = s.c.field(loaded, "ContainerImage");
    assert!(
        image.starts_with(&format!("{}@sha256:", archive.display())),
        "{image}"
    );
    // A root file system as a plain tar file is imported.
    let rootfs = s.c.dir.path().join("rootfs.tar");
    std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o644)).unwrap();
    let imported = s.submit_as(
        &ana,
        &[
            "--container-image",
            rootfs.to_str().unwrap(),
            "--wrap",
            "cat /image-marker",
        ],
    );
    assert_eq!(s.c.wait_done(imported, LONG), "COMPLETED");
    let failures = [
        (
            "localhost/nosuch:1",
            "is not on this node and could not be pulled",
        ),
        (
            "docker.io/library/busybox:1",
            "registry docker.io is not in this site's allowed_registries",
        ),
    ];
    let junk = s.c.dir.path().join("junk.tar");
    std::fs::write(&junk, "not an image at all\n").unwrap();
    std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o644)).unwrap();
    let secret = s.c.dir.path().join("secret.tar");
    std::fs::copy(&archive, &secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let junk_text = junk.display().to_string();
    let secret_text = secret.display().to_string();
    let more = [
        (junk_text.as_str(), "is not an image archive"),
        (secret_text.as_str(), "Permission denied"),
    ];
    for (image, why) in failures.iter().chain(more.iter()) {
        let id = s.submit_as(&ana, &["--container-image", image, "--wrap", "true"]);
        assert_eq!(s.c.wait_done(id, LONG), "FAILED", "{image}");
        let reason = s.c.field(id, "Reason");
        assert!(reason.contains(why), "{image}: {reason}");
    }
}

#[test]
fn no_registry_is_pulled_from_unless_listed_and_a_failure_does_not_map_the_network() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    // An open port that answers, but is no registry.
    let http = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = http.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in http.incoming().flatten() {
            use std::io::Write;
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
        }
    });
    let ana = TestUser::create("ctg");
    // By default, no registry: a name cannot send the node's podman anywhere.
    let s = Setup::new("");
    let id = s.submit_as(
        &ana,
        &[
            "--container-image",
            &format!("127.0.0.1:{open}/x:1"),
            "--wrap",
            "true",
        ],
    );
    assert_eq!(s.c.wait_done(id, LONG), "FAILED");
    let reason = s.c.field(id, "Reason");
    assert!(
        reason.contains("is not in this site's allowed_registries"),
        "{reason}"
    );
    drop(s);
    // With any allowed, a closed port and an open one read the same.
    let s = Setup::new("allowed_registries = [\"*\"]\npull_timeout = \"20s\"");
    let reason_for = |port: u16| {
        let id = s.submit_as(
            &ana,
            &[
                "--container-image",
                &format!("127.0.0.1:{port}/x:1"),
                "--wrap",
                "true",
            ],
        );
        assert_eq!(s.c.wait_done(id, LONG), "FAILED");
        s.c.field(id, "Reason")
            .replace(&format!("127.0.0.1:{port}"), "127.0.0.1:PORT")
    };
    let (closed, answered) = (reason_for(1), reason_for(open));
    assert_eq!(closed, answered);
    assert!(
        closed.contains("could not be reached as a registry"),
        "{closed}"
    );
}

/// The images of a store, as `NAME:TAG ID` lines, sorted.
fn images_of(store: &Path) -> Vec<String> {
    let out = podman(store)
        .args(["images", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"])
        .output()
        .unwrap();
    assert!(out.status.success(), "podman images: {}", stderr(&out));
    let mut lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

#[test]
fn a_users_archive_never_takes_the_sites_image_names_and_goes_with_its_job() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let s = Setup::new("max_archive_size = \"64M\"");
    let (mallory, ana) = (TestUser::create("ctm"), TestUser::create("ctv"));
    // An image of mallory's own, saved under the site's image's name.
    let scratch = tempfile::Builder::new()
        .prefix("ysched-evil-")
        .tempdir()
        .unwrap();
    let tar = rootfs_tar_marked(scratch.path(), "mallory's image");
    let evil_store = scratch.path().join("store");
    let out = podman(&evil_store)
        .arg("import")
        .arg(&tar)
        .arg(IMAGE)
        .output()
        .unwrap();
    assert!(out.status.success(), "podman import: {}", stderr(&out));
    let evil = s.c.dir.path().join("evil.tar");
    let out = podman(&evil_store)
        .args(["save", "--format", "docker-archive", "-o"])
        .arg(&evil)
        .arg(IMAGE)
        .output()
        .unwrap();
    assert!(out.status.success(), "podman save: {}", stderr(&out));
    remove_store(&evil_store);
    std::fs::set_permissions(&evil, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = images_of(&s.store);
    let loaded = s.submit_as(
        &mallory,
        &[
            "--container-image",
            evil.to_str().unwrap(),
            "--wrap",
            "cat /image-marker",
        ],
    );
    assert_eq!(
        s.c.wait_done(loaded, LONG),
        "COMPLETED",
        "{}",
        s.c.field(loaded, "Reason")
    );
    assert!(s.c.output_of(loaded).contains("mallory's image"));
    // The node's store is as it was: no name moved, nothing added.
    assert_eq!(images_of(&s.store), before);
    let theirs = s.submit_as(
        &ana,
        &["--container-image", IMAGE, "--wrap", "cat /image-marker"],
    );
    assert_eq!(s.c.wait_done(theirs, LONG), "COMPLETED");
    assert!(
        s.c.output_of(theirs).contains("ysched test image"),
        "{}",
        s.c.output_of(theirs)
    );
    // The job's own store went with it.
    let left: Vec<_> = walk(&s.c.spool)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("archive-images"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Neither a device nor a pipe, nor a file over max_archive_size, is
    // fed to podman: each fails at once with the reason.
    let fifo = s.c.dir.path().join("fifo.tar");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o666)).unwrap();
    let big = s.c.dir.path().join("big.tar");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(65 << 20)
        .unwrap();
    std::fs::set_permissions(&big, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (archive, why) in [
        ("/dev/zero".to_string(), "it is not a regular file"),
        (fifo.display().to_string(), "it is not a regular file"),
        (
            big.display().to_string(),
            "more than this site's max_archive_size of 64 MiB",
        ),
    ] {
        let id = s.submit_as(&mallory, &["--container-image", &archive, "--wrap", "true"]);
        assert_eq!(s.c.wait_done(id, LONG), "FAILED", "{archive}");
        let reason = s.c.field(id, "Reason");
        assert!(reason.contains(why), "{archive}: {reason}");
    }
}

/// Every path under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        found.push(entry.path());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(walk(&entry.path()));
        }
    }
    found
}

#[test]
fn a_cancel_stops_an_archive_load_at_once() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    // A podman whose load never ends (a disk that hangs), in a directory
    // of the test's.
    let tools = tempfile::Builder::new()
        .prefix("ysched-podman-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(tools.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fake = tools.path().join("podman");
    std::fs::write(
        &fake,
        "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = load ] && exec sleep 600; done\nexec /usr/bin/podman \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = Setup::new(&format!("podman = \"{}\"", fake.display()));
    let ana = TestUser::create("ctc");
    let archive = s.c.dir.path().join("slow.tar");
    std::fs::write(&archive, "an archive\n").unwrap();
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o644)).unwrap();
    let id = s.submit_as(
        &ana,
        &[
            "--container-image",
            archive.to_str().unwrap(),
            "--wrap",
            "true",
        ],
    );
    let loading = || {
        let out = Command::new("pgrep")
            .args(["-f", "sleep 600"])
            .output()
            .unwrap();
        !stdout(&out).trim().is_empty()
    };
    common::wait_for("the load to start", LONG, loading);
    let out = s.c.run_as(&ana.name, "yscancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        s.c.wait_done(id, Duration::from_secs(10)),
        "CANCELLED",
        "{}",
        s.c.field(id, "Reason")
    );
    common::wait_for("the load to be killed", Duration::from_secs(5), || {
        !loading()
    });
}

#[test]
fn container_options_are_checked_at_submit() {
    let c = Cluster::started("[containers]\nruntime = \"/nonexistent/crun\"\n");
    for (args, error) in [
        (
            vec!["--container-image", "yolo;rm -rf /", "--wrap", "true"],
            "--container-image: 'yolo;rm -rf /' has a character an image name cannot hold",
        ),
        (
            vec!["--container-mounts", "/a:/b", "--wrap", "true"],
            "--container-mounts needs --container-image",
        ),
        (
            vec![
                "--container-image",
                "x",
                "--container-mounts",
                "/a:/b:rx",
                "--wrap",
                "true",
            ],
            "'rx' in '/a:/b:rx' is not one of ro, rw",
        ),
        (
            vec![
                "--container-image",
                "x",
                "--container-writable",
                "--container-readonly",
                "--wrap",
                "true",
            ],
            "--container-writable and --container-readonly exclude each other",
        ),
        (
            vec!["--container-image", "yolo:v8", "--wrap", "true"],
            "/nonexistent/crun (package crun)",
        ),
    ] {
        let out = c.run("ysbatch", &args);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr(&out).contains(error), "{args:?}: {}", stderr(&out));
    }
    let out = c.run("ysqueue", &["-h"]);
    assert_eq!(stdout(&out), "", "nothing was queued");
}

/// Debian's registry (docker-registry) on a loopback port of its own,
/// with its access log.
struct Registry {
    child: std::process::Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start(ip: &str) -> Option<Registry> {
        if !Path::new("/usr/bin/docker-registry").exists() {
            assert!(
                std::env::var_os("YSCHED_REQUIRE_CONTAINERS").is_none(),
                "YSCHED_REQUIRE_CONTAINERS is set but docker-registry is missing"
            );
            common::skip(module_path!(), "docker-registry is not installed");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let port = free_port(ip);
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {ip}:{port}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = dir.path().join("registry.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("/usr/bin/docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        common::wait_for("the registry to listen", LONG, || {
            std::net::TcpStream::connect((ip, port)).is_ok()
        });
        Some(Registry {
            child,
            port,
            log,
            _dir: dir,
        })
    }

    /// How many times the manifest of `repository` was fetched: once
    /// per pull (the layers already here are not fetched again).
    fn manifest_fetches(&self, repository: &str, tag: &str) -> usize {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let wanted = format!("\"GET /v2/{repository}/manifests/{tag} ");
        log.lines().filter(|l| l.contains(&wanted)).count()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port(ip: &str) -> u16 {
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    listener.local_addr().unwrap().port()
}

/// A registry on `ip`, where containers can run here at all.
fn registry_on(ip: &str) -> Option<Registry> {
    if !containers_available(module_path!()) {
        return None;
    }
    Registry::start(ip)
}

/// A loopback proxy to the registry that holds every connection until
/// opened: what a slow download looks like to the jobs waiting for it.
struct Gate {
    port: u16,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Gate {
    fn to(ip: &str, target: u16) -> Gate {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let ip = ip.to_string();
        let port = listener.local_addr().unwrap().port();
        let (open, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (opened, stopped) = (open.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (opened, stopped) = (opened.clone(), stopped.clone());
                        let ip = ip.clone();
                        std::thread::spawn(move || {
                            while !opened.load(Ordering::SeqCst) && !stopped.load(Ordering::SeqCst)
                            {
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            relay(client, &ip, target);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Gate { port, open, stop }
    }

    fn open(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

fn relay(client: std::net::TcpStream, ip: &str, target: u16) {
    client.set_nonblocking(false).unwrap();
    let Ok(server) = std::net::TcpStream::connect((ip, target)) else {
        return;
    };
    let (mut client_in, mut server_out) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut client_in, &mut server_out);
        let _ = server_out.shutdown(std::net::Shutdown::Write);
    });
    let (mut server_in, mut client_out) = (server, client);
    let _ = std::io::copy(&mut server_in, &mut client_out);
    let _ = client_out.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}

#[test]
fn jobs_wanting_one_image_wait_for_a_single_pull_uncharged() {
    require_root!();
    let Some(registry) = registry_on("127.0.0.1") else {
        return;
    };
    let gate = Gate::to("127.0.0.1", registry.port);
    let proxied = format!("127.0.0.1:{}", gate.port);
    let s = Setup::new(&format!(
        "allowed_registries = [\"{proxied}\"]\ninsecure_registries = [\"{proxied}\"]\nprefetch = [\"{proxied}/ystest:2\"]"
    ));
    for tag in ["1", "2"] {
        let pushed = format!("127.0.0.1:{}/ystest:{tag}", registry.port);
        let out = podman(&s.store)
            .args(["push", "--quiet", "--tls-verify=false", IMAGE, &pushed])
            .output()
            .unwrap();
        assert!(out.status.success(), "podman push: {}", stderr(&out));
    }
    let before = registry.manifest_fetches("ystest", "1");
    let ana = TestUser::create("pull");
    let image = format!("{proxied}/ystest:1");
    let jobs: Vec<u64> = (0..12)
        .map(|_| {
            s.submit_as(
                &ana,
                &["--container-image", &image, "--wrap", "cat /image-marker"],
            )
        })
        .collect();
    // All placed, none started: each waits for the one pull, charged nothing.
    common::wait_for("the jobs to wait for their image", LONG, || {
        let q = stdout(&s.c.run("ysqueue", &["-h", "-o", "%i %t %r"]));
        jobs.iter()
            .all(|id| q.contains(&format!("{id} PD ImagePull")))
    });
    std::thread::sleep(Duration::from_secs(2));
    for id in &jobs {
        assert_eq!(s.c.state(*id), "PENDING", "job {id}");
    }
    gate.open();
    for id in &jobs {
        let state = s.c.wait_done(*id, LONG);
        assert_eq!(state, "COMPLETED", "job {id}: {}", s.c.field(*id, "Reason"));
        assert!(s.c.output_of(*id).contains("ysched test image"));
        // The two seconds and more spent waiting for the pull are not its run.
        let elapsed: u64 = s.c.field(*id, "ElapsedRaw").parse().unwrap();
        assert!(elapsed <= 1, "job {id} ran {elapsed} s");
    }
    let fetched = registry.manifest_fetches("ystest", "1") - before;
    assert_eq!(fetched, 1, "pulls for {} jobs", jobs.len());
    // The prefetch list was pulled on its own, once the registry answered.
    common::wait_for("the prefetched image", LONG, || {
        podman(&s.store)
            .args(["image", "exists", &format!("{proxied}/ystest:2")])
            .status()
            .is_ok_and(|st| st.success())
    });
    image_pull_by_hand(&s, &ana, &image, &proxied);
    assert_eq!(registry.manifest_fetches("ystest", "1") - before, 1);
}

/// `yscontrol image pull`: admins only, names in a registry only, a line
/// per node, and a failure that says why.
fn image_pull_by_hand(s: &Setup, user: &TestUser, present: &str, registry: &str) {
    let out = s.c.run("yscontrol", &["image", "pull", present]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("gpu01: ready"), "{}", stdout(&out));
    let missing = format!("{registry}/nosuch:1");
    let out =
        s.c.run("yscontrol", &["image", "pull", &missing, "--node", "gpu01"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("gpu01: failed: image")
            && stdout(&out).contains("could not be pulled"),
        "{}",
        stdout(&out)
    );
    for (who, args, error) in [
        (
            Some(user),
            vec![present],
            "only root and the config's admins may pull images",
        ),
        (None, vec!["/data/y.tar"], "is an archive"),
        (
            None,
            vec![present, "--node", "gpu09"],
            "unknown node 'gpu09'",
        ),
        (None, vec!["a;b"], "has a character"),
    ] {
        let args = [&["image", "pull"], args.as_slice()].concat();
        let out = match who {
            Some(u) => s.c.run_as(&u.name, "yscontrol", &args),
            None => s.c.run("yscontrol", &args),
        };
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(stderr(&out).contains(error), "{args:?}: {}", stderr(&out));
    }
}

/// A store of its own, emptied and removed when dropped.
struct ScratchStore(tempfile::TempDir);

impl ScratchStore {
    fn new() -> ScratchStore {
        ScratchStore(
            tempfile::Builder::new()
                .prefix("ysched-store-")
                .tempdir()
                .unwrap(),
        )
    }

    fn path(&self) -> PathBuf {
        self.0.path().join("store")
    }

    /// One holding IMAGE, imported from busybox.
    fn with_image() -> ScratchStore {
        let store = ScratchStore::new();
        let tar = rootfs_tar(store.0.path());
        let out = podman(&store.path())
            .arg("import")
            .arg(&tar)
            .arg(IMAGE)
            .output()
            .unwrap();
        assert!(out.status.success(), "podman import: {}", stderr(&out));
        store
    }
}

impl Drop for ScratchStore {
    fn drop(&mut self) {
        remove_store(&self.path());
    }
}

#[test]
fn a_node_of_a_pool_pulls_a_jobs_image_before_it_starts_there() {
    require_root!();
    let net = crate::pool::Net::new();
    let ip = net.controller_ip();
    let Some(registry) = registry_on(&ip) else {
        return;
    };
    let gate = Gate::to(&ip, registry.port);
    let proxied = format!("{ip}:{}", gate.port);
    // The image, pushed from a store of the test's own.
    let source = ScratchStore::with_image();
    let pushed = format!("{ip}:{}/ystest:1", registry.port);
    let out = podman(&source.path())
        .args(["push", "--quiet", "--tls-verify=false", IMAGE, &pushed])
        .output()
        .unwrap();
    assert!(out.status.success(), "podman push: {}", stderr(&out));
    let before = registry.manifest_fetches("ystest", "1");
    let node_store = ScratchStore::new();
    let p = crate::pool::Pool::with_nodes_config(
        net,
        1,
        &format!(
            "[containers]\nstorage = \"{}\"\nallowed_registries = [\"{proxied}\"]\ninsecure_registries = [\"{proxied}\"]\n",
            node_store.path().display()
        ),
    );
    let ana = TestUser::create("pnode");
    let image = format!("{proxied}/ystest:1");
    let out = p.controller.run_as(
        &ana.name,
        "ysbatch",
        &[
            "--parsable",
            "--container-image",
            &image,
            "--wrap",
            "cat /image-marker",
        ],
    );
    assert!(out.status.success(), "ysbatch: {}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    common::wait_for("the job to wait for its image", LONG, || {
        let q = stdout(&p.controller.run("ysqueue", &["-h", "-o", "%i %t %r"]));
        q.contains(&format!("{id} PD ImagePull"))
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(p.controller.state(id), "PENDING");
    gate.open();
    let state = p.controller.wait_done(id, LONG);
    assert_eq!(state, "COMPLETED", "{}", p.controller.field(id, "Reason"));
    assert_eq!(p.controller.field(id, "NodeList"), "gpu10");
    assert!(p.controller.output_of(id).contains("ysched test image"));
    let elapsed: u64 = p.controller.field(id, "ElapsedRaw").parse().unwrap();
    assert!(elapsed <= 1, "the job ran {elapsed} s");
    assert_eq!(registry.manifest_fetches("ystest", "1") - before, 1);
}

/// A trainer in the image: counts 30 steps of 0.1 s, saves its step on
/// SIGTERM and exits 0, and resumes from the saved step (in /work, the
/// mounted work directory).
const TRAINER: &str = r#"#!/bin/sh
log="/work/log-$SLURM_JOB_ID"
ckpt="/work/ckpt-$SLURM_JOB_ID"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
trap 'echo $step > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"; echo "checkpoint step=$step" >> "$log"; exit 0' TERM
echo "start restart=$SLURM_RESTART_COUNT step=$step" >> "$log"
while [ "$step" -lt 30 ]; do sleep 0.1 & wait $!; step=$((step + 1)); done
echo "done step=$step" >> "$log"
"#;

#[test]
fn a_preempted_job_in_a_container_checkpoints_and_resumes_from_it() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let qos = "default_qos = \"medium\"\n\
        [[qos]]\nname = \"critical\"\npriority = 300\n\
        [[qos]]\nname = \"medium\"\npriority = 100\n\
        [[qos]]\nname = \"low\"\npriority = 0\ngrace_time = \"0:02\"\n";
    let s = Setup::with(qos, "");
    let ana = TestUser::create("ckpt");
    s.c.script("train.sh", TRAINER);
    let low: Vec<u64> = (0..2)
        .map(|_| {
            let args = ["-q", "low", "-G", "2", "--container-image", IMAGE];
            s.submit_as(&ana, &[&args[..], &[&s.work_mount(), "train.sh"]].concat())
        })
        .collect();
    let log_of =
        |id: u64| std::fs::read_to_string(s.c.work.join(format!("log-{id}"))).unwrap_or_default();
    common::wait_for("the trainers to start counting", LONG, || {
        low.iter().all(|&id| log_of(id).contains("start"))
    });
    let urgent = s.c.submit(&["-q", "critical", "-G", "2", "--wrap", "true"]);
    assert_eq!(s.c.wait_done(urgent, LONG), "COMPLETED");
    let victims: Vec<u64> = low
        .iter()
        .copied()
        .filter(|&id| log_of(id).contains("checkpoint"))
        .collect();
    assert_eq!(victims.len(), 1, "one stopped: {victims:?}");
    for &id in &low {
        assert_eq!(
            s.c.wait_done(id, LONG),
            "COMPLETED",
            "job {id}: {}",
            log_of(id)
        );
        let log = log_of(id);
        assert!(log.trim_end().ends_with("done step=30"), "job {id}: {log}");
        if victims.contains(&id) {
            assert_eq!(s.c.field(id, "Restarts"), "1", "job {id}");
            let saved = log
                .lines()
                .find_map(|l| l.strip_prefix("checkpoint step="))
                .unwrap();
            assert!(
                log.contains(&format!("start restart=1 step={saved}")),
                "resumed where it stopped: {log}"
            );
        }
    }
}

#[test]
fn a_store_over_its_cache_size_drops_pulled_images_no_job_uses() {
    require_root!();
    let Some(registry) = registry_on("127.0.0.1") else {
        return;
    };
    let at = format!("127.0.0.1:{}", registry.port);
    let mut s = Setup::new(&format!(
        "allowed_registries = [\"{at}\"]\ninsecure_registries = [\"{at}\"]\ncache_size = \"1K\""
    ));
    for tag in ["1", "2", "3"] {
        let out = podman(&s.store)
            .args([
                "push",
                "--quiet",
                "--tls-verify=false",
                IMAGE,
                &format!("{at}/ystest:{tag}"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "podman push: {}", stderr(&out));
    }
    let present = |tag: &str| {
        podman(&s.store)
            .args(["image", "exists", &format!("{at}/ystest:{tag}")])
            .status()
            .is_ok_and(|st| st.success())
    };
    let pull = |c: &Cluster, tag: &str| {
        let out = c.run(
            "yscontrol",
            &["image", "pull", &format!("{at}/ystest:{tag}")],
        );
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    };
    // A running job's image stays, however full the store.
    let ana = TestUser::create("cache");
    let one = format!("{at}/ystest:1");
    let id = s.submit_as(&ana, &["--container-image", &one, "--wrap", "sleep 4"]);
    s.c.wait_state(id, "RUNNING", LONG);
    pull(&s.c, "2");
    assert!(
        present("1") && present("2"),
        "the job's image and the one just pulled stay"
    );
    assert_eq!(s.c.wait_done(id, LONG), "COMPLETED");
    let job_dir = s.c.spool.join("jobs").join(id.to_string());
    common::wait_for("the job's directory to go", LONG, || !job_dir.exists());
    // Once no job uses them, the pulled images go, least recently used first;
    // the image loaded by hand stays.
    pull(&s.c, "3");
    common::wait_for("the unused images to go", LONG, || {
        !present("1") && !present("2")
    });
    assert!(present("3"));
    let out = podman(&s.store)
        .args(["image", "exists", IMAGE])
        .status()
        .unwrap();
    assert!(out.success(), "{IMAGE} was loaded by hand and stays");
    // After a restart the cache still weighs the image pulled before it.
    s.c.stop();
    s.c.start();
    pull(&s.c, "1");
    common::wait_for("the image pulled before the restart to go", LONG, || {
        !present("3")
    });
    assert!(present("1"));
}

#[test]
fn a_cdi_spec_gives_the_jobs_gpus_their_driver_files_environment_and_hooks() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let cdi = tempfile::Builder::new()
        .prefix("ysched-cdi-")
        .tempdir()
        .unwrap();
    let s = Setup::new(&format!("cdi_dirs = [\"{}\"]", cdi.path().display()));
    let dev = s.devices.path().display().to_string();
    let library = cdi.path().join("libcuda.so.1");
    std::fs::write(&library, "the driver's library\n").unwrap();
    std::fs::set_permissions(&library, std::fs::Permissions::from_mode(0o644)).unwrap();
    let hooked = cdi.path().join("hooked");
    let devices: Vec<String> = (0..4)
        .map(|i| format!(r#"{{"name": "{i}", "containerEdits": {{"deviceNodes": [{{"path": "{dev}/nvidia{i}"}}]}}}}"#))
        .collect();
    let spec = format!(
        r#"{{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{}],
        "containerEdits": {{
          "env": ["CDI_SEEN=yes"],
          "mounts": [{{"hostPath": "{}", "containerPath": "/usr/lib/libcuda.so.1", "options": ["ro", "bind"]}}],
          "hooks": [{{"hookName": "createContainer", "path": "/bin/sh", "args": ["sh", "-c", "echo ran > {}"]}}]
        }}}}"#,
        devices.join(","),
        library.display(),
        hooked.display()
    );
    std::fs::write(cdi.path().join("nvidia.json"), spec).unwrap();
    let ana = TestUser::create("cdi");
    s.c.script(
        "cdi.sh",
        &format!(
            "#!/bin/sh\ncat /usr/lib/libcuda.so.1\necho cdi=$CDI_SEEN\nls {dev}\n\
             echo x > /usr/lib/libcuda.so.1 || echo read-only\n"
        ),
    );
    let id = s.submit_as(&ana, &["-G", "1", "--container-image", IMAGE, "cdi.sh"]);
    assert_eq!(
        s.c.wait_done(id, LONG),
        "COMPLETED",
        "{}",
        s.c.field(id, "Reason")
    );
    let out = s.c.output_of(id);
    assert!(out.contains("the driver's library"), "{out}");
    assert!(out.contains("cdi=yes"), "{out}");
    assert!(out.contains("read-only"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("nvidia")).count(),
        1,
        "only the job's GPU: {out}"
    );
    assert_eq!(
        std::fs::read_to_string(&hooked).unwrap_or_default(),
        "ran\n"
    );
    // A spec without the job's GPU fails the job with the file named.
    std::fs::write(
        cdi.path().join("nvidia.json"),
        r#"{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": []}"#,
    )
    .unwrap();
    let id = s.submit_as(
        &ana,
        &["-G", "1", "--container-image", IMAGE, "--wrap", "true"],
    );
    assert_eq!(s.c.wait_done(id, LONG), "FAILED");
    let reason = s.c.field(id, "Reason");
    assert!(
        reason.contains("nvidia.json") && reason.contains("no device named"),
        "{reason}"
    );
}

#[test]
fn a_pull_that_hangs_is_given_up_and_its_job_fails_with_the_reason() {
    require_root!();
    let Some(registry) = registry_on("127.0.0.1") else {
        return;
    };
    // The registry never answers through this gate.
    let gate = Gate::to("127.0.0.1", registry.port);
    let at = format!("127.0.0.1:{}", gate.port);
    let s = Setup::new(&format!(
        "insecure_registries = [\"{at}\"]\npull_timeout = \"2s\""
    ));
    let ana = TestUser::create("hang");
    let image = format!("{at}/ystest:1");
    let id = s.submit_as(&ana, &["--container-image", &image, "--wrap", "true"]);
    assert_eq!(s.c.wait_done(id, LONG), "FAILED");
    let reason = s.c.field(id, "Reason");
    assert!(
        reason.contains(&format!("pulling {image}"))
            && reason.contains("gave up after 2s (pull_timeout)"),
        "{reason}"
    );
    assert_eq!(s.c.field(id, "ElapsedRaw"), "0");
    drop(gate);
}

#[test]
fn on_cgroup_v2_a_container_opens_only_its_gpu_and_a_cancel_leaves_nothing() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    if !Path::new("/sys/fs/cgroup/unified/cgroup.controllers").exists()
        && !Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
    {
        common::skip(module_path!(), "no cgroup2 mount on this host");
        return;
    }
    let s = Setup::with("cgroups = \"v2\"", "");
    let ana = TestUser::create("ctr2");
    s.c.script("inside.sh", INSIDE);
    let args = [
        "-G",
        "1",
        "--container-image",
        IMAGE,
        &s.work_mount(),
        "inside.sh",
    ];
    let id = s.submit_as(&ana, &args);
    assert_eq!(s.c.wait_done(id, LONG), "FAILED");
    assert_eq!(
        s.c.field(id, "ExitCode"),
        "3:0",
        "{}",
        s.c.field(id, "Reason")
    );
    let out = s.c.output_of(id);
    let gpu = the_one_gpu(&out);
    assert!(
        out.contains(&format!("{gpu} opens")),
        "the BPF program lets it open its GPU: {out}"
    );
    assert!(
        out.contains("0::") && out.contains(&format!("job_{id}")),
        "in its v2 group: {out}"
    );
    // A cancel ends the container's processes and its group goes.
    let id = s.submit_as(
        &ana,
        &[
            "--container-image",
            IMAGE,
            "--wrap",
            "sleep 300 & sleep 300; wait",
        ],
    );
    s.c.wait_state(id, "RUNNING", LONG);
    std::thread::sleep(Duration::from_secs(1));
    let out = s.c.run("yscancel", &[&id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(s.c.wait_done(id, LONG), "CANCELLED");
    common::wait_for("no process of the job left", LONG, || {
        let ps = Command::new("pgrep")
            .args(["-u", &ana.name])
            .output()
            .unwrap();
        stdout(&ps).trim().is_empty()
    });
}

/// A directory with `srun` (the compat layer) for job scripts' PATH.
fn srun_shim(s: &Setup) -> String {
    let dir = s.c.dir.path().join("srun-shims");
    let _ = std::fs::create_dir(&dir);
    let _ = std::os::unix::fs::symlink(common::bin_dir().join("ysched-slurm"), dir.join("srun"));
    dir.display().to_string()
}

/// The abstract socket job `id`'s supervisor listens on for its steps.
/// The abstract name of job `id`'s steps socket, of `spool`'s daemon
/// (tests running beside this one have jobs of that id too): the one its
/// supervisor (in the job directory's state.json) listens on.
fn steps_socket_of(spool: &Path, id: u64) -> String {
    let state = std::fs::read_to_string(spool.join(format!("jobs/{id}/state.json"))).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    let supervisor = format!("pid={},", state["supervisor_pid"]);
    let out = Command::new("ss").args(["-xlpH"]).output().unwrap();
    let ours = |line: &str| line.contains(&supervisor);
    stdout(&out)
        .lines()
        .filter(|line| ours(line))
        .flat_map(str::split_whitespace)
        .find_map(|w| {
            w.strip_prefix('@')
                .filter(|n| n.starts_with(&format!("ysched/job-{id}/steps-")))
        })
        .unwrap_or_else(|| panic!("no steps socket of job {id}: {}", stdout(&out)))
        .to_string()
}

#[test]
fn srun_runs_a_steps_tasks_in_containers_of_their_image_and_only_the_jobs_user_may_ask() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let s = Setup::new("");
    let ana = TestUser::create("csr");
    let bob = TestUser::create("csb");
    let shims = srun_shim(&s);
    let mount = format!("--container-mounts={}:/work", s.c.work.display());
    s.c.script(
        "steps.sh",
        &format!(
            "#!/bin/sh\nexport PATH={shims}:$PATH\n\
             srun --container-image={IMAGE} {mount} -n 2 --label sh -c 'echo \"marker=$(cat /image-marker) rank=$SLURM_PROCID uid=$(id -u) pwd=$(pwd) visible=$CUDA_VISIBLE_DEVICES cg=$(grep -c job_$SLURM_JOB_ID /proc/self/cgroup)\"' | sed 's/cg=[1-9][0-9]*$/cg=yes/'\n\
             echo srun=$?\n\
             srun --container-image {IMAGE} sh -c 'echo one; exit 7'\n\
             echo single=$?\n\
             srun --container-image={IMAGE} /no/such/program\n\
             echo missing=$?\n\
             srun --container-image=localhost/nosuch:1 true\n\
             echo noimage=$?\n\
             srun --container-mounts=/tmp:/tmp true\n\
             echo noimageflag=$?\n\
             cat /image-marker 2>/dev/null || echo bare-batch\n"
        ),
    );
    let id = s.submit_as(&ana, &["-G", "1", "steps.sh"]);
    assert_eq!(
        s.c.wait_done(id, LONG),
        "COMPLETED",
        "{}",
        s.c.field(id, "Reason")
    );
    let out = s.c.output_of(id);
    for rank in 0..2 {
        assert!(
            out.contains(&format!(
                "{rank}: marker=ysched test image rank={rank} uid={} pwd=/work visible=0 cg=yes",
                ana.uid
            )),
            "{out}"
        );
    }
    assert!(out.contains("srun=0"), "{out}");
    assert!(
        out.contains("one\nsrun: error: gpu01: task 0: Exited with exit code 7\nsingle=7"),
        "the task's exit code, said as Slurm's srun says it: {out}"
    );
    assert!(
        out.contains("/no/such/program") && out.contains("missing=1"),
        "{out}"
    );
    assert!(
        out.contains("localhost/nosuch:1") && out.contains("noimage=1"),
        "{out}"
    );
    assert!(
        out.contains("--container-mounts needs --container-image")
            && !out.contains("noimageflag=0"),
        "{out}"
    );
    assert!(
        out.contains("bare-batch"),
        "the batch script ran bare: {out}"
    );

    a_step_container_is_only_its_users_and_ends_with_its_job(&s, &ana, &bob, &shims);
}

/// A step's container is cancelled with its job: nothing is left. Bob
/// cannot start steps in Ana's job, even knowing its socket.
fn a_step_container_is_only_its_users_and_ends_with_its_job(
    s: &Setup,
    ana: &TestUser,
    bob: &TestUser,
    shims: &str,
) {
    s.c.script(
        "long.sh",
        &format!(
            "#!/bin/sh\nexport PATH={shims}:$PATH\n\
             srun --container-image={IMAGE} sh -c 'echo up; sleep 300'\n"
        ),
    );
    let long = s.submit_as(ana, &["long.sh"]);
    common::wait_for("the step to start", LONG, || {
        s.c.output_of(long).contains("up")
    });
    let socket = steps_socket_of(&s.c.spool, long);
    let intruder = Command::new("runuser")
        .args(["-u", &bob.name, "--", "env"])
        .arg(format!("SLURM_JOB_ID={long}"))
        .arg("SLURM_JOB_NODELIST=localhost")
        .arg(format!("YS_CONTAINER_STEPS={socket}"))
        .arg(format!("{shims}/srun"))
        .args(["--container-image", IMAGE, "touch", "/tmp/bob-was-here"])
        .current_dir("/")
        .output()
        .unwrap();
    assert_eq!(intruder.status.code(), Some(1), "{}", stderr(&intruder));
    assert!(
        stderr(&intruder).contains(&format!("steps are its user's ({})", ana.name)),
        "{}",
        stderr(&intruder)
    );
    let out = s.c.run_as(&ana.name, "yscancel", &[&long.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(s.c.wait_done(long, LONG), "CANCELLED");
    assert_no_processes_of(&ana.name);
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains("step-container-"), "{mounts}");
    let job_dirs = std::fs::read_dir(s.c.spool.join("jobs"));
    for dir in job_dirs.into_iter().flatten().flatten() {
        let leftover = std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("step-container-")
            });
        assert!(
            !leftover,
            "a step's bundle is left in {}",
            dir.path().display()
        );
    }
}

#[test]
fn a_steps_tasks_on_every_node_of_a_pool_job_run_in_containers_there() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    // One store for both nodes (they share the machine), IMAGE in it.
    let store = ScratchStore::with_image();
    let p = crate::pool::Pool::with_nodes_config(
        crate::pool::Net::new(),
        2,
        &format!("[containers]\nstorage = \"{}\"\n", store.path().display()),
    );
    let ana = TestUser::create("cmn");
    let dir = p.controller.dir.path().join("srun-shims");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(common::bin_dir().join("ysched-slurm"), dir.join("srun")).unwrap();
    p.controller.script(
        "wide.sh",
        &format!(
            "#!/bin/sh\n#SBATCH -N 2 --gres=gpu:1 -t 5\nexport PATH={}:$PATH\n\
             srun --container-image={IMAGE} --label sh -c 'echo \"marker=$(cat /image-marker) rank=$SLURM_PROCID on=$SLURMD_NODENAME uid=$(id -u)\"'\n\
             echo srun=$?\n",
            dir.display()
        ),
    );
    let out = p
        .controller
        .run_as(&ana.name, "ysbatch", &["--parsable", "wide.sh"]);
    assert!(out.status.success(), "ysbatch: {}", stderr(&out));
    let id: u64 = stdout(&out).trim().parse().unwrap();
    let state = p.controller.wait_done(id, LONG);
    assert_eq!(state, "COMPLETED", "{}", p.controller.field(id, "Reason"));
    let text = p.controller.output_of(id);
    for rank in 0..2 {
        let line = format!(
            "{rank}: marker=ysched test image rank={rank} on=gpu1{rank} uid={}",
            ana.uid
        );
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }
    assert!(text.contains("srun=0"), "{text}");
}

/// An image an administrator loaded by hand into the site's store, as the
/// admin guide says (`podman --root STORE --runroot STORE/run load`), is
/// used by jobs that name it; one that is not there is said to be missing
/// from the node's store, never refused for a registry that `localhost`
/// is not.
#[test]
fn an_image_an_administrator_loaded_by_hand_runs_jobs() {
    require_root!();
    if !containers_available(module_path!()) {
        return;
    }
    let s = Setup::new("");
    let ana = TestUser::create("cth");
    // The site's image, saved, removed from the store and loaded back by
    // hand.
    let archive = s.c.dir.path().join("byhand.tar");
    let by_hand = |args: &[&str]| {
        let out = podman(&s.store).args(args).output().unwrap();
        assert!(out.status.success(), "podman {args:?}: {}", stderr(&out));
    };
    by_hand(&["save", "-o", archive.to_str().unwrap(), IMAGE]);
    by_hand(&["rmi", IMAGE]);
    by_hand(&["load", "-i", archive.to_str().unwrap()]);
    let run = |image: &str| {
        let id = s.submit_as(
            &ana,
            &["--container-image", image, "--wrap", "cat /image-marker"],
        );
        (
            s.c.wait_done(id, LONG),
            s.c.field(id, "Reason"),
            s.c.output_of(id),
        )
    };
    let (state, reason, out) = run(IMAGE);
    assert_eq!(state, "COMPLETED", "{reason}");
    assert!(out.contains("ysched test image"), "{out}");
    let (state, reason, _) = run("localhost/never-loaded:1");
    assert_eq!(state, "FAILED");
    assert!(
        reason.contains("this node's store has none of that name")
            && !reason.contains("allowed_registries"),
        "{reason}"
    );
    let _ = &s.devices;
}
