//! Submissions made on a pool's node (`ysbatch` there), which its agent
//! forwards with the sender's uid and name, as the node's kernel reported
//! them: the controller trusts a certified node for who its users are, as
//! Slurm trusts its nodes' munge credentials. The user must be the same
//! here (name and uid); the submission is then judged and recorded as one
//! made here, once per request name, and answered after the commit.

use crate::db;
use crate::model::job::JobRequest;
use crate::net::message::ToNode;
use crate::proto::Reply;
use crate::spool::Ownership;

use super::error::DaemonError;
use super::state::{Daemon, Requester};

impl Daemon {
    /// Takes in request `name`, a submission node `node` forwarded.
    pub(super) fn node_submit(
        &mut self,
        node: &str,
        name: String,
        (uid, user): (u32, &str),
        request: JobRequest,
        now: i64,
    ) -> Result<(), DaemonError> {
        let reply = self.forwarded_reply(node, &name, (uid, user), request, now)?;
        let requester = Requester::Node {
            node: node.to_string(),
            name,
        };
        self.turn.replies.push((requester, reply));
        Ok(())
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
        if let Some((owner, reply)) = db::find_request(self.tx()?, &key)? {
            return if owner == uid {
                Ok(reply)
            } else {
                refuse("request name already used by another user".into())
            };
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
