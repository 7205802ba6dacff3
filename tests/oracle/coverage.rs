//! Coverage: which of Burn 0.22.1's `burn_ir::OperationIr` variants the oracle cases exercise.
//!
//! A transform records the user's function on Burn's capture device and runs the recording
//! operation by operation (`src/graph/ops/`, the interpreter's one match over
//! `OperationIr`). Here every registered oracle case is recorded the same way, on a capture
//! device of its own, for a few drawn parameters, and the variants of the recorded operations
//! are collected. A variant that no case produces fails
//! `every_operation_variant_has_an_oracle_case`, unless it is in [`ALLOWED`] with the reason no
//! oracle case can produce it; an allow-listed variant that a case does produce fails too (the
//! list must stay true).
//!
//! The variant lists come from exhaustive matches (no wildcard): a Burn release that adds a
//! variant fails to compile here until it is listed.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use burn::tensor::{Device, DeviceConfig};
use burn_ir::{
    ActivationOperationIr, BaseOperationIr, BoolOperationIr, DistributedOperationIr,
    FloatOperationIr, IntOperationIr, ModuleOperationIr, NumericOperationIr, OperationIr,
};

use crate::harness::{P, Rng, quietly};
use crate::host::Host;
use crate::run::OpCase;

/// The variant names of `$E` (`$list`) and `$fname`, a variant's name; exhaustive by
/// construction.
macro_rules! variants {
    ($fname:ident, $list:ident, $E:ident { $($v:ident),* $(,)? }) => {
        const $list: &[&str] = &[$(stringify!($v)),*];
        fn $fname(op: &$E) -> &'static str {
            match op {
                $($E::$v { .. } => stringify!($v),)*
            }
        }
    };
}

variants!(
    base,
    BASE,
    BaseOperationIr {
        Reshape,
        SwapDims,
        Permute,
        Flip,
        Expand,
        Unfold,
        Slice,
        SliceAssign,
        Select,
        SelectAssign,
        MaskWhere,
        MaskFill,
        Gather,
        Scatter,
        ScatterNd,
        GatherNd,
        Equal,
        EqualElem,
        RepeatDim,
        Cat,
        Cast,
        Empty,
        Ones,
        Zeros,
        NotEqual,
        NotEqualElem,
        All,
        Any,
        AllDim,
        AnyDim,
    }
);
variants!(
    numeric,
    NUMERIC,
    NumericOperationIr {
        Add,
        AddScalar,
        Sub,
        SubScalar,
        Div,
        DivScalar,
        Rem,
        RemScalar,
        Mul,
        MulScalar,
        Abs,
        Full,
        MeanDim,
        Mean,
        Sum,
        SumDim,
        SumDims,
        Prod,
        ProdDim,
        Greater,
        GreaterElem,
        GreaterEqual,
        GreaterEqualElem,
        Lower,
        LowerElem,
        LowerEqual,
        LowerEqualElem,
        ArgMax,
        ArgTopK,
        TopK,
        TopKWithIndices,
        ArgMin,
        Max,
        MaxDimWithIndices,
        MinDimWithIndices,
        Min,
        MaxDim,
        MinDim,
        MaxAbs,
        MaxAbsDim,
        Clamp,
        IntRandom,
        Powi,
        PowiScalar,
        CumSum,
        CumProd,
        CumMin,
        CumMax,
        Neg,
        Sign,
        ClampMin,
        ClampMax,
        Sort,
        SortWithIndices,
        ArgSort,
        Pad,
    }
);
variants!(
    float,
    FLOAT,
    FloatOperationIr {
        Exp,
        Log,
        Log1p,
        Erf,
        PowfScalar,
        Sqrt,
        Cos,
        Cosh,
        Sin,
        Sinh,
        Tan,
        Tanh,
        ArcCos,
        ArcCosh,
        ArcSin,
        ArcSinh,
        ArcTan,
        ArcTanh,
        ArcTan2,
        Round,
        Floor,
        Ceil,
        Trunc,
        IntoInt,
        Matmul,
        Cross,
        Random,
        Recip,
        IsNan,
        IsInf,
        Quantize,
        Dequantize,
        GridSample2d,
        Powf,
        Hypot,
    }
);
variants!(
    int,
    INT,
    IntOperationIr {
        IntoFloat,
        BitwiseAnd,
        BitwiseAndScalar,
        BitwiseOr,
        BitwiseOrScalar,
        BitwiseXor,
        BitwiseXorScalar,
        BitwiseNot,
        BitwiseLeftShift,
        BitwiseLeftShiftScalar,
        BitwiseRightShift,
        BitwiseRightShiftScalar,
        Matmul,
    }
);
variants!(
    boolean,
    BOOL,
    BoolOperationIr {
        IntoFloat,
        IntoInt,
        Not,
        And,
        Or,
        Xor
    }
);
variants!(
    module,
    MODULE,
    ModuleOperationIr {
        BatchNorm,
        Embedding,
        EmbeddingBackward,
        Linear,
        LinearXBackward,
        LinearWeightBackward,
        LinearBiasBackward,
        Conv1d,
        Conv1dXBackward,
        Conv1dWeightBackward,
        Conv1dBiasBackward,
        Conv2d,
        Conv2dXBackward,
        Conv2dWeightBackward,
        Conv2dBiasBackward,
        Conv3d,
        Conv3dXBackward,
        Conv3dWeightBackward,
        Conv3dBiasBackward,
        DeformableConv2d,
        DeformableConv2dBackward,
        ConvTranspose1d,
        ConvTranspose2d,
        ConvTranspose3d,
        AvgPool1d,
        AvgPool2d,
        AvgPool1dBackward,
        AvgPool2dBackward,
        AdaptiveAvgPool1d,
        AdaptiveAvgPool2d,
        AdaptiveAvgPool1dBackward,
        AdaptiveAvgPool2dBackward,
        AdaptiveAvgPool3d,
        AdaptiveAvgPool3dBackward,
        MaxPool1d,
        MaxPool1dWithIndices,
        MaxPool1dWithIndicesBackward,
        MaxPool2d,
        MaxPool2dWithIndices,
        MaxPool2dWithIndicesBackward,
        Interpolate,
        InterpolateBackward,
        Attention,
        CtcLoss,
        CtcLossBackward,
        LayerNorm,
        Unfold4d,
        ConvTranspose1dWeightBackward,
        ConvTranspose1dBiasBackward,
        ConvTranspose2dWeightBackward,
        ConvTranspose2dBiasBackward,
        ConvTranspose3dWeightBackward,
        ConvTranspose3dBiasBackward,
    }
);
variants!(
    activation,
    ACTIVATION,
    ActivationOperationIr {
        Relu,
        ReluBackward,
        LeakyRelu,
        PRelu,
        Gelu,
        GeluBackward,
        Sigmoid,
        SigmoidBackward,
        HardSigmoid,
        LogSigmoid,
        LogSigmoidBackward,
        Softmax,
        LogSoftmax,
        Softmin,
    }
);
variants!(
    distributed,
    DISTRIBUTED,
    DistributedOperationIr {
        AllReduce,
        SyncCollective
    }
);

/// The name of a recorded operation: its `OperationIr` variant and, for the families, the
/// inner variant (`NumericInt::ArgMax`).
pub fn name(op: &OperationIr) -> String {
    match op {
        OperationIr::BaseFloat(o) => format!("BaseFloat::{}", base(o)),
        OperationIr::BaseInt(o) => format!("BaseInt::{}", base(o)),
        OperationIr::BaseBool(o) => format!("BaseBool::{}", base(o)),
        OperationIr::NumericFloat(_, o) => format!("NumericFloat::{}", numeric(o)),
        OperationIr::NumericInt(_, o) => format!("NumericInt::{}", numeric(o)),
        OperationIr::Bool(o) => format!("Bool::{}", boolean(o)),
        OperationIr::Int(o) => format!("Int::{}", int(o)),
        OperationIr::Float(_, o) => format!("Float::{}", float(o)),
        OperationIr::Module(o) => format!("Module::{}", module(o)),
        OperationIr::Activation(o) => format!("Activation::{}", activation(o)),
        OperationIr::Distributed(o) => format!("Distributed::{}", distributed(o)),
        OperationIr::Init(_) => "Init".into(),
        OperationIr::Custom(_) => "Custom".into(),
        OperationIr::Drop(_) => "Drop".into(),
    }
}

/// Every variant name of Burn 0.22.1's `OperationIr`.
pub fn universe() -> Vec<String> {
    let mut all = Vec::new();
    let family = |all: &mut Vec<String>, prefix: &str, list: &[&str]| {
        all.extend(list.iter().map(|v| format!("{prefix}::{v}")));
    };
    family(&mut all, "BaseFloat", BASE);
    family(&mut all, "BaseInt", BASE);
    family(&mut all, "BaseBool", BASE);
    family(&mut all, "NumericFloat", NUMERIC);
    family(&mut all, "NumericInt", NUMERIC);
    family(&mut all, "Bool", BOOL);
    family(&mut all, "Int", INT);
    family(&mut all, "Float", FLOAT);
    family(&mut all, "Module", MODULE);
    family(&mut all, "Activation", ACTIVATION);
    family(&mut all, "Distributed", DISTRIBUTED);
    all.extend(["Init", "Custom", "Drop"].map(String::from));
    all
}

/// Variants no oracle case produces, with the reason: none can be recorded by Burn 0.22.1's
/// capture device through its tensor API or its backend ops (`allow_listed_variants_are_not_
/// recorded` checks the claims that can be tried), or the transforms refuse them by design.
/// `*` matches any run of characters.
pub const ALLOWED: &[(&str, &str)] = &[
    (
        "BaseBool::GatherNd",
        "Burn 0.22.1's BoolTensorOps has no gather_nd: nothing records it for bools",
    ),
    (
        "BaseBool::ScatterNd",
        "Burn 0.22.1's BoolTensorOps has no scatter_nd: nothing records it for bools",
    ),
    (
        "BaseBool::Cast",
        "Burn 0.22.1's BoolTensorOps has no cast: nothing records it for bools",
    ),
    (
        "NumericFloat::IntRandom",
        "the int variant of random: a float draw records Float::Random",
    ),
    (
        "NumericFloat::Powi",
        "burn-router 0.22.1 cannot record float_powi (BinaryOpIr::create wants one dtype for \
         the float base and the int exponent: DTypeMismatch); Tensor::powi on floats records \
         Float::Powf",
    ),
    (
        "NumericInt::SumDims",
        "IntTensorOps has no int_sum_dims: Tensor::sum_dims on ints records one SumDim per dim",
    ),
    (
        "Float::IsNan",
        "burn-router 0.22.1 does not record float_is_nan: the default's comparisons are recorded",
    ),
    (
        "Float::IsInf",
        "burn-router 0.22.1 does not record float_is_inf: the default's comparisons are recorded",
    ),
    (
        "Float::*uantize",
        "quantized tensors: the capture device has no quantized dtype and the interpreter \
         refuses them (VmapError::UnsupportedOp)",
    ),
    (
        "Module::Linear*",
        "burn-dispatch 0.22.1 does not forward linear and its backward ops (a TODO in its \
         ModuleOps): the default's matmul and add are recorded (graph/rewrite.rs runs a \
         recorded matmul of a matrix as Module::Linear: cases linear, float_matmul)",
    ),
    (
        "Module::CtcLoss*",
        "burn-router 0.22.1 does not record ctc_loss nor its backward: the default's ops are \
         recorded (case ctc_loss)",
    ),
    (
        "Distributed::*",
        "collectives: one all-reduce per example has no meaning; the interpreter refuses them \
         (VmapError::UnsupportedOp)",
    ),
    (
        "Custom",
        "custom operations of backend extensions carry no batching rule; the interpreter \
         refuses them (VmapError::UnsupportedOp)",
    ),
];

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
    }
}

/// The reason `name` is allowed to be missing, if it is.
pub fn allowed(name: &str) -> Option<&'static str> {
    ALLOWED
        .iter()
        .find(|(p, _)| matches(p, name))
        .map(|(_, why)| *why)
}

thread_local! {
    /// A capture device with the user's device default dtypes, as the transforms record on.
    static DEVICE: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// The operations `f` records for arguments of `args`' values, on a capture device.
///
/// # Errors
/// When `f` panics (the recording is then incomplete) or Burn rejects the graph.
pub fn record(
    f: &dyn Fn(Vec<crate::harness::T>) -> Vec<crate::harness::T>,
    args: &[Host],
) -> Result<Vec<OperationIr>, String> {
    let (device, fresh) = DEVICE.with(|d| match &*d.borrow() {
        Some(d) => (d.clone(), false),
        None => (Device::capture(), true),
    });
    let settings = Device::default().settings();
    let mut panicked = None;
    let graph = device
        .capture_scope(|scope| {
            if fresh {
                let config = DeviceConfig::new(
                    Some(settings.float_dtype),
                    Some(settings.int_dtype),
                    Some(settings.bool_dtype),
                );
                device.clone().configure(config).expect("capture dtypes");
            }
            panicked = quietly(|| f(args.iter().map(|h| h.to_t_on(&device)).collect())).err();
            scope.complete([], [])
        })
        .map_err(|e| format!("{e:?}"))?;
    if fresh {
        DEVICE.with(|d| *d.borrow_mut() = Some(device));
    }
    match panicked {
        Some(message) => Err(format!("the function panicked: {message}")),
        None => Ok(graph.graph.operations),
    }
}

/// The variants each case records, for a few drawn parameters (every rank the case draws).
pub fn observe(cases: &[OpCase]) -> BTreeMap<String, BTreeSet<&'static str>> {
    let mut by_variant: BTreeMap<String, BTreeSet<&'static str>> = BTreeMap::new();
    for case in cases {
        for rank in case.ranks.clone() {
            for seed in 1..=3u64 {
                let p = P {
                    d: vec![2, 3, 2, 3],
                    rank,
                    seed,
                };
                let mut rng = Rng::new(seed);
                let args: Vec<Host> = (case.operands)(&p)
                    .iter()
                    .map(|o| Host::r#gen(&o.shape, &o.r#gen, &mut rng))
                    .collect();
                let f = |a| (case.f)(&p, a);
                let ops = record(&f, &args)
                    .unwrap_or_else(|e| panic!("{}: recording failed: {e}", case.name));
                for op in &ops {
                    by_variant.entry(name(op)).or_default().insert(case.name);
                }
            }
        }
    }
    by_variant
}

#[test]
fn every_operation_variant_has_an_oracle_case() {
    let cases = crate::all_cases();
    let mut names = BTreeSet::new();
    for c in &cases {
        assert!(
            names.insert(c.name),
            "duplicate oracle case name {}",
            c.name
        );
    }
    let seen = observe(&cases);
    let universe = universe();
    let unknown: Vec<&String> = seen.keys().filter(|k| !universe.contains(k)).collect();
    assert!(
        unknown.is_empty(),
        "variants outside the universe: {unknown:?}"
    );
    let bookkeeping = ["Init", "Drop"];
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    let mut allowed_n = 0;
    for v in &universe {
        let covered = seen.contains_key(v);
        match (covered, allowed(v)) {
            (true, Some(_)) => stale.push(v.clone()),
            (false, Some(_)) => allowed_n += 1,
            (false, None) if !bookkeeping.contains(&v.as_str()) => missing.push(v.clone()),
            _ => {}
        }
    }
    println!(
        "OperationIr variants: {} in Burn 0.22.1; {} produced by the {} oracle cases; {} allowed \
         to be missing",
        universe.len(),
        seen.len(),
        cases.len(),
        allowed_n
    );
    for (v, by) in &seen {
        let by: Vec<&str> = by.iter().take(4).copied().collect();
        println!("  {v:<44} <- {}", by.join(", "));
    }
    for v in &universe {
        if let (false, Some(why)) = (seen.contains_key(v), allowed(v)) {
            println!("  {v:<44} ALLOWED: {why}");
        }
    }
    assert!(
        stale.is_empty(),
        "allow-listed variants that an oracle case produces (drop them from ALLOWED): {stale:?}"
    );
    assert!(
        missing.is_empty(),
        "{} OperationIr variants no oracle case produces: {missing:?}",
        missing.len()
    );
}

/// The allow-list's claims that can be tried: recording the ops behind those variants on the
/// capture device records other variants (or, for `float_powi`, fails).
#[test]
fn allow_listed_variants_are_not_recorded() {
    use crate::harness::T;
    use burn::tensor::Tensor;
    use burn_backend::ops::{FloatTensorOps, ModuleOps};
    use burn_dispatch::Dispatch;
    let host =
        |shape: &[usize]| Host::r#gen(shape, &crate::harness::Gen::F(0.5, 1.5), &mut Rng::new(3));
    let ints = |shape: &[usize], hi: i64| {
        Host::r#gen(shape, &crate::harness::Gen::I(1, hi), &mut Rng::new(4))
    };
    type Tried = (&'static str, Box<dyn Fn(Vec<T>) -> Vec<T>>, Vec<Host>);
    let tried: Vec<Tried> = vec![
        (
            "Module::Linear",
            Box::new(|a: Vec<T>| {
                let (x, w) = (a[0].f::<2>(), a[1].f::<2>());
                vec![
                    T::from(burn::tensor::module::linear(x.clone(), w.clone(), None)),
                    T::from(Tensor::<2>::from_dispatch(
                        Dispatch::linear_weight_backward(
                            x.clone().into_dispatch(),
                            x.into_dispatch(),
                        ),
                    )),
                ]
            }),
            vec![host(&[2, 3]), host(&[3, 2])],
        ),
        (
            "Module::CtcLoss",
            Box::new(|a: Vec<T>| {
                let lp = burn::tensor::activation::log_softmax(a[0].f::<3>(), 2);
                vec![T::from(burn::tensor::module::ctc_loss(
                    lp,
                    a[1].i::<2>(),
                    a[2].i::<1>(),
                    a[3].i::<1>(),
                    0,
                ))]
            }),
            vec![
                host(&[5, 1, 3]),
                ints(&[1, 2], 2),
                ints(&[1], 5),
                ints(&[1], 2),
            ],
        ),
        (
            "Float::IsNan",
            Box::new(|a: Vec<T>| {
                let x = a[0].f::<1>().into_dispatch();
                let dt = burn::tensor::Device::default().settings().bool_dtype;
                vec![
                    T::from(Tensor::<1, burn::tensor::Bool>::from_dispatch(
                        Dispatch::float_is_nan(x.clone(), dt),
                    )),
                    T::from(Tensor::<1, burn::tensor::Bool>::from_dispatch(
                        Dispatch::float_is_inf(x, dt),
                    )),
                ]
            }),
            vec![host(&[3])],
        ),
        (
            "NumericInt::SumDims",
            Box::new(|a: Vec<T>| vec![T::from(a[0].i::<2>().sum_dims(&[0, 1]))]),
            vec![ints(&[2, 2], 3)],
        ),
        (
            "NumericFloat::Powi",
            Box::new(|a: Vec<T>| {
                let r = Dispatch::float_powi(
                    a[0].f::<1>().into_dispatch(),
                    a[1].i::<1>().into_dispatch(),
                );
                vec![T::from(Tensor::<1>::from_dispatch(r))]
            }),
            vec![host(&[3]), ints(&[3], 3)],
        ),
    ];
    for (variant, f, args) in tried {
        // A refusal to record (float_powi) records nothing of the variant either.
        let ops = record(&*f, &args).unwrap_or_default();
        let names: Vec<String> = ops.iter().map(name).collect();
        assert!(
            !names.iter().any(|n| n.starts_with(variant)),
            "{variant} is recorded now: add an oracle case and drop it from ALLOWED ({names:?})"
        );
        assert!(allowed(variant).is_some(), "{variant} is not allow-listed");
    }
}
