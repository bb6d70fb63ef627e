//! The rule a leader keeps; the election itself is tested against a
//! real etcd in tests/suite/standby.rs.

use super::*;

#[test]
fn a_leader_acts_only_within_its_deadline_on_its_own_clock() {
    let proven = Instant::now();
    let deadline = Duration::from_secs(5);
    assert!(may_act(proven, proven, deadline));
    assert!(may_act(
        proven,
        proven + Duration::from_millis(4_999),
        deadline
    ));
    assert!(!may_act(proven, proven + deadline, deadline));
    // A clock read before the proof (another thread's) does not extend it.
    assert!(may_act(proven + Duration::from_secs(1), proven, deadline));
}
