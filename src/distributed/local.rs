//! [`Local`]: the engine of a job with one rank, where every collective is the identity.

use std::time::Duration;

use super::{Collective, CollectiveError, check_root};

/// One rank alone (size 1): sums and broadcasts leave the buffers as they are. The engine a
/// trainer uses when no other is configured, so one-process code runs the data-parallel path
/// unchanged.
///
/// ```
/// use std::time::Duration;
/// use burn_vmap::distributed::{Collective, CollectiveError, Local};
///
/// let mut seed = [7u8; 4];
/// Local.broadcast_bytes(&mut seed, 0, Duration::ZERO).unwrap();
/// assert_eq!(seed, [7; 4]);
/// let err = Local.broadcast(&mut [1.0], 1, Duration::ZERO).unwrap_err();
/// assert!(matches!(err, CollectiveError::Root { root: 1, size: 1, .. }));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Local;

impl Collective for Local {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn all_reduce_sum(&self, _: &mut [f32], _: Duration) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn broadcast(&self, _: &mut [f32], root: usize, _: Duration) -> Result<(), CollectiveError> {
        check_root("broadcast", root, 1)
    }

    fn broadcast_bytes(
        &self,
        _: &mut [u8],
        root: usize,
        _: Duration,
    ) -> Result<(), CollectiveError> {
        check_root("broadcast_bytes", root, 1)
    }
}
