//! Scheduling policy as pure functions of (state, time): no clock, files,
//! SQL or processes in here, so it is tested with made-up time and can be
//! replayed by a simulator.

pub mod admission;
pub mod approval;
pub mod budget;
pub mod dependency;
pub mod elastic;
pub mod fairshare;
pub mod limits;
pub mod pass;
pub mod placement;
pub mod plan;
pub mod pool;
pub mod preempt;
pub mod priority;
pub mod profile;
pub mod quick;
pub mod reason;
pub mod requeue;
pub mod window;

pub use pass::pass;
pub use plan::{plan, Plan, Pool};
pub use reason::Reason;
