//! Requests users make on a node. `ysbatch` there writes into the node's
//! spool as it would on the controller; the agent forwards each
//! submission to the controller with its sender's identity (the request
//! file's owner, as the kernel reports it: the same proof the controller
//! takes from its own spool), and writes the controller's answer where the
//! sender waits for it. A request is applied once whatever is sent again
//! (the controller records each by name), so one not answered is sent
//! again after a while and after every reconnection. Queries and control
//! requests (`ysqueue`, `yscancel`, `scontrol` there) are forwarded the
//! same way, with the sender's token if they gave one: the controller
//! decides what the node's word alone is worth (`daemon::forwarded`). A
//! query is answered at once, never recorded: one sent again is answered
//! again. A listing comes in parts, written into the sender's reply file
//! as they come, as ysctld streams its own; one cut short by a lost
//! connection ends with an error that says so, and is not asked again
//! (its first rows are already read).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::net::message::{FromNode, RowsEnd};
use crate::proto::{Reply, Request};
use crate::spool::{Inbound, ReplyStream, Spool};

/// A forwarded request not answered this long is sent again.
const ASK_AGAIN_AFTER: Duration = Duration::from_secs(10);

pub struct Requests {
    spool: Spool,
    /// Wakes the agent when a request arrives (`None`: the directory is
    /// looked at every second).
    inotify: Option<Inotify>,
    /// Forwarded and not answered yet: the sender's uid, and when sent.
    asked: HashMap<String, (u32, Instant)>,
    /// Listings being answered, a part at a time: where their rows go
    /// (`None`: the sender is gone, the rest is dropped).
    streams: HashMap<String, Option<ReplyStream>>,
    max_size: u64,
    node: String,
}

impl Requests {
    pub fn new(spool: Spool, max_size: u64, node: &str) -> Requests {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .and_then(|i| {
                i.add_watch(
                    &spool.incoming(),
                    AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_MOVED_TO,
                )?;
                Ok(i)
            })
            .map_err(|e| {
                tracing::warn!(target: "ysched::agent", "cannot watch {}: {e}; requests are looked for every second", spool.incoming().display());
            })
            .ok();
        Requests {
            spool,
            inotify,
            asked: HashMap::new(),
            streams: HashMap::new(),
            max_size,
            node: node.to_string(),
        }
    }

    /// What to poll for new requests.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(|i| i.as_fd())
    }

    /// The submissions to send the controller now: new ones, and those
    /// unanswered for a while. Everything else is answered here.
    pub fn take(&mut self) -> Vec<FromNode> {
        if let Some(i) = &self.inotify {
            // Only a wake-up: the directory is read whole below.
            while i.read_events().is_ok_and(|e| !e.is_empty()) {}
        }
        let names = match self.spool.list_incoming() {
            Ok(names) => names,
            Err(e) => {
                tracing::warn!(target: "ysched::agent", "cannot read {}: {e}", self.spool.incoming().display());
                return Vec::new();
            }
        };
        let now = Instant::now();
        let mut out = Vec::new();
        for name in names {
            let recent = self
                .asked
                .get(&name)
                .is_some_and(|(_, at)| now.duration_since(*at) < ASK_AGAIN_AFTER);
            if recent || self.streams.contains_key(&name) {
                continue;
            }
            if let Some(submit) = self.forwardable(&name) {
                out.push(submit);
            }
        }
        out
    }

    /// A request as a submission to forward, or `None` once answered here.
    fn forwardable(&mut self, name: &str) -> Option<FromNode> {
        match self.spool.read_request(name, self.max_size) {
            Inbound::Skip => None,
            Inbound::Bad { name, uid, reason } => {
                if let Some(uid) = uid {
                    self.spool
                        .write_reply(&name, uid, &Reply::Rejected { error: reason });
                }
                self.spool.discard(&name);
                None
            }
            Inbound::Request {
                name,
                uid,
                envelope,
            } => match envelope.request {
                Request::Submit(request) => {
                    let Some(user) = user_name(uid) else {
                        self.refuse(
                            &name,
                            uid,
                            format!("uid {uid} has no user name on {}", self.node),
                        );
                        return None;
                    };
                    self.asked.insert(name.clone(), (uid, Instant::now()));
                    Some(FromNode::Submit {
                        name,
                        uid,
                        user,
                        request,
                        token: envelope.token,
                    })
                }
                request => {
                    let Some(user) = user_name(uid) else {
                        self.refuse(
                            &name,
                            uid,
                            format!("uid {uid} has no user name on {}", self.node),
                        );
                        return None;
                    };
                    self.asked.insert(name.clone(), (uid, Instant::now()));
                    Some(FromNode::Forward {
                        name,
                        uid,
                        user,
                        request: Box::new(request),
                        token: envelope.token,
                    })
                }
            },
        }
    }

    fn refuse(&self, name: &str, uid: u32, error: String) {
        self.spool
            .write_reply(name, uid, &Reply::Rejected { error });
        self.spool.discard(name);
    }

    /// The controller's answer to request `name`: where its sender waits.
    pub fn answered(&mut self, name: &str, reply: &Reply) {
        let Some((uid, _)) = self.asked.remove(name) else {
            return;
        };
        self.spool.write_reply(name, uid, reply);
        self.spool.discard(name);
    }

    /// A part of the listing that answers request `name`: its rows go
    /// into the sender's reply file, and with the last part its end.
    pub fn answered_rows(
        &mut self,
        name: &str,
        now: i64,
        rows: &[Vec<String>],
        end: Option<&RowsEnd>,
    ) {
        let Some(&(uid, _)) = self.asked.get(name) else {
            return;
        };
        let spool = &self.spool;
        let stream = self
            .streams
            .entry(name.to_string())
            .or_insert_with(|| spool.open_stream(name, uid, now));
        let written = stream.as_mut().is_some_and(|s| {
            rows.iter()
                .try_for_each(|row| s.row(row))
                .and_then(|()| s.flush())
                .is_ok()
        });
        if !written {
            // The sender is gone, or its reply file is full: the rest is
            // dropped.
            *stream = None;
        }
        let Some(end) = end else { return };
        if let Some(stream) = self.streams.remove(name).flatten() {
            stream.end(end.error.as_deref());
        }
        self.asked.remove(name);
        self.spool.discard(name);
    }

    /// The connection is gone: what was asked is asked again on the next,
    /// but for listings cut short, which end saying so.
    pub fn disconnected(&mut self) {
        for (name, stream) in self.streams.drain() {
            if let Some(stream) = stream {
                stream.end(Some("the connection to the controller was lost during the answer: run the command again"));
            }
            self.spool.discard(&name);
        }
        self.asked.clear();
    }
}

fn user_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}
