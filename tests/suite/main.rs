//! The integration tests, one binary: a real `ysctld` on a temporary
//! spool, the real commands, real users (as root) and real cgroups, one
//! module per concern. One binary links once; 25 of them took most of a
//! fresh `cargo test`.

#[macro_use]
mod common;

mod approval;
mod arrays;
mod backfill;
mod browser;
mod config;
mod containers;
mod crash;
mod dependency;
mod docs;
mod elastic;
mod fairshare;
mod hardening;
mod hostile;
mod interactive;
mod isolation;
mod layers;
mod lifecycle;
mod limits;
mod metrics;
mod multinode;
mod node;
mod notify;
mod outage;
mod placement;
mod pool;
mod pool_loopback;
mod portal;
mod preempt;
mod report;
mod simulate;
mod slurm_compat;
mod slurm_export;
mod socket;
mod standby;
mod steps;
mod submit;
mod update;
mod users;
mod web;
