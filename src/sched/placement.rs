//! Which GPUs a job gets. All GPUs of one job are of one type: a training
//! run split over an A100 and an RTX 3090 runs at the slower card's pace.

use crate::model::gpu::Gpu;
use crate::model::job::GpuRequest;

/// A set of GPU indices, one bit each: cheap to copy and intersect, which
/// the scheduler's timeline does for every point a job would span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuSet {
    words: Vec<u64>,
}

impl GpuSet {
    pub fn contains(&self, gpu: u32) -> bool {
        let (w, b) = (gpu as usize / 64, gpu % 64);
        self.words.get(w).is_some_and(|word| word & (1 << b) != 0)
    }

    /// Adds `gpu`; false if it was there.
    pub fn insert(&mut self, gpu: u32) -> bool {
        let (w, b) = (gpu as usize / 64, gpu % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let was = self.words[w] & (1 << b) != 0;
        self.words[w] |= 1 << b;
        !was
    }

    /// Removes `gpu`; false if it was not there.
    pub fn remove(&mut self, gpu: u32) -> bool {
        let was = self.contains(gpu);
        if was {
            self.words[gpu as usize / 64] &= !(1 << (gpu % 64));
        }
        was
    }

    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Keeps only the GPUs also in `other`.
    pub fn intersect_with(&mut self, other: &GpuSet) {
        for (i, w) in self.words.iter_mut().enumerate() {
            *w &= other.words.get(i).copied().unwrap_or(0);
        }
    }

    /// The GPUs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                (rest != 0).then(|| {
                    let bit = rest.trailing_zeros();
                    rest &= rest - 1;
                    i as u32 * 64 + bit
                })
            })
        })
    }
}

impl FromIterator<u32> for GpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> GpuSet {
        let mut set = GpuSet::default();
        for g in iter {
            set.insert(g);
        }
        set
    }
}

/// Picks GPUs for `request` among `free` (indices into `inventory`), or
/// `None` when they are not there. All of them on one node, of one type:
/// only GPUs the request accepts (type, `--constraint`) count, pooled by
/// node and type. The pool chosen is the smallest that fits (best fit
/// keeps large pools, and whole nodes, free for large jobs); ties go to
/// the type first in config order, then to a pool where the job fits in
/// one NVLink or PCIe group, then to the first node. Within it, see
/// [`pick_in_groups`]. Shard requests are placed by [`pick_shared`].
pub fn place(request: &GpuRequest, free: &GpuSet, inventory: &[Gpu]) -> Option<Vec<u32>> {
    let count = request.count as usize;
    if count == 0 {
        return Some(Vec::new());
    }
    if request.shard {
        return None;
    }
    let mut pools: Vec<((u32, &str), Vec<&Gpu>)> = Vec::new();
    for gpu in free.iter().filter_map(|i| inventory.get(i as usize)) {
        if !request.accepts(gpu) {
            continue;
        }
        let key = (gpu.node, gpu.gpu_type.as_str());
        match pools.iter_mut().find(|(k, _)| *k == key) {
            Some((_, pool)) => pool.push(gpu),
            None => pools.push((key, vec![gpu])),
        }
    }
    let type_order = |t: &str| inventory.iter().position(|g| g.gpu_type == t);
    let (_, pool) = pools
        .into_iter()
        .filter(|(_, pool)| pool.len() >= count)
        .min_by_key(|((node, t), pool)| {
            (
                pool.len(),
                type_order(t),
                !fits_one_group(pool, count),
                *node,
            )
        })?;
    Some(pick_in_groups(&pool, count))
}

/// Whether some group of `pool` holds `count` GPUs.
fn fits_one_group(pool: &[&Gpu], count: usize) -> bool {
    let mut sizes: Vec<(u32, usize)> = Vec::new();
    for gpu in pool {
        match sizes.iter_mut().find(|(g, _)| *g == gpu.group) {
            Some((_, n)) => *n += 1,
            None => sizes.push((gpu.group, 1)),
        }
    }
    sizes.iter().any(|(_, n)| *n >= count)
}

/// `count` GPUs of `pool` (in index order), close together: from the one
/// group (NVLink or PCIe switch) with the fewest free GPUs that holds them
/// all, so small jobs fill up partly used groups and whole groups stay
/// free for large jobs; else over the fewest groups, the fullest first.
fn pick_in_groups(pool: &[&Gpu], count: usize) -> Vec<u32> {
    let mut groups: Vec<(u32, Vec<u32>)> = Vec::new();
    for gpu in pool {
        match groups.iter_mut().find(|(g, _)| *g == gpu.group) {
            Some((_, members)) => members.push(gpu.index),
            None => groups.push((gpu.group, vec![gpu.index])),
        }
    }
    if let Some((_, members)) = groups
        .iter()
        .filter(|(_, members)| members.len() >= count)
        .min_by_key(|(_, members)| members.len())
    {
        return members[..count].to_vec();
    }
    groups.sort_by_key(|(g, members)| (std::cmp::Reverse(members.len()), *g));
    let mut picked: Vec<u32> = groups
        .into_iter()
        .flat_map(|(_, members)| members)
        .take(count)
        .collect();
    picked.sort_unstable();
    picked
}

/// The GPU a shard request shares, among `candidates` (GPUs it accepts
/// with enough free slots): the one with the fewest free slots, so shard
/// jobs pile onto cards already shared and leave whole cards whole; ties
/// to the lowest index.
pub fn pick_shared(candidates: &GpuSet, free_slots: impl Fn(u32) -> u32) -> Option<u32> {
    candidates.iter().min_by_key(|&g| (free_slots(g), g))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory() -> Vec<Gpu> {
        let mut v = Vec::new();
        for (i, t) in ["a100", "a100", "a100", "a100", "t4", "t4"]
            .iter()
            .enumerate()
        {
            v.push(Gpu {
                index: i as u32,
                gpu_type: t.to_string(),
                memory_mb: 1,
                device: None,
                ..Gpu::default()
            });
        }
        v
    }

    fn req(count: u32, t: Option<&str>) -> GpuRequest {
        GpuRequest {
            count,
            gpu_type: t.map(String::from),
            ..GpuRequest::default()
        }
    }

    #[test]
    fn typed_requests_take_the_lowest_free_of_their_type() {
        let free: GpuSet = [1, 3, 4, 5].into_iter().collect();
        assert_eq!(
            place(&req(2, Some("a100")), &free, &inventory()),
            Some(vec![1, 3])
        );
        assert_eq!(place(&req(3, Some("a100")), &free, &inventory()), None);
        assert_eq!(place(&req(1, Some("v100")), &free, &inventory()), None);
    }

    #[test]
    fn untyped_requests_best_fit_and_never_mix_types() {
        let all: GpuSet = (0..6).collect();
        assert_eq!(
            place(&req(2, None), &all, &inventory()),
            Some(vec![4, 5]),
            "the smaller pool that fits"
        );
        assert_eq!(
            place(&req(3, None), &all, &inventory()),
            Some(vec![0, 1, 2])
        );
        let free: GpuSet = [0, 1, 4].into_iter().collect();
        assert_eq!(
            place(&req(3, None), &free, &inventory()),
            None,
            "2 a100 + 1 t4 is not a placement"
        );
        assert_eq!(
            place(&req(0, None), &GpuSet::default(), &inventory()),
            Some(vec![])
        );
    }

    fn grouped(memory: &[u64]) -> Vec<Gpu> {
        memory
            .iter()
            .enumerate()
            .map(|(i, &m)| Gpu {
                index: i as u32,
                gpu_type: "a100".into(),
                memory_mb: m,
                group: i as u32 / 4,
                features: if i < 4 { vec!["nvlink".into()] } else { vec![] },
                ..Gpu::default()
            })
            .collect()
    }

    #[test]
    fn jobs_stay_in_one_group_and_small_ones_fill_used_groups() {
        let inv = grouped(&[80_000; 8]);
        // GPU 0 is busy: group 0 has 3 free, group 1 has 4.
        let free: GpuSet = (1..8).collect();
        assert_eq!(place(&req(1, None), &free, &inv), Some(vec![1]), "best fit");
        assert_eq!(place(&req(3, None), &free, &inv), Some(vec![1, 2, 3]));
        assert_eq!(
            place(&req(4, None), &free, &inv),
            Some(vec![4, 5, 6, 7]),
            "a whole group, not 1-4"
        );
        assert_eq!(
            place(&req(5, None), &free, &inv),
            Some(vec![1, 4, 5, 6, 7]),
            "the fullest group first"
        );
    }

    #[test]
    fn constraints_pick_by_feature_and_memory() {
        let inv = grouped(&[
            40_960, 40_960, 81_920, 81_920, 81_920, 81_920, 81_920, 81_920,
        ]);
        let all: GpuSet = (0..8).collect();
        let with = |c: &str, count| GpuRequest {
            constraint: Some(crate::model::job::GpuConstraint::parse(c).unwrap()),
            ..req(count, None)
        };
        assert_eq!(place(&with("gpumem>=80G", 2), &all, &inv), Some(vec![2, 3]));
        assert_eq!(
            place(&with("nvlink&gpumem>=60G", 2), &all, &inv),
            Some(vec![2, 3])
        );
        assert_eq!(place(&with("nvlink&gpumem>=60G", 3), &all, &inv), None);
        assert_eq!(
            place(&with("nvlink", 4), &all, &inv),
            Some(vec![0, 1, 2, 3])
        );
        assert_eq!(place(&with("sxm5", 1), &all, &inv), None);
    }
}
