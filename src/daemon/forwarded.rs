//! Submissions made on a pool's node (`ysbatch` there), which its agent
//! forwards with the sender's uid and name, as the node's kernel reported
//! them, and the sender's signed token. The node's word is not enough:
//! root there could claim anyone, and root on one node gains nothing on
//! another. The token, which only the controller signs and only the user
//! holds, must name the same user, who must be the same user here (name
//! and uid); the submission is then judged and recorded as one made here,
//! once per request name, and answered after the commit.

use crate::db;
use crate::model::job::JobRequest;
use crate::net::message::ToNode;
use crate::proto::Reply;
use crate::spool::Ownership;

use super::error::DaemonError;
use super::state::{Daemon, Requester};

/// Who a node says sent a submission, and the sender's own proof.
pub(super) struct Sender<'a> {
    pub(super) uid: u32,
    pub(super) user: &'a str,
    pub(super) token: Option<&'a str>,
}

impl Daemon {
    /// Takes in request `name`, a submission node `node` forwarded.
    pub(super) fn node_submit(
        &mut self,
        node: &str,
        name: String,
        sender: &Sender,
        request: JobRequest,
        now: i64,
    ) -> Result<(), DaemonError> {
        self.turn.channel = crate::proto::Channel::Node;
        let reply = match self.proven(node, sender, now) {
            Some(refusal) => Ok(refusal),
            None => self.forwarded_reply(node, &name, (sender.uid, sender.user), request, now),
        };
        self.turn.channel = crate::proto::Channel::Cli;
        let reply = reply?;
        let requester = Requester::Node {
            node: node.to_string(),
            name,
        };
        self.turn.replies.push((requester, reply));
        Ok(())
    }

    /// The refusal of a sender whose token does not prove it is the user
    /// the node names, if it does not.
    fn proven(&self, node: &str, sender: &Sender, now: i64) -> Option<Reply> {
        let how = "run ystoken on the controller (or scontrol token there) and export the SLURM_JWT=... it prints, then ysbatch again";
        let why = match sender.token.map(|t| self.check_token(t, now)) {
            None => format!("a submission made on node {node} needs your token: {how}"),
            Some(Ok(claims)) if claims.sun == sender.user => return None,
            Some(Ok(claims)) => format!(
                "the token is {}'s, not {}'s: {how}",
                claims.sun, sender.user
            ),
            Some(Err(e)) => format!("{e}: {how}"),
        };
        tracing::warn!(target: "ysched::pool", "a submission from node {node} as {} refused: {why}", sender.user);
        Some(Reply::Rejected { error: why })
    }

    fn forwarded_reply(
        &mut self,
        node: &str,
        name: &str,
        (uid, user): (u32, &str),
        request: JobRequest,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let refuse = |error: String| Ok(Reply::Rejected { error });
        if !crate::spool::valid_name(name) {
            return refuse(format!(
                "request name '{}' is not a spool name",
                name.escape_debug()
            ));
        }
        if self.ownership == Ownership::Personal && uid != nix::unistd::geteuid().as_raw() {
            return refuse(
                "this ysctld runs in personal mode and takes requests from its own user only"
                    .into(),
            );
        }
        match self.users.get(uid) {
            Some(here) if here.name == user => {}
            Some(here) => {
                return refuse(format!(
                    "uid {uid} is {user} on {node} but {} on the controller: the pool's servers must share their users (same names, same uids)",
                    here.name
                ))
            }
            None => {
                return refuse(format!(
                    "{user} (uid {uid} on {node}) is no user on the controller: the pool's servers must share their users"
                ))
            }
        }
        // Sent again until answered: applied once.
        let key = format!("{node}:{name}");
        if let Some(reply) = self.applied_before(&key, uid)? {
            return Ok(reply);
        }
        let reply = self.submit(request, uid, user, now)?;
        if let Reply::Submitted { job_id, .. } = &reply {
            tracing::info!(target: "ysched::pool", "job {job_id} submitted by {user} on node {node}");
        }
        db::record_request(self.tx()?, &key, uid, now, "job", &reply)?;
        Ok(reply)
    }

    /// Takes in request `name` (a query or a control request) that node
    /// `node` passed on. With the sender's token, it is theirs, by the
    /// command line's rules. Without one, the node's word is taken for
    /// what any user may see: a query is answered as to nobody in
    /// particular (no private field of any job, not even the sender's
    /// own, and nothing at all where `private_data = "jobs"`), so that
    /// root on a node, who can claim any user there, learns nothing it
    /// could not as a user; a change needs the token.
    pub(super) fn node_request(
        &mut self,
        node: &str,
        name: String,
        sender: &Sender,
        request: crate::proto::Request,
        now: i64,
    ) -> Result<(), DaemonError> {
        use crate::proto::Request;
        let proven = sender.token.is_some() && self.proven(node, sender, now).is_none();
        let same_here = self
            .users
            .get(sender.uid)
            .is_some_and(|u| u.name == sender.user);
        match request {
            Request::Query(query) => {
                let viewer = if proven && same_here {
                    self.viewer(sender.uid, sender.user.to_string())
                } else {
                    vouched_viewer(node, sender.user, self.config.private_data)
                };
                let link = self
                    .nodes
                    .named(node)
                    .and_then(|n| n.remote.as_ref())
                    .map(|r| r.link.clone());
                let Some(link) = link else { return Ok(()) };
                let (to, reply_name) = (node.to_string(), name.clone());
                let answer: crate::query::NodeAnswer = Box::new(move |reply| {
                    let answer = ToNode::Answer {
                        name: reply_name,
                        reply: Box::new(reply),
                    };
                    if let Err(e) = link.send(&to, answer) {
                        tracing::debug!(target: "ysched::pool", "an answer to node {to} is lost: {e}");
                    }
                });
                let work =
                    crate::query::Work::new(name, viewer, self.config.min_job_age_secs, query)
                        .answering_node(answer);
                self.turn.node_queries.push(work);
                Ok(())
            }
            Request::Submit(job) => self.node_submit(node, name, sender, *job, now),
            Request::Control(control) => {
                self.turn.channel = crate::proto::Channel::Node;
                let reply = match self.proven(node, sender, now) {
                    Some(refusal) => refusal,
                    None if !same_here => Reply::Rejected {
                        error: format!(
                            "{} is not the same user on the controller as on {node}",
                            sender.user
                        ),
                    },
                    None => {
                        let key = format!("{node}:{name}");
                        match self.applied_before(&key, sender.uid)? {
                            Some(reply) => reply,
                            None => {
                                let kind = Request::Control(control.clone()).kind();
                                let reply = self.control(control, sender.uid, sender.user, now)?;
                                db::record_request(
                                    self.tx()?,
                                    &key,
                                    sender.uid,
                                    now,
                                    kind,
                                    &reply,
                                )?;
                                reply
                            }
                        }
                    }
                };
                self.turn.channel = crate::proto::Channel::Cli;
                self.turn.replies.push((
                    Requester::Node {
                        node: node.to_string(),
                        name,
                    },
                    reply,
                ));
                Ok(())
            }
        }
    }

    /// Sends node `node` the answer to its request `name` (after the
    /// commit). A node gone since asks again when it is back.
    pub(super) fn answer_node(&self, node: &str, name: String, reply: Reply) {
        let Some(remote) = self.nodes.named(node).and_then(|n| n.remote.as_ref()) else {
            return;
        };
        let answer = ToNode::Answer {
            name,
            reply: Box::new(reply),
        };
        if let Err(e) = remote.link.send(node, answer) {
            tracing::debug!(target: "ysched::pool", "the answer to node {node} waits for it: {e}");
        }
    }
}

/// Whom a node's word alone makes a query's viewer: nobody in
/// particular (see [`Daemon::node_request`]).
fn vouched_viewer(
    node: &str,
    user: &str,
    privacy: crate::config::PrivateData,
) -> crate::query::Viewer {
    crate::query::Viewer {
        uid: u32::MAX,
        user: format!("{user}@{node}"),
        admin: false,
        coordinated: Default::default(),
        privacy,
    }
}
