//! Images made present on a node before a job that needs one starts: the
//! pull runs in the background, once per image however many jobs want it,
//! while the jobs wait pending with the reason `ImagePull` (holding
//! nothing and charged nothing). A pull that failed is reported to the
//! jobs that wanted it, and tried again only once [`RETRY_AFTER`] has
//! passed, so that a missing image does not make every pass pull again.
//!
//! The images made present here, and when each was last wanted, are kept
//! in the spool (`image-pulls/cache.json`), so that `cache_size` still
//! weighs those of before a restart of the node's executor.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::Containers;
use crate::exec::launcher::recorded_specs;
use crate::model::container::ImageSource;
use crate::spool::Spool;

use super::image::Store;

/// How long a failed pull is the answer before it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Pulls a node runs at once; more wait their turn (a user naming many
/// images must not start as many podman processes).
const PULLS_AT_ONCE: usize = 4;

/// Where an image stands on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageStatus {
    Ready,
    Pulling,
    /// Why it could not be made present (registry refused, not found…).
    Failed(String),
}

#[derive(Debug)]
enum Entry {
    /// Present; last asked for at `used`.
    Ready {
        used: Instant,
    },
    Pulling {
        since: Instant,
    },
    Failed {
        why: String,
        at: Instant,
    },
}

/// The images one node has made present or is pulling, by reference:
/// kept by whoever starts its pulls (this host's, or the controller for a
/// node's agent).
#[derive(Debug, Default)]
pub struct ImageStates {
    entries: HashMap<String, Entry>,
    /// Those pulled here (not found already there): the only ones the
    /// cache limit may remove.
    pulled: HashSet<String>,
}

impl ImageStates {
    /// Where `reference` stands; `None` when a pull should start now
    /// (never asked for here, or failed longer than [`RETRY_AFTER`] ago),
    /// and it is then counted as pulling.
    pub fn begin(&mut self, reference: &str, now: Instant) -> Option<ImageStatus> {
        match self.entries.get_mut(reference) {
            Some(Entry::Ready { used }) => {
                *used = now;
                return Some(ImageStatus::Ready);
            }
            Some(Entry::Pulling { .. }) => return Some(ImageStatus::Pulling),
            Some(Entry::Failed { why, at }) if now.duration_since(*at) < RETRY_AFTER => {
                return Some(ImageStatus::Failed(why.clone()))
            }
            _ => {}
        }
        self.entries
            .insert(reference.to_string(), Entry::Pulling { since: now });
        None
    }

    /// Records how a pull ended: `failure` says why it could not be.
    pub fn settle(&mut self, reference: &str, failure: Option<String>, now: Instant) {
        let entry = match failure {
            None => Entry::Ready { used: now },
            Some(why) => Entry::Failed { why, at: now },
        };
        self.entries.insert(reference.to_string(), entry);
    }

    /// Counts the pulls asked more than `limit` ago and still not
    /// answered as failed: a node that never answers (an agent older than
    /// its controller) does not keep jobs waiting for ever.
    pub fn give_up_unanswered(&mut self, limit: Duration, now: Instant) {
        for entry in self.entries.values_mut() {
            if let Entry::Pulling { since } = entry {
                if now.duration_since(*since) > limit {
                    let why = format!(
                        "the node did not say within {} whether it has the image",
                        humantime::format_duration(limit)
                    );
                    *entry = Entry::Failed { why, at: now };
                }
            }
        }
    }

    /// Forgets `reference`: the next `begin` starts a pull.
    pub fn forget(&mut self, reference: &str) {
        self.entries.remove(reference);
        self.pulled.remove(reference);
    }

    /// `reference` was pulled here, not found there.
    pub fn mark_pulled(&mut self, reference: &str) {
        self.pulled.insert(reference.to_string());
    }

    /// Images pulled here before (`known`: each with the Unix time it was
    /// last wanted), older than any wanted since; those this table
    /// already knows are left as they are.
    pub fn remember(&mut self, mut known: Vec<(String, u64)>, now: Instant, now_unix: u64) {
        known.sort_by_key(|(_, at)| *at);
        let count = known.len() as u64;
        for (i, (reference, at)) in known.into_iter().enumerate() {
            // In the order they were wanted, all before `now`.
            let age = Duration::from_secs(now_unix.saturating_sub(at))
                + Duration::from_nanos(count - i as u64);
            let used = now.checked_sub(age).unwrap_or(now);
            self.pulled.insert(reference.clone());
            self.entries
                .entry(reference)
                .or_insert(Entry::Ready { used });
        }
    }

    /// The images pulled here and present, each with the Unix time it
    /// was last wanted.
    pub fn last_wanted(&self, now: Instant, now_unix: u64) -> Vec<(String, u64)> {
        self.entries
            .iter()
            .filter(|(name, _)| self.pulled.contains(*name))
            .filter_map(|(name, e)| match e {
                Entry::Ready { used } => {
                    let age = now.saturating_duration_since(*used).as_secs();
                    Some((name.clone(), now_unix.saturating_sub(age)))
                }
                _ => None,
            })
            .collect()
    }

    /// The images pulled here and present, least recently asked for
    /// first.
    pub fn by_last_use(&self) -> Vec<String> {
        let mut ready: Vec<(Instant, &String)> = self
            .entries
            .iter()
            .filter(|(name, _)| self.pulled.contains(*name))
            .filter_map(|(name, e)| match e {
                Entry::Ready { used } => Some((*used, name)),
                _ => None,
            })
            .collect();
        ready.sort();
        ready.into_iter().map(|(_, name)| name.clone()).collect()
    }
}

/// This host's background pulls.
#[derive(Clone)]
pub struct Pulls {
    site: Containers,
    /// Where the jobs' directories are: the images their specs name are
    /// in use, and never removed to make room.
    spool: Spool,
    states: Arc<Mutex<ImageStates>>,
    /// How many pulls run now, and the turn of those waiting.
    running: Arc<(Mutex<usize>, Condvar)>,
}

impl Pulls {
    pub fn new(site: Containers, spool: Spool) -> Pulls {
        let pulls = Pulls {
            site,
            spool,
            states: Arc::default(),
            running: Arc::default(),
        };
        let known = pulls.read_ledger();
        pulls
            .states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remember(known, Instant::now(), unix_now());
        pulls
    }

    /// The file that keeps the images present and their last wants.
    fn ledger(&self) -> PathBuf {
        self.locks().join("cache.json")
    }

    fn read_ledger(&self) -> Vec<(String, u64)> {
        let Ok(text) = std::fs::read(self.ledger()) else {
            return Vec::new();
        };
        serde_json::from_slice::<std::collections::BTreeMap<String, u64>>(&text)
            .map(|m| m.into_iter().collect())
            .unwrap_or_else(|e| {
                tracing::warn!(target: "ysched::exec", "{}: {e}; starting it afresh", self.ledger().display());
                Vec::new()
            })
    }

    /// Writes down the images present now (a failure is logged: the
    /// cache limit then forgets them at the next restart, no more).
    fn write_ledger(&self) {
        let known: std::collections::BTreeMap<String, u64> = self
            .states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_wanted(Instant::now(), unix_now())
            .into_iter()
            .collect();
        let written = serde_json::to_vec(&known)
            .map_err(std::io::Error::other)
            .and_then(|body| {
                std::fs::create_dir_all(self.locks())?;
                crate::exec::process::write_atomically(&self.ledger(), &body)
            });
        if let Err(e) = written {
            tracing::warn!(target: "ysched::exec", "cannot write {}: {e}", self.ledger().display());
        }
    }

    /// Where a pull takes its per-image lock (shared with the
    /// supervisors, which pull an image removed since).
    pub fn locks(&self) -> PathBuf {
        self.spool.root().join("image-pulls")
    }

    /// Where `reference` stands here; starts its pull when it is needed.
    pub fn ensure(&self, reference: &str) -> ImageStatus {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(status) = states.begin(reference, Instant::now()) {
            return status;
        }
        drop(states);
        let (pulls, reference) = (self.clone(), reference.to_string());
        std::thread::spawn(move || pulls.pull(&reference));
        ImageStatus::Pulling
    }

    fn pull(&self, reference: &str) {
        let (count, turn) = &*self.running;
        let mut running = count.lock().unwrap_or_else(|p| p.into_inner());
        while *running >= PULLS_AT_ONCE {
            running = turn.wait(running).unwrap_or_else(|p| p.into_inner());
        }
        *running += 1;
        drop(running);
        /// Gives the turn back however the pull ends.
        struct Done<'a>(&'a (Mutex<usize>, Condvar));
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
                self.0 .1.notify_one();
            }
        }
        let _done = Done(&self.running);
        self.pull_now(reference);
    }

    fn pull_now(&self, reference: &str) {
        let started = Instant::now();
        let store = Store::shared(&self.site);
        let made = store.make_present(reference, &self.locks());
        let pulled = made.as_ref().is_ok_and(|&pulled| pulled);
        let failure = made.err().map(|e| e.to_string());
        match &failure {
            None => {
                tracing::info!(target: "ysched::exec", "image {reference} is present ({:.1} s)", started.elapsed().as_secs_f64())
            }
            Some(why) => tracing::warn!(target: "ysched::exec", "image {reference}: {why}"),
        }
        let ready = failure.is_none();
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states.settle(reference, failure, Instant::now());
        if pulled {
            states.mark_pulled(reference);
        }
        drop(states);
        if let (true, Some(limit)) = (pulled, self.site.cache_size_mb) {
            self.trim(&store, limit.saturating_mul(1 << 20), reference);
        }
        if ready {
            self.write_ledger();
        }
    }

    /// Removes the least recently used images pulled here until the store
    /// fits in `limit` bytes, keeping the one `just` pulled, the prefetch
    /// list, and every image a job on this node names. Images loaded from
    /// archives or by hand are never removed.
    fn trim(&self, store: &Store<'_>, limit: u64, just: &str) {
        let mut keep: HashSet<String> = self.site.prefetch.iter().cloned().collect();
        keep.insert(just.to_string());
        for (_, spec) in recorded_specs(&self.spool) {
            if let Some(ImageSource::Reference(r)) =
                spec.container.as_ref().map(|c| c.request.source())
            {
                keep.insert(r);
            }
        }
        let candidates = self
            .states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_last_use();
        for reference in candidates.iter().filter(|r| !keep.contains(*r)) {
            match store.size() {
                Ok(size) if size <= limit => return,
                Ok(_) => {}
                Err(e) => return tracing::warn!(target: "ysched::exec", "image cache: {e}"),
            }
            match store.remove(reference) {
                Ok(()) => {
                    tracing::info!(target: "ysched::exec", "image {reference} removed: the store is over its cache_size");
                    self.states
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .forget(reference);
                }
                // Gone already (removed by hand): nothing to weigh.
                Err(_) if store.exists(reference).is_ok_and(|there| !there) => self
                    .states
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .forget(reference),
                Err(e) => tracing::warn!(target: "ysched::exec", "image cache: {e}"),
            }
        }
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_known_from_before_a_restart_are_the_oldest_and_keep_their_order() {
        let mut states = ImageStates::default();
        let now = Instant::now();
        assert_eq!(states.begin("new", now), None);
        states.settle("new", None, now);
        states.mark_pulled("new");
        assert_eq!(states.begin("found", now), None);
        states.settle("found", None, now);
        states.remember(
            vec![
                ("b".into(), 1_000_000),
                ("a".into(), 900_000),
                ("new".into(), 1),
            ],
            now,
            2_000_000,
        );
        assert_eq!(states.by_last_use(), ["a", "b", "new"]);
        let wanted: HashMap<String, u64> = states.last_wanted(now, 2_000_000).into_iter().collect();
        assert_eq!(wanted["a"], 900_000);
        assert_eq!(wanted["new"], 2_000_000);
    }

    #[test]
    fn the_ledger_outlives_the_executor() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::new(dir.path());
        let pulls = Pulls::new(Containers::default(), spool.clone());
        {
            let mut states = pulls.states.lock().unwrap();
            states.begin("localhost/yolo:1", Instant::now());
            states.settle("localhost/yolo:1", None, Instant::now());
            states.mark_pulled("localhost/yolo:1");
        }
        pulls.write_ledger();
        let again = Pulls::new(Containers::default(), spool);
        assert_eq!(
            again.states.lock().unwrap().by_last_use(),
            ["localhost/yolo:1"]
        );
        std::fs::write(again.ledger(), "{").unwrap();
        let fresh = Pulls::new(Containers::default(), Spool::new(dir.path()));
        assert!(fresh.states.lock().unwrap().by_last_use().is_empty());
    }

    #[test]
    fn one_pull_per_image_and_a_failure_is_retried_only_after_a_while() {
        let mut states = ImageStates::default();
        let t0 = Instant::now();
        assert_eq!(states.begin("a", t0), None);
        assert_eq!(states.begin("a", t0), Some(ImageStatus::Pulling));
        states.settle("a", None, t0);
        assert_eq!(states.begin("a", t0), Some(ImageStatus::Ready));
        assert_eq!(states.begin("b", t0), None);
        states.settle("b", Some("not found".into()), t0);
        let failed = Some(ImageStatus::Failed("not found".into()));
        assert_eq!(states.begin("b", t0 + Duration::from_secs(1)), failed);
        assert_eq!(states.begin("b", t0 + RETRY_AFTER), None);
        assert_eq!(
            states.begin("b", t0 + RETRY_AFTER),
            Some(ImageStatus::Pulling)
        );
        let later = t0 + RETRY_AFTER + Duration::from_secs(61);
        states.give_up_unanswered(Duration::from_secs(60), later);
        let Some(ImageStatus::Failed(why)) = states.begin("b", later) else {
            panic!("still pulling")
        };
        assert!(why.contains("did not say within 1m"), "{why}");
    }
}
