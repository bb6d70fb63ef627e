//! Frames on the wire: a 4-byte big-endian length, then that many bytes
//! of JSON. A frame holds a job's script and environment at most (4 MiB
//! each), so 16 MiB bounds it; a longer length is an error, not an
//! allocation.

use serde::{de::DeserializeOwned, Serialize};

use super::error::NetError;

pub const MAX_FRAME: usize = 16 << 20;

/// `message` as one frame.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, NetError> {
    let body = serde_json::to_vec(message)?;
    if body.len() > MAX_FRAME {
        return Err(NetError::FrameTooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, NetError> {
    Ok(serde_json::from_slice(body)?)
}

/// Bytes as they arrive, cut into frames of at most `limit` bytes.
pub struct Framer {
    buffer: Vec<u8>,
    limit: usize,
}

impl Default for Framer {
    fn default() -> Framer {
        Framer {
            buffer: Vec::new(),
            limit: MAX_FRAME,
        }
    }
}

impl Framer {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Frames longer than `limit` (at most [`MAX_FRAME`]) are refused.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(MAX_FRAME);
    }

    /// The next whole frame's body, if one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, NetError> {
        let Some(head) = self.buffer.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > self.limit {
            return Err(NetError::FrameTooLarge(len));
        }
        if self.buffer.len() < 4 + len {
            return Ok(None);
        }
        let body = self.buffer[4..4 + len].to_vec();
        self.buffer.drain(..4 + len);
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_out_whole_however_the_bytes_arrive() {
        let (a, b) = (encode(&"first").unwrap(), encode(&vec![1, 2, 3]).unwrap());
        let mut wire = a.clone();
        wire.extend(&b);
        let mut framer = Framer::default();
        for byte in &wire {
            framer.push(std::slice::from_ref(byte));
        }
        let first: String = decode(&framer.next_frame().unwrap().unwrap()).unwrap();
        let second: Vec<u32> = decode(&framer.next_frame().unwrap().unwrap()).unwrap();
        assert_eq!((first.as_str(), second), ("first", vec![1, 2, 3]));
        assert!(framer.next_frame().unwrap().is_none());
        framer.push(&u32::MAX.to_be_bytes());
        assert!(matches!(
            framer.next_frame(),
            Err(NetError::FrameTooLarge(_))
        ));
    }
}
