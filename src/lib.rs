//! ysched: a Slurm-style GPU batch scheduler for teams that share GPU
//! servers. README.md ("How it works") outlines the architecture; each
//! module below owns one concern.

// serde_json's json! of slurmrestd's wide objects (src/web) nests deep.
#![recursion_limit = "256"]

pub mod agent;
pub mod array;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod db;
pub mod exec;
pub mod gpu;
pub mod leader;
pub mod model;
pub mod net;
pub mod proto;
pub mod query;
pub mod report;
pub mod sched;
pub mod script;
pub mod sim;
pub mod slurm_options;
pub mod spool;
pub mod token;
pub mod validate;
pub mod web;
