//! The format of a request in the drop box and of a streamed reply: what
//! the daemon accepts as a request file, and why it refuses one.

use crate::proto::{Envelope, PROTOCOL_VERSION};

/// How a streamed reply begins.
pub(crate) const STREAM_HEADER: &str = "{\"stream\":";

#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct StreamHeader {
    pub stream: String,
    pub now: i64,
}

/// What the daemon found under one name in `incoming/`.
#[derive(Debug)]
pub enum Inbound {
    Request {
        name: String,
        uid: u32,
        envelope: Box<Envelope>,
    },
    /// A file that cannot be a request; it is removed and, where its owner
    /// made a reply file, answered with the reason.
    Bad {
        name: String,
        uid: Option<u32>,
        reason: String,
    },
    /// Nothing to do: it vanished, or is a client's temporary file.
    Skip,
}

/// Reads a request's envelope from its bytes, however it came (a spool file
/// or the daemon's socket), sent by `sender` as the kernel reports it.
pub fn parse_request(name: &str, sender: u32, body: &[u8], max_size: u64) -> Inbound {
    let uid = Some(sender);
    let bad = |reason: String, uid: Option<u32>| Inbound::Bad {
        name: name.to_string(),
        uid,
        reason,
    };
    if body.len() as u64 > max_size {
        return bad(
            format!(
                "request is {} bytes, over the limit of {max_size} (max_spool_file)",
                body.len()
            ),
            uid,
        );
    }
    let text = match std::str::from_utf8(body) {
        Ok(t) => t,
        Err(e) => {
            return bad(
                format!("request is not valid UTF-8 (at byte {})", e.valid_up_to()),
                uid,
            )
        }
    };
    // Check the version first, so an old or new client gets a clear answer.
    let version = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("version").and_then(|v| v.as_u64()));
    if let Some(v) = version {
        if v != PROTOCOL_VERSION as u64 {
            return bad(
                    format!("request uses protocol version {v}; this ysctld speaks version {PROTOCOL_VERSION} (mismatched ysched versions?)"),
                    uid,
                );
        }
    }
    match serde_json::from_str::<Envelope>(text) {
        Ok(envelope) => Inbound::Request {
            name: name.to_string(),
            uid: sender,
            envelope: Box::new(envelope),
        },
        Err(e) if e.is_eof() => bad(format!("request is truncated ({} bytes)", body.len()), uid),
        Err(e) => bad(format!("request is not a valid ysched request: {e}"), uid),
    }
}
