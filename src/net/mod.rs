//! The pool's transport: one mutual-TLS connection from each node's agent
//! (`ysnoded`) to the controller, carrying length-prefixed JSON frames
//! (`frame`) of the protocol's messages (`message`), each stamped with
//! the protocol version, the controller's epoch and the agent's
//! incarnation. The controller is the certificate authority (`pki`): a
//! node joins once with a one-time token and the authority's fingerprint,
//! and is given a certificate it presents from then on (`tls`). A
//! connection is driven without blocking (`conn`); the controller serves
//! all nodes from one thread (`server`); a node that runs jobs is, to the
//! daemon, one more `Executor` (`remote`), and keeps the runs it holds as
//! the protocol tells of them (`runs`, the agent's, and the simulation's
//! agents').

pub mod conn;
pub mod error;
pub mod frame;
pub mod message;
pub mod noise;
pub mod pki;
pub mod remote;
pub mod runs;
pub mod server;
pub mod steps;
pub mod tls;

pub use error::NetError;

#[cfg(test)]
mod tests;
