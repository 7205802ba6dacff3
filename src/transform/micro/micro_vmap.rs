//! [`micro_vmap`]: a vmap run in microbatches, with accumulators.

use super::run::{Microbatching, microbatching_setters, run_microbatched};
use super::{Axes, PlainVmap, VmapFn};
use crate::VmapError;
use crate::accumulate::{AccOutput, Concat, accumulator_spec};
use crate::transform::axes::map_inputs;
use crate::transform::transform_call;
use crate::tree::{Spec, Tree};

/// A [`vmap`](crate::vmap) that runs in microbatches and accumulates: optax's
/// `optax.microbatching.micro_vmap`.
///
/// ```text
/// n = B / microbatch_size
/// for k in 0..num_real_microbatches (default n):
///     rows  = [k, k+n, k+2n, ...]                    # strided microbatches, as optax
///     value = accumulator.aggregate(vmap(f)(args[rows]))
///     carry = accumulator.update(carry or init(value), value, k)
/// return accumulator.finalize(carry)
/// # no microbatch_size: accumulator.aggregate(vmap(f)(args)); num_real_microbatches is ignored
/// ```
///
/// The accumulator (default [`Concat`]: the same result as [`vmap`](crate::vmap)) is a tree prefix of the
/// output: see [`accumulate`](crate::accumulate). [`Concat`] restores the original order
/// and leaves zeros in rows not run; [`Mean`](crate::accumulate::Mean) divides by the TOTAL number of
/// microbatches even when fewer run; [`RunningMean`](crate::accumulate::RunningMean) averages the ones run.
/// Peak memory is that of one microbatch (plus the accumulators' carries).
///
/// # Example
/// ```
/// use burn::tensor::Tensor;
/// use burn_vmap::accumulate::Mean;
/// use burn_vmap::testing::TestBackend;
/// use burn_vmap::{micro_vmap, Vmap};
/// type B = Vmap<TestBackend>;
/// // Eight examples of one feature each.
/// let xs = Tensor::<B, 1>::from_floats([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &Default::default())
///     .reshape([8, 1]);
/// let square = |x: Tensor<B, 1>| x.clone() * x;
///
/// let all: Tensor<B, 2> = micro_vmap(square).microbatch_size(2).call(xs.clone()).unwrap();
/// assert_eq!(all.into_data().to_vec::<f32>().unwrap(), vec![0., 1., 4., 9., 16., 25., 36., 49.]);
///
/// // Two of the four microbatches (rows {0,4} and {1,5}); Mean divides by all four.
/// let mean: Tensor<B, 1> = micro_vmap(square)
///     .microbatch_size(2)
///     .accumulator(Mean)
///     .num_real_microbatches(Some(2))
///     .call(xs)
///     .unwrap();
/// assert_eq!(mean.into_data().to_vec::<f32>().unwrap(), vec![(0.0 + 16.0 + 1.0 + 25.0) / 2.0 / 4.0]);
/// ```
///
/// # Errors
/// As [`vmap`](crate::vmap), plus [`VmapError::NonDividingMicrobatchSize`],
/// [`VmapError::NumRealMicrobatchesOutOfRange`], [`VmapError::UnsupportedOutAxes`] (from
/// [`MicroVmap::out_axes`]), [`VmapError::TreeMismatch`] for an accumulator tree that does not
/// fit the output, and [`VmapError::AccumulatorRows`] for a custom accumulator returning the
/// wrong number of rows.
pub fn micro_vmap<F>(f: F) -> MicroVmap<F> {
    MicroVmap {
        f,
        in_axes: Spec::Leaf(Some(0)),
        micro: Microbatching::default(),
        accumulator: Concat,
        vmap_fn: PlainVmap,
    }
}

/// A function vectorized by [`micro_vmap`].
#[derive(Debug, Clone)]
pub struct MicroVmap<F, S = Concat, V = PlainVmap> {
    f: F,
    in_axes: Axes,
    micro: Microbatching,
    accumulator: S,
    vmap_fn: V,
}

impl<F, S, V> MicroVmap<F, S, V> {
    /// The batch axis of every argument (a tree prefix; `None` = passed whole). Default `0`.
    pub fn in_axes(mut self, axes: impl Into<Axes>) -> Self {
        self.in_axes = axes.into();
        self
    }

    /// Only `0` is supported, as in optax.
    ///
    /// # Errors
    /// [`VmapError::UnsupportedOutAxes`] for anything else, when the transform is built.
    pub fn out_axes(self, axes: impl Into<Axes>) -> Result<Self, VmapError> {
        let axes = axes.into();
        match axes {
            Spec::Leaf(Some(0)) => Ok(self),
            other => Err(VmapError::UnsupportedOutAxes {
                out_axes: format!("{other:?}"),
            }),
        }
    }

    microbatching_setters!(micro);

    /// The accumulator tree: a prefix of the output tree whose leaves are accumulators.
    pub fn accumulator<S2>(self, accumulator: S2) -> MicroVmap<F, S2, V> {
        self.map_parts(|_, vmap_fn| (accumulator, vmap_fn))
    }

    /// What random ops inside `f` do, as [`Vmapped::randomness`](crate::transform::vmap::Vmapped::randomness):
    /// the vectorizer becomes a plain vmap with that mode (`Randomness::Different` gives every
    /// example its own draws, as dropout needs).
    pub fn randomness(self, randomness: crate::Randomness) -> MicroVmap<F, S, crate::Randomness> {
        self.vmap_fn(randomness)
    }

    /// The vectorizer run on each microbatch (default [`PlainVmap`]).
    pub fn vmap_fn<V2: VmapFn>(self, vmap_fn: V2) -> MicroVmap<F, S, V2> {
        self.map_parts(|accumulator, _| (accumulator, vmap_fn))
    }

    /// The same transform with the typed parts (accumulator, vectorizer) replaced by what
    /// `parts` makes of them: the one place the type-changing setters rebuild the builder.
    fn map_parts<S2, V2>(self, parts: impl FnOnce(S, V) -> (S2, V2)) -> MicroVmap<F, S2, V2> {
        let (accumulator, vmap_fn) = parts(self.accumulator, self.vmap_fn);
        MicroVmap {
            f: self.f,
            in_axes: self.in_axes,
            micro: self.micro,
            accumulator,
            vmap_fn,
        }
    }

    transform_call! {
        lifted;
        /// Applies the transform; the result type follows from `f`'s output and the accumulator
        /// ([`AccOutput`]): an output leaf accumulated by [`Concat`] gains the batch axis, a
        /// reduced one keeps `f`'s shape.
        ///
        /// # Errors
        /// See [`micro_vmap`].
        [S: Tree<BO> + Clone + AccOutput<BO, R>, V: VmapFn]
        pub fn call(&self, inputs: I) -> Result<S::Output, VmapError> {
            self.run(inputs, self.micro.num_real_microbatches)
        }
    }

    transform_call! {
        lifted;
        /// As [`call`](MicroVmap::call), with `num_real_microbatches` for this call only.
        ///
        /// # Errors
        /// See [`micro_vmap`].
        [S: Tree<BO> + Clone + AccOutput<BO, R>, V: VmapFn]
        pub fn call_with(
            &self,
            inputs: I,
            num_real_microbatches: Option<usize>,
        ) -> Result<S::Output, VmapError> {
            self.run(inputs, num_real_microbatches)
        }
    }

    transform_call! {
        vectorized;
        /// As [`call`](MicroVmap::call), with the result type `O` named by the caller (`let out:
        /// O = micro_vmap(f).call_as(xs)?`), for accumulator trees without an [`AccOutput`]
        /// (a [`Spec`], a custom accumulator).
        ///
        /// # Errors
        /// See [`micro_vmap`].
        [S: Tree<BO> + Clone, V: VmapFn]
        pub fn call_as(&self, inputs: I) -> Result<O, VmapError> {
            self.run(inputs, self.micro.num_real_microbatches)
        }
    }

    transform_call! {
        vectorized;
        [S: Tree<BO> + Clone, V: VmapFn]
        fn run(&self, inputs: I, num_real_microbatches: Option<usize>) -> Result<O, VmapError> {
            let acc = accumulator_spec::<BO>(&self.accumulator.clone().flatten().1)?;
            let mapped = map_inputs(inputs, &self.in_axes)?;
            let micro = Microbatching {
                num_real_microbatches,
                ..self.micro
            };
            let out = run_microbatched(&self.f, &self.vmap_fn, &self.in_axes, mapped, micro, &acc)
                .map_err(|e| e.in_transform("micro_vmap"))?;
            out.into_tree("out")
        }
    }
}
