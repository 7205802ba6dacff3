//! Python's slice semantics, for the outputs `sliced_scan` keeps.

use crate::VmapError;

/// Python's `slice(start, stop, step)`: `None` is Python's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct SliceSpec {
    pub(super) start: Option<isize>,
    pub(super) stop: Option<isize>,
    pub(super) step: Option<isize>,
}

/// The indices `range(*slice(start, stop, step).indices(n))` selects, in order.
///
/// # Errors
/// [`VmapError::SliceStepZero`] for a step of 0.
pub(super) fn slice_indices(n: usize, s: SliceSpec) -> Result<Vec<usize>, VmapError> {
    let step = s.step.unwrap_or(1);
    if step == 0 {
        return Err(VmapError::SliceStepZero);
    }
    let n = n as isize;
    let (lower, upper) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let clamp = |v: isize| {
        if v < 0 {
            (v + n).max(lower)
        } else {
            v.min(upper)
        }
    };
    let start = s.start.map_or(if step > 0 { lower } else { upper }, clamp);
    let stop = s.stop.map_or(if step > 0 { upper } else { lower }, clamp);
    let mut out = Vec::new();
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(i as usize);
        i += step;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(start: Option<isize>, stop: Option<isize>, step: Option<isize>) -> SliceSpec {
        SliceSpec { start, stop, step }
    }

    #[test]
    fn should_select_like_python() {
        assert_eq!(
            slice_indices(10, s(None, None, None)).unwrap(),
            (0..10).collect::<Vec<_>>()
        );
        assert_eq!(
            slice_indices(10, s(Some(1), Some(9), Some(3))).unwrap(),
            vec![1, 4, 7]
        );
        assert_eq!(
            slice_indices(10, s(Some(8), Some(1), Some(-3))).unwrap(),
            vec![8, 5, 2]
        );
        assert_eq!(
            slice_indices(10, s(None, None, Some(-2))).unwrap(),
            vec![9, 7, 5, 3, 1]
        );
        assert_eq!(
            slice_indices(10, s(Some(-3), None, None)).unwrap(),
            vec![7, 8, 9]
        );
        assert_eq!(
            slice_indices(10, s(Some(5), Some(5), None)).unwrap(),
            Vec::<usize>::new()
        );
        assert_eq!(
            slice_indices(10, s(Some(0), Some(10), Some(9))).unwrap(),
            vec![0, 9]
        );
        assert_eq!(
            slice_indices(0, s(None, None, Some(-1))).unwrap(),
            Vec::<usize>::new()
        );
        assert_eq!(
            slice_indices(3, s(None, None, Some(0))).unwrap_err(),
            VmapError::SliceStepZero
        );
    }
}
