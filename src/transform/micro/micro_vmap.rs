//! [`micro_vmap`]: a vmap run in microbatches, with accumulators.

use super::batches::{Microbatching, run_microbatched};
use super::step::{StepInputs, VmapStep};
use crate::VmapError;
use crate::accumulate::{AccOutput, Concat, Outputs, accumulator_spec};
use crate::level::Randomness;
use crate::transform::Axes;
use crate::transform::axes::map_inputs;
use crate::transform::draws::{draw_seed, seeded};
use crate::transform::run::{Cache, any_autodiff, common_device, example_sigs, record};
use crate::tree::{Spec, Tree};

const T: &str = "micro_vmap";

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
/// The accumulator (default [`Concat`]: the same result as [`vmap`](crate::vmap)) is a tree
/// prefix of the output: see [`accumulate`](crate::accumulate). [`Concat`] restores the
/// original order and leaves zeros in rows not run; [`Mean`](crate::accumulate::Mean) divides
/// by the TOTAL number of microbatches even when fewer run;
/// [`RunningMean`](crate::accumulate::RunningMean) averages the ones run.
///
/// `f` is recorded once, for one example (see [`vmap`](crate::vmap) for what a recording
/// implies), and each microbatch runs as one batched computation; peak memory is that of one
/// microbatch plus the accumulators' carries.
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::accumulate::Mean;
/// use burn_vmap::micro_vmap;
/// // Eight examples of one feature each.
/// let xs = Tensor::<1>::from_floats([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], &Device::default())
///     .reshape([8, 1]);
/// let square = |x: Tensor<1>| x.clone() * x;
///
/// let all = micro_vmap(square).microbatch_size(2).call(xs.clone()).unwrap();
/// assert_eq!(all.into_data().to_vec::<f32>().unwrap(), vec![0., 1., 4., 9., 16., 25., 36., 49.]);
///
/// // Two of the four microbatches (rows {0,4} and {1,5}); Mean divides by all four.
/// let mean = micro_vmap(square)
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
        randomness: Randomness::Error,
        accumulator: Concat,
        cache: Cache::default(),
    }
}

/// A function vectorized by [`micro_vmap`]; `S` is its accumulator tree. One builder serves
/// many calls: it holds the recordings of `f`, one per argument signature.
///
/// ```
/// use burn::tensor::{Device, Tensor};
/// use burn_vmap::accumulate::Sum;
/// use burn_vmap::transform::micro::MicroVmap;
/// let summed: MicroVmap<_, Sum> = burn_vmap::micro_vmap(|x: Tensor<1>| x * 2.0).accumulator(Sum);
/// for b in [2, 4] {
///     let total = summed.call(Tensor::<2>::ones([b, 3], &Device::default())).unwrap();
///     assert_eq!(total.into_data().to_vec::<f32>().unwrap(), vec![2.0 * b as f32; 3]);
/// }
/// ```
#[derive(Debug, Clone)]
pub struct MicroVmap<F, S = Concat> {
    f: F,
    in_axes: Axes,
    micro: Microbatching,
    randomness: Randomness,
    accumulator: S,
    cache: Cache,
}

impl<F, S> MicroVmap<F, S> {
    /// The batch axis of every argument (a tree prefix; `None` = passed whole). Default `0`.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_vmap;
    /// let device = Device::default();
    /// let xs = Tensor::<2>::ones([3, 4], &device); // the batch on axis 1
    /// let w = Tensor::<1>::from_floats([1.0, 2.0, 3.0], &device);
    /// let out = micro_vmap(|(x, w): (Tensor<1>, Tensor<1>)| (x * w).sum())
    ///     .in_axes([Some(1), None])
    ///     .microbatch_size(2)
    ///     .call((xs, w))
    ///     .unwrap();
    /// assert_eq!(out.into_data().to_vec::<f32>().unwrap(), vec![6.0; 4]);
    /// ```
    pub fn in_axes(mut self, axes: impl Into<Axes>) -> Self {
        self.in_axes = axes.into();
        self
    }

    /// Only `0` is supported, as in optax.
    ///
    /// ```
    /// use burn::tensor::Tensor;
    /// use burn_vmap::{micro_vmap, VmapError};
    /// let f = |x: Tensor<1>| x;
    /// assert!(micro_vmap(f).out_axes(0).is_ok());
    /// assert!(matches!(micro_vmap(f).out_axes(1), Err(VmapError::UnsupportedOutAxes { .. })));
    /// ```
    ///
    /// # Errors
    /// [`VmapError::UnsupportedOutAxes`] for anything else, when the transform is built.
    pub fn out_axes(self, axes: impl Into<Axes>) -> Result<Self, VmapError> {
        match axes.into() {
            Spec::Leaf(Some(0)) => Ok(self),
            other => Err(VmapError::UnsupportedOutAxes {
                out_axes: format!("{other:?}"),
            }),
        }
    }

    /// Examples per microbatch (`None`, the default: one batched run over the whole batch).
    /// Must divide the batch.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{micro_vmap, VmapError};
    /// let xs = Tensor::<2>::ones([6, 2], &Device::default());
    /// let err = micro_vmap(|x: Tensor<1>| x).microbatch_size(4).call(xs).unwrap_err();
    /// assert!(matches!(err, VmapError::NonDividingMicrobatchSize { batch_size: 6, microbatch_size: 4 }));
    /// ```
    pub fn microbatch_size(mut self, size: impl Into<Option<usize>>) -> Self {
        self.micro.microbatch_size = size.into();
        self
    }

    /// Runs only the first `n` microbatches (ignored without a microbatch size); see also
    /// [`call_with`](Self::call_with), which sets it per call.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_vmap;
    /// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Device::default());
    /// let out = micro_vmap(|x: Tensor<1>| x)
    ///     .microbatch_size(1)
    ///     .num_real_microbatches(Some(3))
    ///     .call(xs)
    ///     .unwrap();
    /// assert_eq!(out.into_data().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 0.0]);
    /// ```
    pub fn num_real_microbatches(mut self, n: Option<usize>) -> Self {
        self.micro.num_real_microbatches = n;
        self
    }

    /// What random ops inside `f` do, as [`Vmapped::randomness`](crate::transform::vmap::Vmapped::randomness)
    /// (default [`Randomness::Error`]; `Randomness::Different` gives every example its own
    /// draws, as dropout needs).
    ///
    /// ```
    /// use burn::tensor::{Device, Distribution, Tensor};
    /// use burn_vmap::{micro_vmap, Randomness};
    /// let xs = Tensor::<2>::zeros([4, 3], &Device::default());
    /// let noisy = micro_vmap(|x: Tensor<1>| x.clone() + x.random_like(Distribution::Default))
    ///     .microbatch_size(2)
    ///     .randomness(Randomness::Different)
    ///     .call(xs)
    ///     .unwrap();
    /// assert_eq!(noisy.dims(), [4, 3]);
    /// ```
    pub fn randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    /// The accumulator tree: a prefix of the output tree whose leaves are accumulators (see
    /// [`accumulate`](crate::accumulate)).
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{accumulate::Sum, micro_vmap};
    /// let xs = Tensor::<2>::ones([4, 3], &Device::default());
    /// let total = micro_vmap(|x: Tensor<1>| x).accumulator(Sum).call(xs).unwrap();
    /// assert_eq!(total.into_data().to_vec::<f32>().unwrap(), vec![4.0; 3]);
    /// ```
    pub fn accumulator<S2>(self, accumulator: S2) -> MicroVmap<F, S2> {
        MicroVmap {
            f: self.f,
            in_axes: self.in_axes,
            micro: self.micro,
            randomness: self.randomness,
            accumulator,
            cache: self.cache,
        }
    }

    /// Applies the transform; the result type follows from `f`'s output `R` and the
    /// accumulator ([`AccOutput`]): an output leaf accumulated by [`Concat`] gains the batch
    /// axis, a reduced one keeps `f`'s shape. `I` is the batched argument tree, `A` what `f`
    /// takes.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::micro_vmap;
    /// let xs = Tensor::<2>::ones([4, 3], &Device::default());
    /// let sums = micro_vmap(|x: Tensor<1>| x.sum()).microbatch_size(2).call(xs).unwrap();
    /// assert_eq!(sums.dims(), [4, 1]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_vmap`].
    pub fn call<I, A, R>(&self, inputs: I) -> Result<S::Output, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree,
        S: Tree + Clone + AccOutput<R>,
    {
        self.run::<I, A, R, S::Output>(inputs, self.micro.num_real_microbatches)
    }

    /// As [`call`](MicroVmap::call), with `num_real_microbatches` for this call only.
    ///
    /// ```
    /// use burn::tensor::{Device, Tensor};
    /// use burn_vmap::{accumulate::Sum, micro_vmap};
    /// let xs = Tensor::<2>::from_floats([[1.0], [2.0], [3.0], [4.0]], &Device::default());
    /// let summed = micro_vmap(|x: Tensor<1>| x).microbatch_size(1).accumulator(Sum);
    /// let first_two = summed.call_with(xs.clone(), Some(2)).unwrap();
    /// assert_eq!(first_two.into_data().to_vec::<f32>().unwrap(), vec![3.0]);
    /// assert_eq!(summed.call(xs).unwrap().into_data().to_vec::<f32>().unwrap(), vec![10.0]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_vmap`].
    pub fn call_with<I, A, R>(
        &self,
        inputs: I,
        num_real_microbatches: Option<usize>,
    ) -> Result<S::Output, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree,
        S: Tree + Clone + AccOutput<R>,
    {
        self.run::<I, A, R, S::Output>(inputs, num_real_microbatches)
    }

    /// As [`call`](MicroVmap::call), with the result type `O` named by the caller (`let out: O
    /// = micro_vmap(f).call_as(xs)?`), for accumulator trees without an [`AccOutput`] (a
    /// [`Spec`], a custom accumulator, `Mean` over ints).
    ///
    /// ```
    /// use burn::tensor::{Device, Int, Tensor};
    /// use burn_vmap::{accumulate::Mean, micro_vmap};
    /// let xs = Tensor::<2, Int>::from_ints([[1], [2], [3], [4]], &Device::default());
    /// // The mean of ints is a float.
    /// let m: Tensor<1> = micro_vmap(|x: Tensor<1, Int>| x).accumulator(Mean).call_as(xs).unwrap();
    /// assert_eq!(m.into_data().to_vec::<f32>().unwrap(), vec![2.5]);
    /// ```
    ///
    /// # Errors
    /// See [`micro_vmap`].
    pub fn call_as<I, A, R, O>(&self, inputs: I) -> Result<O, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree,
        S: Tree + Clone,
        O: Tree,
    {
        self.run::<I, A, R, O>(inputs, self.micro.num_real_microbatches)
    }

    /// Records `f` (or takes the cached recording) and runs it microbatch by microbatch.
    fn run<I, A, R, O>(&self, inputs: I, num_real: Option<usize>) -> Result<O, VmapError>
    where
        F: Fn(A) -> R,
        I: Tree,
        A: Tree,
        R: Tree,
        S: Tree + Clone,
        O: Tree,
    {
        let spec = accumulator_spec(&self.accumulator.clone().flatten().1)?;
        let (leaves, def) = inputs.flatten();
        let mapped = map_inputs(T, leaves, def, &self.in_axes)?;
        let device = common_device(T, &mapped.leaves)?;
        let sigs = example_sigs(&mapped.leaves, &mapped.axes);
        let autodiff = any_autodiff(&mapped.leaves);
        let recorded = self.cache.get_or_record(&mapped.def, &sigs, autodiff, || {
            record::<A, R>(T, &self.f, &mapped.def, &sigs, autodiff)
        })?;
        let accs = spec.broadcast_to(&recorded.out_def, "accumulator", "out")?;
        let out_sigs: Vec<_> = recorded.program.output_sigs().collect();
        let paths = recorded.out_def.leaf_paths("out");
        let outs = Outputs {
            accs: &accs,
            sigs: &out_sigs,
            paths: &paths,
        };
        let micro = Microbatching {
            num_real_microbatches: num_real,
            ..self.micro
        };
        // `Randomness::Same` shares one draw across the batch: every microbatch runs with the
        // generator seeded alike, so it draws what the first one drew (`transform::draws`).
        let same = (self.randomness == Randomness::Same && micro.microbatch_size.is_some())
            .then(|| draw_seed(&device));
        let leaves = run_microbatched(&mapped, micro, outs, &device, |leaves, size, reduce| {
            let step = || {
                VmapStep {
                    transform: T,
                    program: &recorded.program,
                    inputs: StepInputs {
                        leaves,
                        axes: mapped.axes.clone(),
                        unit: vec![false; mapped.axes.len()],
                        size,
                    },
                    reduce,
                    randomness: self.randomness,
                }
                .run_on(&device)
            };
            match same {
                Some(seed) => seeded(&device, Some(seed), T, step).0,
                None => step(),
            }
        })
        .map_err(|e| e.in_transform(T))?;
        O::unflatten_named(&recorded.out_def, leaves, "out")
    }
}
