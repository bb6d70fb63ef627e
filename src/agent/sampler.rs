//! The node's GPUs, read as the controller reads its own (NVML where a
//! driver answers) and sent to the controller, which alone knows which
//! job holds which GPU: it charges each job its GPUs' utilisation and
//! names processes on GPUs their holder does not own.

use std::time::{Duration, Instant};

use crate::gpu::sampling::{read, Source};
use crate::net::message::FromNode;

pub struct Sampler {
    source: Box<dyn Source>,
    every: Duration,
    /// When the next reading is due; `None` once the source had no data.
    next: Option<Instant>,
}

impl Sampler {
    /// Reads `source` every `every`, the first time at once.
    pub fn new(source: Box<dyn Source>, every: Duration) -> Sampler {
        Sampler {
            source,
            every,
            next: Some(Instant::now()),
        }
    }

    /// When the next reading is due, if there will be one.
    pub fn next(&self) -> Option<Instant> {
        self.next
    }

    /// The reading due at `now`, if one is. A source without data stops
    /// the sampler, as it stops the controller's.
    pub fn due(&mut self, now: Instant) -> Option<FromNode> {
        if self.next? > now {
            return None;
        }
        match read(self.source.as_mut()) {
            Some(reading) => {
                self.next = Some(now + self.every);
                Some(FromNode::Gpus {
                    reading,
                    every_secs: self.every.as_secs(),
                })
            }
            None => {
                tracing::info!(target: "ysched::agent", "GPU utilisation: {} gave no data: not sampled any more", self.source.describe());
                self.next = None;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gpu::Sample;

    /// Gives its samples in turn, then nothing.
    struct Scripted(Vec<Vec<Sample>>);

    impl Source for Scripted {
        fn describe(&self) -> String {
            "scripted".into()
        }

        fn sample(&mut self) -> Option<Vec<Sample>> {
            (!self.0.is_empty()).then(|| self.0.remove(0))
        }
    }

    fn at(gpu: u32, pct: u32) -> Sample {
        Sample {
            gpu,
            utilization_pct: pct,
            memory_used_mb: 100,
        }
    }

    #[test]
    fn readings_come_each_interval_until_the_source_has_no_data() {
        let every = Duration::from_secs(30);
        let mut sampler = Sampler::new(
            Box::new(Scripted(vec![vec![at(0, 90)], vec![at(0, 10)]])),
            every,
        );
        let start = Instant::now();
        let Some(FromNode::Gpus {
            reading: first,
            every_secs: 30,
        }) = sampler.due(start)
        else {
            panic!("the first reading is due at once");
        };
        assert_eq!(first.samples, vec![at(0, 90)]);
        assert_eq!(first.processes, None, "this source cannot tell processes");
        assert!(sampler.due(start + every / 2).is_none(), "not due yet");
        assert_eq!(sampler.next(), Some(start + every));
        let Some(FromNode::Gpus {
            reading: second, ..
        }) = sampler.due(start + every)
        else {
            panic!("due after the interval");
        };
        assert_eq!(second.samples, vec![at(0, 10)]);
        assert!(sampler.due(start + every * 2).is_none());
        assert_eq!(sampler.next(), None, "no data: sampling stops");
        assert!(sampler.due(start + every * 10).is_none());
    }
}
