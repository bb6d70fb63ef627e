//! The controller daemon: one event loop that owns all state and ties the
//! spool, the database, the scheduler and the supervisors together.
//!
//! Threads only turn outside happenings into [`Event`]s: the spool watcher
//! (inotify through notify), the socket thread (requests on
//! `SPOOL/ysctld.sock`), the exit watcher (pidfds), the signal thread;
//! and the query thread answers read-only views from a snapshot and its own
//! read-only database connection, so a user's `ysacct` never stalls the loop.
//!
//! Each loop turn drains every event that is waiting, applies them in one
//! SQLite transaction, commits, and only then replies and launches: a reply
//! means "durable", and a job is marked running before its process exists,
//! so a crash can never run a job twice.
mod access;
mod allocations;
mod budget;
mod cancel;
pub mod chaos;
mod control;
mod depend;
mod effects;
mod ends;
mod error;
mod exits;
mod forwarded;
mod gpu_use;
mod holds;
mod identity;
mod images;
mod jobs;
pub mod leading;
mod metrics_http;
mod node_admin;
mod node_loss;
mod node_time;
mod nodes;
mod notifications;
mod pace;
mod pass;
mod peers;
mod pool;
mod pool_state;
mod preempt;
mod quick;
mod reads;
mod refusals;
mod reload;
mod requester;
mod requeue;
mod retention;
mod run_link;
mod seam;
mod startup;
mod state;
mod steps;
mod stops;
mod submit;
mod suspend;
mod test_only;
mod time_limits;
mod tokens;
mod turn;
mod update;
mod users;
mod watchdog;

#[cfg(test)]
mod testing;

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod replay_tests;

pub use error::DaemonError;
pub use leading::Stopped;
pub use startup::{run, Options};
pub use state::Event;
