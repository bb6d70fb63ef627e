//! The spool directory and its protocol.
//!
//! ```text
//! SPOOL/incoming/   1733  drop box: requests, written as .NAME.tmp, fsync'd, renamed to NAME
//! SPOOL/replies/    1733  NAME, created (0600) by the requester before it sends, filled by the daemon
//! SPOOL/jobs/<id>/  0711  the job's spec, script, supervisor state (root's, but for the script)
//! SPOOL/ysched.db   0600  the daemon's SQLite database
//! SPOOL/ysctld.pid  0644  the daemon's pid, flock'ed while it runs
//! SPOOL/ysctld.sock 0666  the running daemon's socket (personal mode: 0600)
//! SPOOL/reserve     0644  room kept for recording jobs when the filesystem fills (space.rs)
//! ```
//!
//! The requester makes its reply file itself and watches it with inotify, so
//! it sleeps until the daemon closes the file after writing — no polling on
//! either side. The daemon trusts nothing in a request for identity: the uid
//! is the request file's owner as the kernel reports it, and the reply file
//! is written only if that same uid owns it.
//!
//! A running daemon also takes state changes on `SPOOL/ysctld.sock`, the
//! same request in fewer steps; [`socket`] says how, and why nothing is
//! lost when it fails.

//!
//! The files: the directory and the daemon's side ([`dir`]), the request
//! format ([`request`]), the requester's side ([`client`]), the socket
//! ([`socket`]), room on the filesystem ([`space`]).

pub mod client;
pub mod dir;
pub mod error;
pub mod request;
pub mod socket;
pub mod space;

pub use client::{Durability, RowStream, SentRequest};
pub use dir::{
    age_of_name, sync_dir, unique_name, valid_name, DaemonLock, DaemonState, Ownership,
    ReplyStream, Spool,
};
pub use error::SpoolError;
pub use request::{parse_request, Inbound};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Envelope, Query, Reply, Request};
    use crate::report::table::RowTable;
    use std::fs;
    use std::time::Duration;

    #[test]
    fn streamed_rows_keep_their_cells_in_one_table() {
        let cells = ["17_[3-9%2]", "", "tab\there \"quoted\"", "naïve ✓", "\\"];
        let line = serde_json::to_vec(&cells).unwrap();
        let mut table = RowTable::default();
        table.push_json(&line).unwrap();
        table.push_json(b"[]").unwrap();
        table.push_json(&line).unwrap();
        assert_eq!(table.len(), 3);
        assert_eq!(table.row(0).cells().collect::<Vec<_>>(), cells);
        assert_eq!(table.row(0).cell(4), "\\");
        assert_eq!(table.row(0).cell(9), "", "past the last cell");
        assert_eq!(table.row(1).cells().count(), 0);
        assert_eq!(table.row(1).cell(0), "", "an empty row has no cells");
        assert_eq!(table.row(2).cells().collect::<Vec<_>>(), cells);
        let mut same = RowTable::default();
        same.push_cells(&cells);
        same.push_cells::<&str>(&[]);
        same.push_cells(&cells);
        assert_eq!(table, same);
        for bad in [
            &b"[1, 2]"[..],
            b"[\"a\"",
            b"{\"a\": 1}",
            b"[\"a\"] x",
            b"[\"ok\", 3]",
            b"[\"\xff\"]",
        ] {
            assert!(
                table.push_json(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert_eq!(table, same, "a bad line leaves nothing behind");
        }
    }

    #[test]
    fn names() {
        let n = unique_name("job");
        assert!(valid_name(&n), "{n}");
        assert_ne!(n, unique_name("job"));
        assert!(!valid_name(".hidden"));
        assert!(!valid_name("a/b"));
        assert!(!valid_name("a\nb"));
        assert!(!valid_name(""));
    }

    #[test]
    fn request_round_trip_and_reply() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        spool.prepare(Ownership::Personal).unwrap();
        let envelope = Envelope::new(Request::Query(Query::Job(crate::array::JobRef::Id(7))));
        let mut sent = spool.send(&envelope, Durability::OnDemand).unwrap();
        let names = spool.list_incoming().unwrap();
        assert_eq!(names, vec![sent.name().to_string()]);
        let uid = nix::unistd::geteuid().as_raw();
        match spool.read_request(&names[0], 1 << 20) {
            Inbound::Request {
                uid: u,
                envelope: e,
                ..
            } => {
                assert_eq!(u, uid);
                assert_eq!(*e, envelope);
            }
            other => panic!("{other:?}"),
        }
        assert!(spool.write_reply(
            sent.name(),
            uid,
            &Reply::Submitted {
                job_id: 9,
                warning: None
            }
        ));
        assert!(
            !spool.write_reply(
                sent.name(),
                uid + 1,
                &Reply::Submitted {
                    job_id: 9,
                    warning: None
                }
            ),
            "wrong owner"
        );
        let reply = sent.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(
            reply,
            Some(Reply::Submitted {
                job_id: 9,
                warning: None
            })
        );
        let reply_path = spool.replies().join(sent.name());
        drop(sent);
        assert!(!reply_path.exists(), "the client removes its reply file");
    }

    #[test]
    fn hostile_files_are_refused_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path().join("spool"));
        spool.prepare(Ownership::Personal).unwrap();
        let inc = spool.incoming();
        let reason = |name: &str| match spool.read_request(name, 64) {
            Inbound::Bad { reason, .. } => reason,
            other => panic!("{name}: {other:?}"),
        };
        std::os::unix::fs::symlink("/etc/passwd", inc.join("link")).unwrap();
        assert!(reason("link").contains("symbolic link"));
        fs::write(inc.join("big"), vec![b' '; 100]).unwrap();
        assert!(reason("big").contains("over the limit of 64"));
        fs::write(inc.join("bin"), [0xff, 0xfe, b'{']).unwrap();
        assert!(reason("bin").contains("not valid UTF-8"));
        fs::write(inc.join("trunc"), b"{\"version\":1,\"request\":{").unwrap();
        assert!(reason("trunc").contains("truncated"));
        fs::write(inc.join("v9"), b"{\"version\":9}").unwrap();
        assert!(reason("v9").contains("protocol version 9"));
        fs::write(inc.join("two"), b"{}").unwrap();
        fs::hard_link(inc.join("two"), inc.join("two-b")).unwrap();
        assert!(reason("two").contains("2 hard links"));
        nix::unistd::mkfifo(
            &inc.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert!(reason("fifo").contains("FIFO"));
        fs::create_dir(inc.join("dir")).unwrap();
        assert!(reason("dir").contains("directory"));
        spool.discard("dir");
        assert!(!inc.join("dir").exists());
        assert!(matches!(spool.read_request("absent", 64), Inbound::Skip));
        assert!(matches!(spool.read_request(".x.tmp", 64), Inbound::Skip));
    }

    #[test]
    fn one_daemon_per_spool() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        spool.prepare(Ownership::Personal).unwrap();
        assert_eq!(spool.daemon_state(), DaemonState::Stopped);
        let lock = spool.lock_daemon().unwrap();
        assert_eq!(spool.daemon_state(), DaemonState::Running);
        assert!(matches!(
            spool.lock_daemon(),
            Err(SpoolError::AlreadyRunning { .. })
        ));
        drop(lock);
        assert_eq!(spool.daemon_state(), DaemonState::Stopped);
    }
}
