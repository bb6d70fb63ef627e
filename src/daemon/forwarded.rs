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
