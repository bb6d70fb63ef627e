//! What the parts of one run of a job share for its steps (a job over
//! several nodes, or an interactive allocation): the step link's key and
//! the ports its task servers and `MASTER_PORT` use, all made at random
//! by the controller for that run.

use crate::model::tasks::StepPorts;

/// Ports a task server tries, in order, when its own is taken.
const SPARE_PORTS: usize = 3;

/// What the parts of one run of a job over several nodes share: the
/// step link's key, and the ports its task servers and `MASTER_PORT` use,
/// all made at random by the controller for this run.
#[derive(Clone, Default)]
pub(super) struct RunLink {
    pub(super) key: String,
    pub(super) ports: StepPorts,
}

impl RunLink {
    /// For a run on `nodes` nodes, its ports from `range` (distinct): one
    /// per node, `MASTER_PORT`, and the spares.
    pub(super) fn new(nodes: usize, range: (u16, u16)) -> Result<RunLink, crate::net::NetError> {
        let random = ring::rand::SystemRandom::new();
        let span = u32::from(range.1 - range.0) + 1;
        let wanted = nodes + 1 + SPARE_PORTS;
        let mut ports: Vec<u16> = Vec::with_capacity(wanted);
        while ports.len() < wanted {
            let mut bytes = [0u8; 4];
            ring::rand::SecureRandom::fill(&random, &mut bytes).map_err(|_| {
                crate::net::NetError::Refused("the system's random source failed".into())
            })?;
            let port = range.0 + (u32::from_be_bytes(bytes) % span) as u16;
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let spare = ports.split_off(nodes + 1);
        let master = ports.pop().unwrap_or_default();
        Ok(RunLink {
            key: crate::net::pki::new_token()?,
            ports: StepPorts {
                task_servers: ports,
                master,
                spare,
            },
        })
    }
}
