//! The leaf of the house: the plain data every layer shares — the job
//! record, its request and states, ids, GPUs and their use, isolation
//! kinds, the policy values the config names — and the units they are
//! written in. It depends on nothing else in the crate.

pub mod container;
pub mod gpu;
pub mod hostlist;
pub mod isolation;
pub mod job;
pub mod policy;
pub mod step;
pub mod tasks;
pub mod units;
