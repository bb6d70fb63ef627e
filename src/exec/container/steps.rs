//! Steps in container images (`srun --container-image`): the words
//! between a step's task starter (`srun`, or a node's task server, both
//! running as the job's user) and the job's supervisor (root), which alone
//! may make the container.
//!
//! Why through the supervisor. The image store and the runtime need root,
//! and the task starter must not have it; the supervisor already holds the
//! job's cgroup and identity. It listens on an abstract Unix socket named
//! in the job's environment (`YS_CONTAINER_STEPS`); abstract, because the
//! job's directory is root's and a socket there would need a path the
//! user can reach. Who may ask is settled by the kernel: the supervisor
//! takes connections only from the job's user (or root), and the starter
//! talks only to a root peer, so neither another user's processes nor a
//! squatter on the name can use or pose as it.
//!
//! One connection is one task: the order (its image request, command,
//! environment and working directory) with the task's standard input,
//! output and error passed as descriptors, then signals to pass on, and
//! one answer back: how the task ended, or why it could not start. The
//! supervisor forks a runner for it, which makes the container as the
//! batch script's is made (`launch`), in the job's cgroup.

use std::io::{IoSlice, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::PathBuf;
use std::sync::Mutex;

use nix::sys::socket::{self, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use thiserror::Error;

use crate::model::container::ContainerRequest;

/// The variable that names the job's socket for container steps.
pub const SOCKET_VARIABLE: &str = "YS_CONTAINER_STEPS";
/// The longest message taken (an order carries the task's environment).
const MAX_MESSAGE: usize = 4 << 20;

/// One task to run in a container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerStepOrder {
    pub request: ContainerRequest,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// The working directory on the host; inside, where a mount brings
    /// it in (`--container-workdir` wins).
    pub cwd: PathBuf,
}

/// What the starter says after the order.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToRunner {
    Signal(i32),
}

/// The runner's one answer.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromRunner {
    /// The container could not be made or entered.
    Failed(String),
    /// The task's exit code, or the signal that ended it.
    Ended { code: i32, signal: i32 },
}

/// Why a task in a container did not run, or was lost.
#[derive(Debug, Error)]
pub enum ContainerStepError {
    #[error("this node runs no steps in containers ([containers] has no runtime here, or jobs do not run as their users)")]
    NotHere,
    #[error("cannot reach the job's supervisor: {0}")]
    Connect(std::io::Error),
    #[error("the socket {0} is not the job's supervisor's (it is not root's)")]
    NotSupervisor(String),
    #[error("{0}")]
    Failed(String),
    #[error("the job's supervisor ended the step's container without saying how")]
    Lost,
    #[error("talking to the job's supervisor: {0}")]
    Wire(String),
}

/// Sends `message` as one frame (a length, then JSON), with `fds` passed
/// along its first byte.
pub fn send<T: Serialize>(
    stream: &mut UnixStream,
    message: &T,
    fds: &[RawFd],
) -> Result<(), ContainerStepError> {
    let body = serde_json::to_vec(message).map_err(|e| ContainerStepError::Wire(e.to_string()))?;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let wire = |e: std::io::Error| ContainerStepError::Wire(e.to_string());
    let mut sent = 0;
    if !fds.is_empty() {
        let rights = [ControlMessage::ScmRights(fds)];
        sent = socket::sendmsg::<()>(
            stream.as_raw_fd(),
            &[IoSlice::new(&frame)],
            &rights,
            MsgFlags::empty(),
            None,
        )
        .map_err(|e| wire(e.into()))?;
    }
    stream.write_all(&frame[sent..]).map_err(wire)
}

/// Reads one frame; with `fds`, takes up to that many descriptors passed
/// with it.
pub fn receive<T: DeserializeOwned>(
    stream: &mut UnixStream,
    fds: usize,
) -> Result<(T, Vec<OwnedFd>), ContainerStepError> {
    let mut head = [0u8; 4];
    let mut got = 0;
    let mut passed = Vec::new();
    if fds > 0 {
        let mut space = nix::cmsg_space!([RawFd; 3]);
        let mut iov = [std::io::IoSliceMut::new(&mut head)];
        let message = socket::recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|e| ContainerStepError::Wire(e.to_string()))?;
        got = message.bytes;
        for cmsg in message
            .cmsgs()
            .map_err(|e| ContainerStepError::Wire(e.to_string()))?
        {
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                // SAFETY: descriptors the kernel just gave this process.
                passed.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        if got == 0 {
            return Err(ContainerStepError::Lost);
        }
    }
    stream
        .read_exact(&mut head[got..])
        .map_err(|_| ContainerStepError::Lost)?;
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_MESSAGE {
        return Err(ContainerStepError::Wire(format!(
            "a message of {len} bytes (at most {MAX_MESSAGE})"
        )));
    }
    let mut body = vec![0u8; len];
    stream
        .read_exact(&mut body)
        .map_err(|_| ContainerStepError::Lost)?;
    let message =
        serde_json::from_slice(&body).map_err(|e| ContainerStepError::Wire(e.to_string()))?;
    Ok((message, passed))
}

/// The uid of the process at the other end.
pub fn peer_uid(stream: &UnixStream) -> Option<u32> {
    socket::getsockopt(stream, socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid())
}

/// A task running in a container, through the job's supervisor.
pub struct ContainerStep {
    stream: UnixStream,
}

/// Passes signals on to a [`ContainerStep`]'s task from another thread.
pub struct StepSignaller {
    stream: Mutex<UnixStream>,
}

impl StepSignaller {
    pub fn signal(&self, signal: i32) {
        let mut stream = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        let _ = send(&mut stream, &ToRunner::Signal(signal), &[]);
    }
}

impl ContainerStep {
    /// Asks the supervisor listening as `socket` to run `order` with
    /// `stdio` as the task's standard input, output and error.
    pub fn start(
        socket: &str,
        order: &ContainerStepOrder,
        stdio: [BorrowedFd<'_>; 3],
    ) -> Result<ContainerStep, ContainerStepError> {
        let address = SocketAddr::from_abstract_name(socket.as_bytes())
            .map_err(ContainerStepError::Connect)?;
        let mut stream = UnixStream::connect_addr(&address).map_err(ContainerStepError::Connect)?;
        if peer_uid(&stream) != Some(0) {
            return Err(ContainerStepError::NotSupervisor(socket.to_string()));
        }
        let fds = stdio.map(|fd| fd.as_raw_fd());
        if let Err(e) = send(&mut stream, order, &fds) {
            // Refused before the order was read: the refusal says why.
            return match receive::<FromRunner>(&mut stream, 0) {
                Ok((FromRunner::Failed(why), _)) => Err(ContainerStepError::Failed(why)),
                _ => Err(e),
            };
        }
        Ok(ContainerStep { stream })
    }

    pub fn signaller(&self) -> Result<StepSignaller, ContainerStepError> {
        let stream = self
            .stream
            .try_clone()
            .map_err(|e| ContainerStepError::Wire(e.to_string()))?;
        Ok(StepSignaller {
            stream: Mutex::new(stream),
        })
    }

    /// Waits for the task's end: its exit code and the signal that ended
    /// it (0 for none).
    pub fn wait(mut self) -> Result<(i32, i32), ContainerStepError> {
        match receive::<FromRunner>(&mut self.stream, 0)?.0 {
            FromRunner::Ended { code, signal } => Ok((code, signal)),
            FromRunner::Failed(why) => Err(ContainerStepError::Failed(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_crosses_with_its_descriptors_and_an_answer_comes_back() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        let order = ContainerStepOrder {
            request: ContainerRequest::new("localhost/yolo:1").unwrap(),
            argv: vec!["python".into(), "train.py".into()],
            env: vec![("SLURM_PROCID".into(), "3".into())],
            cwd: "/data".into(),
        };
        let file = tempfile::tempfile().unwrap();
        use std::os::fd::AsFd;
        let fd = file.as_fd().as_raw_fd();
        send(&mut a, &order, &[fd, fd, fd]).unwrap();
        let (got, fds) = receive::<ContainerStepOrder>(&mut b, 3).unwrap();
        assert_eq!(got, order);
        assert_eq!(fds.len(), 3);
        let mut passed = std::fs::File::from(fds.into_iter().next().unwrap());
        passed.write_all(b"through").unwrap();
        send(&mut b, &FromRunner::Ended { code: 3, signal: 0 }, &[]).unwrap();
        let (answer, none) = receive::<FromRunner>(&mut a, 0).unwrap();
        assert_eq!(answer, FromRunner::Ended { code: 3, signal: 0 });
        assert!(none.is_empty());
        drop(b);
        assert!(matches!(
            receive::<FromRunner>(&mut a, 0),
            Err(ContainerStepError::Lost)
        ));
    }
}
