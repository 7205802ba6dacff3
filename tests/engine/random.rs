//! Random ops under each `Randomness` mode of the active levels.

use burn_backend::ops::{FloatTensorOps, IntTensorOps};
use burn_backend::{Distribution, FloatDType, IntDType};
use burn_vmap::Randomness;
use burn_vmap::level::VmapScope;

use crate::common::*;

fn draw() -> VT {
    V::float_random(shape(&[4]), Distribution::Default, &dev(), FloatDType::F32)
}

#[test]
fn should_draw_unbatched_outside_vmap() {
    assert!(!draw().is_batched());
}

#[test]
fn should_draw_per_example_in_different_mode() {
    let lv = Levels::new(&[3]);
    let (level, size) = lv.levels[0];
    let scope = VmapScope::enter(level, size, Randomness::Different);
    let x = draw();
    assert!(scope.take_refused().is_none());
    drop(scope);
    assert_eq!(x.batch_dims().size_at(level), Some(3));
    assert_eq!(dims(&x), vec![4]);
    let rows = read(x.into_parts().0);
    assert_ne!(rows[0..4], rows[4..8]);
    assert_ne!(rows[4..8], rows[8..12]);
}

#[test]
fn should_share_one_draw_in_same_mode() {
    let lv = Levels::new(&[3, 2]);
    let outer = VmapScope::enter(lv.levels[0].0, 3, Randomness::Same);
    let inner = VmapScope::enter(lv.levels[1].0, 2, Randomness::Different);
    let x = V::int_random(
        shape(&[5]),
        Distribution::Uniform(0.0, 100.0),
        &dev(),
        IntDType::I32,
    );
    drop(inner);
    drop(outer);
    // Batched at the inner level only.
    assert_eq!(x.batch_dims().len(), 1);
    assert_eq!(x.batch_dims().size_at(lv.levels[1].0), Some(2));
}

#[test]
fn should_record_a_refusal_in_error_mode() {
    let lv = Levels::new(&[3]);
    let (level, size) = lv.levels[0];
    let scope = VmapScope::enter(level, size, Randomness::Error);
    let x = draw();
    // The draw returns an unbatched placeholder so that the function can finish...
    assert!(!x.is_batched());
    // ...and the level's vmap call reports the refusal.
    let refused = scope.take_refused().expect("a refusal");
    assert_eq!(refused.op, "float_random");
    assert_eq!((refused.level, refused.size), (level, 3));
    assert!(scope.take_refused().is_none());
}
