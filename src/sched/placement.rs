//! Which GPUs a job gets. All GPUs of one job are of one type: a training
//! run split over an A100 and an RTX 3090 runs at the slower card's pace.

use crate::gpu::Gpu;
use crate::job::GpuRequest;

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
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..64u32)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u32 * 64 + b)
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
/// `None` when they are not there. With a type, the lowest free indices of
/// that type; without, the type whose free pool is the smallest that fits
/// (best fit keeps large pools whole for large jobs), ties in config order.
pub fn place(request: &GpuRequest, free: &GpuSet, inventory: &[Gpu]) -> Option<Vec<u32>> {
    let count = request.count as usize;
    if count == 0 {
        return Some(Vec::new());
    }
    let free_of = |gpu_type: &str| -> Vec<u32> {
        inventory
            .iter()
            .filter(|g| g.gpu_type == gpu_type && free.contains(g.index))
            .map(|g| g.index)
            .collect()
    };
    match &request.gpu_type {
        Some(t) => {
            let pool = free_of(t);
            (pool.len() >= count).then(|| pool[..count].to_vec())
        }
        None => {
            let mut types: Vec<&str> = Vec::new();
            for g in inventory {
                if !types.contains(&g.gpu_type.as_str()) {
                    types.push(&g.gpu_type);
                }
            }
            types
                .into_iter()
                .map(free_of)
                .filter(|pool| pool.len() >= count)
                .min_by_key(|pool| pool.len())
                .map(|pool| pool[..count].to_vec())
        }
    }
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
            });
        }
        v
    }

    fn req(count: u32, t: Option<&str>) -> GpuRequest {
        GpuRequest {
            count,
            gpu_type: t.map(String::from),
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
}
