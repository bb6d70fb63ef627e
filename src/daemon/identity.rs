//! Who a request is from. A command's request is its sender's, as the
//! kernel says (the socket's peer, the spool file's owner). A request
//! carrying a token (`yswebd` asking for a user of the API or the portal)
//! is the user the token names, whoever passed it on: only the
//! controller signs tokens, and only their user holds them. Either way
//! the request then meets exactly the rules of the command line; what the
//! web changes is audited with its channel.

use crate::proto::{Channel, Envelope, Reply};
use crate::spool::Ownership;

use super::error::DaemonError;
use super::state::Daemon;

/// The user a request acts as, and how it came.
pub(super) struct Identity {
    pub(super) uid: u32,
    pub(super) user: String,
    pub(super) channel: Channel,
    /// The token that proved it, if one did (the kernel's word otherwise).
    pub(super) token: Option<crate::token::Claims>,
}

impl Daemon {
    /// Who sent `envelope` (from `sender`'s uid), or the refusal.
    pub(super) fn identify(
        &mut self,
        sender: u32,
        envelope: &Envelope,
        now: i64,
    ) -> Result<Identity, Reply> {
        let refuse = |error: String| Reply::Rejected { error };
        let (uid, channel, proof) = match &envelope.token {
            None => (sender, Channel::Cli, None),
            Some(token) => {
                let unauthenticated = |error: String| Reply::Unauthenticated { error };
                let used_as = match envelope.channel {
                    Some(Channel::Portal) => crate::token::Audience::Portal,
                    _ => crate::token::Audience::Rest,
                };
                let claims = self
                    .check_token(token, &used_as, now)
                    .map_err(|e| unauthenticated(e.to_string()))?;
                let uid = nix::unistd::User::from_name(&claims.sun)
                    .ok()
                    .flatten()
                    .map(|u| u.uid.as_raw())
                    .ok_or_else(|| {
                        unauthenticated(format!(
                            "the token names {}, who is no user on this server",
                            claims.sun
                        ))
                    })?;
                let channel = match envelope.channel {
                    Some(Channel::Portal) => Channel::Portal,
                    _ => Channel::Rest,
                };
                (uid, channel, Some(claims))
            }
        };
        if self.ownership == Ownership::Personal && uid != nix::unistd::geteuid().as_raw() {
            return Err(refuse(
                "this ysctld runs in personal mode and takes requests from its own user only"
                    .into(),
            ));
        }
        let user = match self.core.users.get(uid) {
            Some(u) => u.name.clone(),
            None => return Err(refuse(format!("uid {uid} has no user name on this server"))),
        };
        Ok(Identity {
            uid,
            user,
            channel,
            token: proof,
        })
    }

    /// Records in the audit log a change asked for through the web with a
    /// token that is not taken (forged, expired, foreign), a few a minute:
    /// whoever sends them learns nothing, and the table does not grow
    /// without bound.
    pub(super) fn audit_unauthenticated(
        &mut self,
        envelope: &Envelope,
        refusal: &Reply,
        now: i64,
    ) -> Result<(), DaemonError> {
        use crate::proto::Request;
        let (Reply::Unauthenticated { error }, Some(_)) = (refusal, &envelope.token) else {
            return Ok(());
        };
        let action = match &envelope.request {
            Request::Query(_) => return Ok(()),
            Request::Control(c) => c.action(),
            Request::Submit(_) => "submit",
        };
        let more = match self.unauthenticated.record((), std::time::Instant::now()) {
            super::refusals::Recorded::No => return Ok(()),
            super::refusals::Recorded::Yes { dropped: 0 } => String::new(),
            super::refusals::Recorded::Yes { dropped } => {
                format!(" ({dropped} more in the minute before were not recorded)")
            }
        };
        let channel = match envelope.channel {
            Some(Channel::Portal) => Channel::Portal,
            _ => Channel::Rest,
        };
        let before = std::mem::replace(&mut self.turn.channel, channel);
        let audited = self.audit(now, "-", action, None, &format!("refused: {error}{more}"));
        self.turn.channel = before;
        audited
    }

    /// Records in the audit log a change asked for through the web.
    pub(super) fn audit_web(
        &mut self,
        now: i64,
        user: &str,
        action: &str,
        reply: &Reply,
    ) -> Result<(), DaemonError> {
        let (job, detail) = match reply {
            Reply::Submitted { job_id, .. } => (Some(*job_id), format!("job {job_id} submitted")),
            Reply::Rejected { error } => (None, format!("refused: {error}")),
            Reply::Control { outcomes, .. } => {
                let each: Vec<String> = outcomes
                    .iter()
                    .map(|o| match &o.error {
                        None => format!("{}: done", o.job_id),
                        Some(e) => format!("{}: {e}", o.job_id),
                    })
                    .collect();
                let job = (outcomes.len() == 1).then(|| outcomes[0].job_id);
                (job, each.join("; "))
            }
            // Audited where it was made.
            Reply::Token { .. } => return Ok(()),
            _ => (None, String::new()),
        };
        self.audit(now, user, action, job, &detail)
    }
}
