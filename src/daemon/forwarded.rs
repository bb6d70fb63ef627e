//! Submissions made on a pool's node (`ysbatch` there), which its agent
//! forwards with the sender's uid and name, as the node's kernel reported
//! them, and the sender's signed token. The node's word is not enough:
//! root there could claim anyone, and root on one node gains nothing on
//! another. The token, which only the controller signs and only the user
//! holds, must name the same user, who must be the same user here (name
//! and uid); the submission is then judged and recorded as one made here,
//! once per request name, and answered after the commit.

use crate::model::job::JobRequest;
use crate::net::message::ToNode;
use crate::proto::Reply;
use crate::spool::Ownership;

use super::effects::{PoolRow, Row};
use super::error::DaemonError;
use super::requester::Proven;
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
        let reply = match self.proof_of(node, sender, now) {
            Proof::Vouched(why) => {
                tracing::warn!(target: "ysched::pool", "a submission from node {node} as {} refused: {why}", sender.user);
                Ok(Reply::Rejected {
                    error: format!(
                        "a submission made on node {node} needs your token ({why}): {HOW_TO_PROVE}"
                    ),
                })
            }
            Proof::Proven(_) => {
                self.forwarded_reply(node, &name, (sender.uid, sender.user), request, now)
            }
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

    /// How far the sender of a request node `node` passed on is proven
    /// to be the user the node names: by the user's token for this node
    /// (or, where the site trusts its nodes, by the node's word), or by
    /// the node's word alone.
    fn proof_of(&self, node: &str, sender: &Sender, now: i64) -> Proof {
        let used_as = crate::token::Audience::Node(node.to_string());
        let checked = sender.token.map(|t| self.check_token(t, &used_as, now));
        if self.core.config.pool.trust_nodes {
            return match checked {
                Some(Ok(claims)) if claims.sun == sender.user => Proof::Proven(Some(claims)),
                _ => Proof::Proven(None),
            };
        }
        let why = match checked {
            None => "no token was sent".to_string(),
            Some(Ok(claims)) if claims.sun == sender.user => return Proof::Proven(Some(claims)),
            Some(Ok(claims)) => format!("the token is {}'s, not {}'s", claims.sun, sender.user),
            Some(Err(e)) => e.to_string(),
        };
        Proof::Vouched(why)
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
        match self.core.users.get(uid) {
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
            self.write(Row::Pool(PoolRow::Submission {
                job: *job_id,
                node: node.to_string(),
            }))?;
        }
        self.write(Row::Request {
            key,
            uid,
            time: now,
            kind: "job".into(),
            reply: Box::new(reply.clone()),
        })?;
        Ok(reply)
    }

    /// Takes in request `name` (a query or a control request) that node
    /// `node` passed on. Proven (the sender's token, or a trusted node),
    /// it is theirs, by the command line's rules. On the node's word
    /// alone, a query is answered as to nobody in particular (no private
    /// field of any job, not even the sender's own, and nothing at all
    /// where `private_data = "jobs"`), and a change may touch only the
    /// sender's jobs that run on that node or were submitted there: root
    /// on a node, who can claim any user there, gains nothing it could
    /// not already do there.
    pub(super) fn node_request(
        &mut self,
        node: &str,
        name: String,
        sender: &Sender,
        request: crate::proto::Request,
        now: i64,
    ) -> Result<(), DaemonError> {
        use crate::proto::Request;
        let proof = self.proof_of(node, sender, now);
        match request {
            Request::Query(query) => {
                self.node_query(node, name, sender, &proof, query);
                Ok(())
            }
            Request::Submit(job) => self.node_submit(node, name, sender, *job, now),
            Request::Control(control) => {
                self.turn.channel = crate::proto::Channel::Node;
                let reply = self.node_control(node, &name, sender, &proof, control, now);
                self.turn.channel = crate::proto::Channel::Cli;
                let requester = Requester::Node {
                    node: node.to_string(),
                    name,
                };
                self.turn.replies.push((requester, reply?));
                Ok(())
            }
        }
    }

    /// Queues query `name` from `node`, answered over its link.
    fn node_query(
        &mut self,
        node: &str,
        name: String,
        sender: &Sender,
        proof: &Proof,
        query: crate::proto::Query,
    ) {
        let viewer = match proof {
            Proof::Proven(_) if self.same_user_here(sender) => {
                self.viewer(sender.uid, sender.user.to_string())
            }
            _ => vouched_viewer(node, sender.user, self.core.config.private_data),
        };
        let link = self
            .nodes
            .named(node)
            .and_then(|n| n.remote.as_ref())
            .map(|r| r.link.clone());
        let Some(link) = link else { return };
        let (to, reply_name) = (node.to_string(), name.clone());
        let answer: crate::query::NodeAnswer = Box::new(move |part| {
            let name = reply_name.clone();
            let whole = matches!(part, crate::query::NodePart::Whole(_));
            let message = match part {
                crate::query::NodePart::Whole(reply) => ToNode::Answer {
                    name,
                    reply: Box::new(reply),
                },
                crate::query::NodePart::Rows { now, rows, end } => ToNode::AnswerRows {
                    name,
                    now,
                    rows,
                    end: end.map(|error| crate::net::message::RowsEnd { error }),
                },
            };
            let Err(e) = link.send(&to, message) else {
                return;
            };
            tracing::debug!(target: "ysched::pool", "an answer to node {to} is lost: {e}");
            // A whole answer too large for a frame is refused, if the
            // node is still there (a listing's parts are far smaller).
            if whole {
                let refusal = ToNode::Answer {
                    name: reply_name.clone(),
                    reply: Box::new(Reply::Rejected {
                        error: format!("the answer could not be sent to node {to}: {e}; narrow the query, or run the command on the controller"),
                    }),
                };
                let _ = link.send(&to, refusal);
            }
        });
        let work = crate::query::Work::new(name, viewer, self.core.config.min_job_age_secs, query)
            .answering_node(answer);
        self.turn.node_queries.push(work);
    }

    /// The answer to control request `name` from `node`, applied once.
    fn node_control(
        &mut self,
        node: &str,
        name: &str,
        sender: &Sender,
        proof: &Proof,
        control: crate::proto::Control,
        now: i64,
    ) -> Result<Reply, DaemonError> {
        let refuse = |error: String| Ok(Reply::Rejected { error });
        if let Proof::Vouched(why) = proof {
            if !vouched_may(&control) {
                return refuse(format!(
                    "on node {node} without your token ({why}), only cancel, hold, release, update, requeue and checkpoint of your jobs submitted on or running on {node} are taken: {HOW_TO_PROVE}"
                ));
            }
        }
        if !self.same_user_here(sender) {
            return refuse(format!(
                "{} is not the same user on the controller as on {node}: the pool's servers must share their users (same names, same uids)",
                sender.user
            ));
        }
        let proven = match proof {
            Proof::Proven(Some(claims)) => Proven::Token(claims),
            Proof::Proven(None) | Proof::Vouched(_) => Proven::NodeWord,
        };
        // Not recorded (see `Daemon::handle`): it changes nothing and
        // its answer holds a step key. Only a proven sender gets here.
        if matches!(control, crate::proto::Control::Attach { .. }) {
            return self.control(control, (sender.uid, sender.user), proven, now);
        }
        let key = format!("{node}:{name}");
        if let Some(reply) = self.applied_before(&key, sender.uid)? {
            return Ok(reply);
        }
        let kind = crate::proto::Request::Control(control.clone()).kind();
        let join_line = matches!(control, crate::proto::Control::NodeAdd { .. });
        let reply = match proof {
            Proof::Proven(_) => self.control(control, (sender.uid, sender.user), proven, now)?,
            Proof::Vouched(why) => {
                let who = super::requester::Requester {
                    uid: sender.uid,
                    user: sender.user,
                    admin: false,
                    proven,
                    channel: crate::proto::Channel::Node,
                    vouched_by: Some((node, why)),
                };
                self.control_by(control, &who, now)?
            }
        };
        let kept = reply.kept_for_retry(join_line);
        self.write(Row::Request {
            key,
            uid: sender.uid,
            time: now,
            kind: kind.to_string(),
            reply: Box::new(kept),
        })?;
        Ok(reply)
    }

    /// Whether the sender a node names is the same user here (name and
    /// uid).
    fn same_user_here(&mut self, sender: &Sender) -> bool {
        self.core
            .users
            .get(sender.uid)
            .is_some_and(|u| u.name == sender.user)
    }
}

/// How far a request a node passed on is proven to be its sender's.
enum Proof {
    /// By the sender's token for that node (its claims), or by a node the
    /// site trusts (`None`, unless a token came too).
    Proven(Option<crate::token::Claims>),
    /// By the node's word alone; why the token did not prove more.
    Vouched(String),
}

/// What a user is told to do for the token a node's word does not
/// replace.
const HOW_TO_PROVE: &str = "run ystoken --save on the controller (a token for the pool's nodes, kept in ~/.config/ysched/token where the commands find it), or export the SLURM_JWT=... that ystoken --audience node prints";

/// The changes a node's word alone may ask for (of jobs it runs or took
/// in, see [`Daemon::control_by`]): a job's steps among them, which
/// `srun` records from where the job runs.
fn vouched_may(control: &crate::proto::Control) -> bool {
    use crate::proto::Control;
    matches!(
        control,
        Control::Cancel { .. }
            | Control::Hold { .. }
            | Control::Release { .. }
            | Control::Update { .. }
            | Control::Requeue { .. }
            | Control::Checkpoint { .. }
            | Control::StepBegin { .. }
            | Control::StepEnd { .. }
            | Control::CancelStep { .. }
    )
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
