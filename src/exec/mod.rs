//! Running jobs: the supervisor process per job, privileges, signals, and
//! re-adoption after a daemon restart. Policy lives elsewhere; this module
//! launches what it is told to and reports what happened.
//!
//! This is the seam the pool's nodes plug into (`net::remote`, and on
//! each node its agent runs this host's executor): the daemon only
//! launches, terminates, signals, adopts and reads exits.

pub mod cgroup;
pub mod command;
pub mod container;
pub mod env;
pub mod error;
pub mod executor;
pub mod fake;
pub mod forkserver;
pub mod isolation;
pub mod launcher;
pub mod lease;
pub mod local;
pub mod privileges;
pub mod process;
pub mod remover;
pub mod spec;
pub mod step_server;
pub mod supervisor;
pub mod tail;
pub mod task_pid;
pub mod tasks;
pub mod terminal;

pub use error::ExecError;
pub use executor::Executor;
