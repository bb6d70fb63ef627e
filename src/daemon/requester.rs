//! Who asks, and what proves it: the kernel's word on the controller, a
//! token the controller signed, or a node's word; with the channel the
//! request came by (for the audit log) and, on a node's word alone, which
//! node vouches and why no token proved more.

/// What proves who asks.
#[derive(Clone, Copy, Debug)]
pub(super) enum Proven<'a> {
    /// The controller's kernel: the socket's peer, the spool file's owner.
    Kernel,
    /// A token the controller signed: the web's, or the one sent with a
    /// request a node passed on.
    Token(&'a crate::token::Claims),
    /// A node's word: one the site trusts (`trust_nodes`), or one alone
    /// (then `vouched_by` says which).
    NodeWord,
}

/// Who asks.
pub(super) struct Requester<'a> {
    pub(super) uid: u32,
    pub(super) user: &'a str,
    pub(super) admin: bool,
    pub(super) proven: Proven<'a>,
    /// How the request came (the command line, a node, the web), for the
    /// audit log.
    pub(super) channel: crate::proto::Channel,
    /// The node whose word alone says who asks, and why the user's
    /// token did not prove more: only jobs it runs or took in may be
    /// touched.
    pub(super) vouched_by: Option<(&'a str, &'a str)>,
}
