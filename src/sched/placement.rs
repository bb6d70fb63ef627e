//! Which GPUs a job gets. All GPUs of one job are of one type: a training
//! run split over an A100 and an RTX 3090 runs at the slower card's pace.

use std::collections::BTreeSet;

use crate::gpu::Gpu;
use crate::job::GpuRequest;

/// Picks GPUs for `request` among `free` (indices into `inventory`), or
/// `None` when they are not there. With a type, the lowest free indices of
/// that type; without, the type whose free pool is the smallest that fits
/// (best fit keeps large pools whole for large jobs), ties in config order.
pub fn place(request: &GpuRequest, free: &BTreeSet<u32>, inventory: &[Gpu]) -> Option<Vec<u32>> {
    let count = request.count as usize;
    if count == 0 {
        return Some(Vec::new());
    }
    let free_of = |gpu_type: &str| -> Vec<u32> {
        inventory
            .iter()
            .filter(|g| g.gpu_type == gpu_type && free.contains(&g.index))
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
        let free: BTreeSet<u32> = [1, 3, 4, 5].into();
        assert_eq!(
            place(&req(2, Some("a100")), &free, &inventory()),
            Some(vec![1, 3])
        );
        assert_eq!(place(&req(3, Some("a100")), &free, &inventory()), None);
        assert_eq!(place(&req(1, Some("v100")), &free, &inventory()), None);
    }

    #[test]
    fn untyped_requests_best_fit_and_never_mix_types() {
        let all: BTreeSet<u32> = (0..6).collect();
        assert_eq!(
            place(&req(2, None), &all, &inventory()),
            Some(vec![4, 5]),
            "the smaller pool that fits"
        );
        assert_eq!(
            place(&req(3, None), &all, &inventory()),
            Some(vec![0, 1, 2])
        );
        let free: BTreeSet<u32> = [0, 1, 4].into();
        assert_eq!(
            place(&req(3, None), &free, &inventory()),
            None,
            "2 a100 + 1 t4 is not a placement"
        );
        assert_eq!(
            place(&req(0, None), &BTreeSet::new(), &inventory()),
            Some(vec![])
        );
    }
}
