//! Joining a pool, once: the node makes its key, reaches the controller,
//! trusts it by the authority's fingerprint from the join line, hands
//! over the one-time token with a request for a certificate, and keeps
//! what it is given. The users the controller names are checked here: a
//! user with another uid on this node will have jobs refused here.

use std::time::{Duration, Instant};

use super::error::AgentError;
use super::identity::{self, Identity};
use super::session::connect_any;
use crate::config::Config;
use crate::net::frame::{decode, encode};
use crate::net::message::{Envelope, FromNode, ToNode, PROTOCOL};
use crate::net::{pki, tls};

/// What `yscontrol node add` printed.
#[derive(Clone, Debug)]
pub struct JoinLine {
    pub controller: String,
    pub token: String,
    pub authority: String,
}

/// Joins the pool the line names; the node's identity, kept in its state
/// directory. Warnings about users go to `warn`.
pub fn join(
    config: &Config,
    line: &JoinLine,
    warn: &mut dyn FnMut(String),
) -> Result<Identity, AgentError> {
    let dir = identity::dir_of(&config.spool_dir);
    if identity::joined(&dir) {
        return Err(AgentError::AlreadyJoined(dir));
    }
    let (key_pem, request_pem) = pki::new_request(&config.node_name)?;
    let (_, mut conn) = connect_any(&line.controller, 0, tls::join_config(&line.authority)?)?;
    let envelope = Envelope {
        protocol: PROTOCOL,
        epoch: 0,
        incarnation: 0,
        body: FromNode::Join {
            node: config.node_name.clone(),
            token: line.token.clone(),
            request_pem,
        },
    };
    conn.send(&encode(&envelope)?)?;
    let answer = conn
        .wait_frame(Instant::now() + Duration::from_secs(30))
        .map_err(|e| AgentError::Unreachable {
            address: line.controller.clone(),
            why: e.to_string(),
        })?;
    let answer: Envelope<ToNode> = decode(&answer)?;
    let (certificate_pem, authority_pem, users) = match answer.body {
        ToNode::Joined {
            certificate_pem,
            authority_pem,
            users,
        } => (certificate_pem, authority_pem, users),
        ToNode::Refused { reason } => return Err(AgentError::Refused(reason)),
        other => return Err(AgentError::Unexpected(format!("{other:?}"))),
    };
    for (name, uid) in users {
        if let Ok(Some(here)) = nix::unistd::User::from_name(&name) {
            if here.uid.as_raw() != uid {
                warn(format!(
                    "user {name} is uid {} on this node and uid {uid} on the controller: their jobs will be refused here until the uids agree",
                    here.uid
                ));
            }
        }
    }
    let identity = Identity {
        key_pem,
        certificate_pem,
        authority_pem,
        controller: line.controller.clone(),
    };
    identity::save(&dir, &identity)?;
    Ok(identity)
}
