//! `yscontrol update`: users lower what their jobs have, admins also raise
//! it; everything else is refused with the reason.

use crate::common;

use crate::common::{stderr, stdout, Cluster, TestUser};

fn field(c: &Cluster, id: u64, format: &str) -> String {
    stdout(&c.run("ysqueue", &["-h", "-j", &id.to_string(), "-o", format]))
        .trim()
        .to_string()
}

#[test]
fn users_lower_and_admins_raise() {
    if !common::is_root() {
        common::skip(module_path!(), "needs root to create users");
        return;
    }
    let alice = TestUser::create("upd");
    let c = Cluster::started("cgroups = \"off\"\n");
    let out = c.run_as(
        &alice.name,
        "ysbatch",
        &[
            "--parsable",
            "-H",
            "-q",
            "high",
            "-t",
            "2:00:00",
            "--wrap",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    let update = |who: &str, words: &[&str]| {
        let args: Vec<&str> = ["update"]
            .iter()
            .copied()
            .chain(words.iter().copied())
            .collect();
        if who == "root" {
            c.run("yscontrol", &args)
        } else {
            c.run_as(who, "yscontrol", &args)
        }
    };

    // Lowering: the user may.
    let out = update(&alice.name, &[&id, "qos=low", "TimeLimit=30:00"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(field(&c, id.parse().unwrap(), "%q %l"), "low 30:00");
    let priority: i64 = field(&c, id.parse().unwrap(), "%Q").parse().unwrap();
    let lower = (priority / 2).to_string();
    let out = update(
        &alice.name,
        &[&format!("JobId={id}"), &format!("priority={lower}")],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(field(&c, id.parse().unwrap(), "%Q"), lower);

    // Raising: refused, with why; nothing changes.
    for (words, why) in [
        (vec!["qos=high"], "only admins may raise"),
        (vec!["timelimit=1:00:00"], "only admins may raise"),
        (vec!["priority=999999"], "only admins may raise"),
        (
            vec!["qos=low", "timelimit=2:00:00"],
            "only admins may raise",
        ),
    ] {
        let mut args = vec![id.as_str()];
        args.extend(words.iter().copied());
        let out = update(&alice.name, &args);
        assert_eq!(out.status.code(), Some(1), "{words:?}");
        assert!(stderr(&out).contains(why), "{words:?}: {}", stderr(&out));
    }
    assert_eq!(field(&c, id.parse().unwrap(), "%q %l"), "low 30:00");

    // Bad input is a usage error.
    for bad in ["nice=3", "priority=-1", "timelimit=soon"] {
        assert_eq!(
            update(&alice.name, &[&id, bad]).status.code(),
            Some(2),
            "{bad}"
        );
    }
    let out = update(&alice.name, &[&id, "qos=gold"]);
    assert!(
        stderr(&out).contains("unknown QoS 'gold'"),
        "{}",
        stderr(&out)
    );

    // An admin may raise, and it is audited.
    let out = update(
        "root",
        &[&id, "qos=critical", "timelimit=4:00:00", "priority=999999"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        field(&c, id.parse().unwrap(), "%q %l %Q"),
        "critical 4:00:00 999999"
    );
    let audit = stdout(&c.run("yscontrol", &["show", "audit"]));
    assert!(audit.contains(&format!("root update job={id}")), "{audit}");
    c.run("yscancel", &[&id]);
}
