//! Where jobs land: GPU groups (NVLink / PCIe switch), `--constraint` on
//! GPU memory and features, and GPUs shared in shards.

use crate::common;

use std::time::Duration;

use crate::common::{stderr, stdout, Cluster};

const LONG: Duration = Duration::from_secs(20);

fn gpus_of(c: &Cluster, id: u64) -> Vec<u64> {
    let q: serde_json::Value =
        serde_json::from_str(&stdout(&c.run("ysqueue", &["--json"]))).unwrap();
    q["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .map(|j| {
            j["gpus_alloc"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_u64().unwrap())
                .collect()
        })
        .unwrap_or_else(|| panic!("job {id} not in the queue: {q}"))
}

const GROUPED: &str = "[[gpus]]\ntype = \"a100\"\ncount = 8\nmemory = \"80GiB\"\ngroup_size = 4\nfeatures = [\"nvlink\"]\n\
                       [[gpus]]\ntype = \"t4\"\ncount = 2\nmemory = \"16GiB\"\nshards = 4\n";

#[test]
fn jobs_land_in_one_group_and_constraints_choose_the_card() {
    let mut c = Cluster::with_gpus("", GROUPED);
    c.start();
    c.script("sleep.sh", "#!/bin/sh\nsleep 300\n");
    let one = c.submit(&["--gpus", "a100:1", "sleep.sh"]);
    c.wait_state(one, "RUNNING", LONG);
    assert_eq!(gpus_of(&c, one), vec![0]);
    // Four: the untouched group, not GPUs 1-4 across both.
    let four = c.submit(&["--gpus", "a100:4", "sleep.sh"]);
    c.wait_state(four, "RUNNING", LONG);
    assert_eq!(gpus_of(&c, four), vec![4, 5, 6, 7]);
    // One more: beside the first, in the group already in use.
    let small = c.submit(&["--gpus", "1", "-C", "nvlink", "sleep.sh"]);
    c.wait_state(small, "RUNNING", LONG);
    assert_eq!(gpus_of(&c, small), vec![1]);
    // A memory constraint leaves out the 16 GiB cards.
    let big = c.submit(&["--gpus", "1", "--constraint", "gpumem>=40G", "sleep.sh"]);
    c.wait_state(big, "RUNNING", LONG);
    assert_eq!(gpus_of(&c, big), vec![2]);
    let show = stdout(&c.run("yscontrol", &["show", "job", &big.to_string()]));
    assert!(show.contains("Features=gpumem>=40G"), "{show}");

    // What no GPU here has is refused at submit, naming what there is.
    let out = c.run(
        "ysbatch",
        &["--gpus", "1", "-C", "gpumem>=100G", "sleep.sh"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("--constraint 'gpumem>=100G'") && e.contains("a100 x8 (80G, nvlink)"),
        "{e}"
    );
    let out = c.run("ysbatch", &["--gpus", "2", "-C", "nvlink|sxm", "sleep.sh"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("'nvlink|sxm' is not understood"),
        "{}",
        stderr(&out)
    );
    let out = c.run("ysbatch", &["-C", "nvlink", "sleep.sh"]);
    assert!(stderr(&out).contains("asks for none"), "{}", stderr(&out));
    c.run("yscancel", &["-u", "root"]);
}

#[test]
fn shard_jobs_share_a_card_and_whole_gpu_jobs_wait_for_it() {
    let mut c = Cluster::with_gpus("", GROUPED);
    c.start();
    c.script(
        "shard.sh",
        "#!/bin/sh\necho \"gpus=$SLURM_JOB_GPUS shards=$SLURM_SHARDS_ON_NODE\"\nsleep 300\n",
    );
    let a = c.submit(&["--gpus", "shard:t4:2", "shard.sh"]);
    let b = c.submit(&["--gres", "shard:1", "shard.sh"]);
    c.wait_state(a, "RUNNING", LONG);
    c.wait_state(b, "RUNNING", LONG);
    assert_eq!(gpus_of(&c, a), vec![8]);
    assert_eq!(gpus_of(&c, b), vec![8], "onto the card already shared");
    common::wait_for("the shard job's output", LONG, || {
        c.output_of(a).contains("shards=2")
    });
    assert!(c.output_of(a).starts_with("gpus=8 "), "{}", c.output_of(a));
    // The other t4 is whole; a 2-t4 job must wait for the shared one.
    let whole = c.submit(&["--gpus", "t4:2", "shard.sh"]);
    common::wait_for("the whole-GPU job to wait", LONG, || {
        let q = stdout(&c.run("ysqueue", &["-h", "-j", &whole.to_string(), "-o", "%r"]));
        q.trim() == "Resources"
    });
    let q = stdout(&c.run("ysqueue", &["-h", "-j", &a.to_string(), "-o", "%b"]));
    assert_eq!(q.trim(), "gres/shard:t4:2");

    // More shards than a card has, or shards where none are declared.
    let out = c.run("ysbatch", &["--gpus", "shard:5", "shard.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("4 shards each"), "{}", stderr(&out));
    let out = c.run("ysbatch", &["--gpus", "shard:a100:1", "shard.sh"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no GPU of type a100 is shared in shards"),
        "{}",
        stderr(&out)
    );

    // The shard jobs end: the card is whole again and the waiting job runs.
    for id in [a, b] {
        c.run("yscancel", &[&id.to_string()]);
    }
    c.wait_state(whole, "RUNNING", LONG);
    assert_eq!(gpus_of(&c, whole), vec![8, 9]);
    c.run("yscancel", &["-u", "root"]);
}
