//! Conformance runner over the reference vectors (`../shared/vectors`, see `FORMAT.md` there).
//!
//! Every `*.json` case of the directory named by `BURN_VMAP_VECTORS` (default
//! `<crate>/../shared/vectors`) is parsed into a [`Case`], its `program` id is mapped to a Rust
//! function (section "programs"), the transform named by `api` is applied with `params`
//! (section "apis"), and every key of `expected` is compared within the case's tolerance
//! (section "comparison"). One line is printed per case:
//!
//! ```text
//! PASS <name>
//! FAIL <name>: <why>
//! SKIP <name>: <api> not implemented yet
//! ```
//!
//! followed by `conformance: N passed, M failed, K skipped`; the test fails when `M > 0`.
//! `BURN_VMAP_FILTER=<substring>` restricts the run to the cases whose name contains it.
//!
//! Programs are written once, for any rank: arguments and results are dynamic pytrees ([`Pt`]),
//! which implement the library's [`Tree`] trait, and each program dispatches on the ranks it
//! gets (the rank it sees under `vmap` is the logical rank, mapped axes removed). So the same
//! program runs under any `in_axes` / `out_axes` / batch size, and on other backends
//! (`Vmap<_>`, `Autodiff<Vmap<_>>`, `Autodiff<_>`).
//!
//! To add an api: write `fn api_<name>(case: &Case) -> Result<Run, String>` in the "apis"
//! section and add it to [`run_api`]. To add a program: write it in `programs` and register it
//! in [`program`] (or [`ad_program`] when it takes gradients itself).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{BasicOps, Bool, Float, Int, Shape, Tensor, TensorData};
use burn_vmap::accumulate::{
    Acc, AccContext, AccKind, Accumulator, Concat, Mean, RunningMean, Sum,
};
use burn_vmap::testing::TestBackend;
use burn_vmap::transform::auto::Ranks;
use burn_vmap::transform::auto_vmap;
use burn_vmap::transform::micro::LossOutput;
use burn_vmap::transform::Axes;
use burn_vmap::tree::{Key, Leaves, NodeKind, TreeDef};
use burn_vmap::tree::{Leaf, Spec};
use burn_vmap::{micro_grad, micro_vmap, vmap, BatchOps, Tree, Vmap, VmapError};
use serde_json::Value;

/// The batching backend.
type V = Vmap<TestBackend>;
/// Autodiff over the batching backend: gradients inside `vmap` (per-example gradients).
type AD = Autodiff<V>;
/// Autodiff with nothing batched (`jax.value_and_grad`, the scans). `Vmap<B>` with no batched
/// operand calls `B` directly, and holds rank-0 tensors on every backend (Burn 0.21's cubecl
/// backends cannot allocate one), so the scans' rank-0 carries and steps run on wgpu too.
type ADPlain = Autodiff<V>;

// =================================================================================================
// Rank dispatch
// =================================================================================================

/// Highest rank a program argument or result may have.
const MAX_RANK: usize = 6;

/// `with_rank!(r, D => body)`: runs `body` with a `const D: usize = r` (0..=6).
macro_rules! with_rank {
    ($rank:expr, $D:ident => $body:expr) => {
        match $rank {
            0 => {
                const $D: usize = 0;
                $body
            }
            1 => {
                const $D: usize = 1;
                $body
            }
            2 => {
                const $D: usize = 2;
                $body
            }
            3 => {
                const $D: usize = 3;
                $body
            }
            4 => {
                const $D: usize = 4;
                $body
            }
            5 => {
                const $D: usize = 5;
                $body
            }
            6 => {
                const $D: usize = 6;
                $body
            }
            r => panic!("runner: rank {r} is not supported (max {MAX_RANK})"),
        }
    };
}

/// `with_rank_m1!(r, D, DM => body)`: as [`with_rank!`] with also `const DM: usize = D - 1`
/// (ranks 1..=6), for ops that drop an axis.
macro_rules! with_rank_m1 {
    ($rank:expr, $D:ident, $DM:ident => $body:expr) => {
        match $rank {
            1 => {
                const $D: usize = 1;
                const $DM: usize = 0;
                $body
            }
            2 => {
                const $D: usize = 2;
                const $DM: usize = 1;
                $body
            }
            3 => {
                const $D: usize = 3;
                const $DM: usize = 2;
                $body
            }
            4 => {
                const $D: usize = 4;
                const $DM: usize = 3;
                $body
            }
            5 => {
                const $D: usize = 5;
                const $DM: usize = 4;
                $body
            }
            6 => {
                const $D: usize = 6;
                const $DM: usize = 5;
                $body
            }
            r => panic!("runner: rank {r} is not supported here (1..={MAX_RANK})"),
        }
    };
}

// =================================================================================================
// Cases: the JSON model
// =================================================================================================

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DType {
    F32,
    I32,
    Bool,
}

impl DType {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "float32" => Ok(DType::F32),
            "int32" => Ok(DType::I32),
            "bool" => Ok(DType::Bool),
            other => Err(format!("unsupported dtype {other:?}")),
        }
    }

    fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::I32 => "int32",
            DType::Bool => "bool",
        }
    }
}

/// A dense array `{"dtype", "shape", "data"}`; values kept as f64 (lossless for f32 and i32,
/// bools as 0/1), row-major.
#[derive(Debug, Clone)]
struct Array {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<f64>,
}

impl Array {
    fn parse(v: &Value) -> Result<Self, String> {
        let dtype = DType::parse(v["dtype"].as_str().ok_or("array without a dtype")?)?;
        let shape = v["shape"]
            .as_array()
            .ok_or("array without a shape")?
            .iter()
            .map(|d| {
                d.as_u64()
                    .map(|d| d as usize)
                    .ok_or_else(|| format!("bad dim {d}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut data = Vec::new();
        flatten_json(&v["data"], &mut data)?;
        let n: usize = shape.iter().product();
        if data.len() != n {
            return Err(format!(
                "array of shape {shape:?} has {} values",
                data.len()
            ));
        }
        Ok(Array { dtype, shape, data })
    }
}

fn flatten_json(v: &Value, out: &mut Vec<f64>) -> Result<(), String> {
    match v {
        Value::Array(items) => items.iter().try_for_each(|x| flatten_json(x, out)),
        Value::Number(n) => {
            out.push(n.as_f64().ok_or("bad number")?);
            Ok(())
        }
        Value::Bool(b) => {
            out.push(if *b { 1.0 } else { 0.0 });
            Ok(())
        }
        other => Err(format!("unexpected array element {other}")),
    }
}

/// An entry of `args`: an input name, or a struct/dict of entries.
#[derive(Debug, Clone)]
enum ArgSpec {
    Input(String),
    Struct(BTreeMap<String, ArgSpec>),
}

impl ArgSpec {
    fn parse(v: &Value) -> Result<Self, String> {
        match v {
            Value::String(s) => Ok(ArgSpec::Input(s.clone())),
            Value::Object(m) => Ok(ArgSpec::Struct(
                m.iter()
                    .map(|(k, v)| Ok((k.clone(), ArgSpec::parse(v)?)))
                    .collect::<Result<_, String>>()?,
            )),
            other => Err(format!("bad args entry {other}")),
        }
    }
}

#[derive(Debug, Clone)]
enum Expected {
    /// Output key (`out`, `grads['W1']`, ...) -> array, or `None` for a `null` (absent) output.
    Outputs(BTreeMap<String, Option<Array>>),
    /// The call must fail with an error of this kind.
    Error { kind: String, details: Value },
}

#[derive(Debug, Clone, Copy)]
struct Tolerance {
    rtol: f64,
    atol: f64,
}

/// One conformance case (one JSON file).
#[derive(Debug, Clone)]
struct Case {
    name: String,
    api: String,
    program: String,
    args: Vec<ArgSpec>,
    #[allow(dead_code)] // used by later apis (`affine`)
    kwargs: BTreeMap<String, String>,
    #[allow(dead_code)] // used by later apis (`tanh_matmul_and_sqnorm`)
    captured: BTreeMap<String, String>,
    params: serde_json::Map<String, Value>,
    inputs: BTreeMap<String, Array>,
    expected: Expected,
    tolerance: Tolerance,
}

impl Case {
    fn parse(v: &Value) -> Result<Self, String> {
        let s = |k: &str| {
            v[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("missing string field {k:?}"))
        };
        let names = |k: &str| -> Result<BTreeMap<String, String>, String> {
            match &v[k] {
                Value::Null => Ok(BTreeMap::new()),
                Value::Object(m) => m
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), v.as_str().ok_or("name expected")?.to_owned())))
                    .collect(),
                other => Err(format!("bad {k}: {other}")),
            }
        };
        let args = v["args"]
            .as_array()
            .ok_or("missing args")?
            .iter()
            .map(ArgSpec::parse)
            .collect::<Result<_, _>>()?;
        let inputs = v["inputs"]
            .as_object()
            .ok_or("missing inputs")?
            .iter()
            .map(|(k, a)| {
                Ok((
                    k.clone(),
                    Array::parse(a).map_err(|e| format!("input {k}: {e}"))?,
                ))
            })
            .collect::<Result<_, String>>()?;
        let exp = v["expected"].as_object().ok_or("missing expected")?;
        let expected = match exp.get("error") {
            Some(err) if exp.len() == 1 && err.is_object() => Expected::Error {
                kind: err["kind"].as_str().ok_or("error without kind")?.to_owned(),
                details: err["details"].clone(),
            },
            _ => Expected::Outputs(
                exp.iter()
                    .map(|(k, a)| {
                        let a = if a.is_null() {
                            None
                        } else {
                            Some(Array::parse(a).map_err(|e| format!("expected {k}: {e}"))?)
                        };
                        Ok((k.clone(), a))
                    })
                    .collect::<Result<_, String>>()?,
            ),
        };
        let tol = &v["tolerance"];
        Ok(Case {
            name: s("name")?,
            api: s("api")?,
            program: s("program")?,
            args,
            kwargs: names("kwargs")?,
            captured: names("captured")?,
            params: v["params"].as_object().cloned().unwrap_or_default(),
            inputs,
            expected,
            tolerance: Tolerance {
                rtol: tol["rtol"].as_f64().unwrap_or(1e-5),
                atol: tol["atol"].as_f64().unwrap_or(1e-6),
            },
        })
    }

    fn param(&self, key: &str) -> Option<&Value> {
        self.params.get(key).filter(|v| !v.is_null())
    }

    fn input(&self, name: &str) -> Result<&Array, String> {
        self.inputs
            .get(name)
            .ok_or_else(|| format!("no input named {name:?}"))
    }

    /// Position of the positional argument that is the input `name`.
    fn arg_position(&self, name: &str) -> Option<usize> {
        self.args
            .iter()
            .position(|a| matches!(a, ArgSpec::Input(n) if n == name))
    }
}

fn vectors_dir() -> PathBuf {
    std::env::var_os("BURN_VMAP_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/vectors")))
}

/// Every `*.json` of `dir`, sorted by file name: `(name, parsed case or parse error)`.
fn load_cases(dir: &Path) -> Vec<(String, Result<Case, String>)> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read the vectors directory {}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let case = std::fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()))
                .and_then(|v| Case::parse(&v))
                .map_err(|e| format!("cannot parse {}: {e}", path.display()));
            let name = case.as_ref().map(|c| c.name.clone()).unwrap_or(stem);
            (name, case)
        })
        .collect()
}

// =================================================================================================
// Dynamic pytrees
// =================================================================================================

/// A pytree of tensors of any rank and kind, decided at run time: what programs take and return.
#[derive(Debug, Clone)]
enum Pt<B: Backend> {
    Leaf(Leaf<B>),
    /// A dict / struct (JAX sorts the keys, as `BTreeMap` does).
    Dict(BTreeMap<String, Pt<B>>),
    /// A tuple / list.
    Tuple(Vec<Pt<B>>),
}

impl<B: Backend> Tree<B> for Pt<B> {
    fn flatten_into(self, leaves: &mut Vec<Leaf<B>>) -> TreeDef {
        match self {
            Pt::Leaf(l) => {
                leaves.push(l);
                TreeDef::Leaf
            }
            Pt::Dict(m) => {
                let mut keys = Vec::with_capacity(m.len());
                let mut children = Vec::with_capacity(m.len());
                for (k, v) in m {
                    keys.push(Key::Field(k));
                    children.push(v.flatten_into(leaves));
                }
                TreeDef::Node {
                    kind: NodeKind::Map,
                    keys,
                    children,
                }
            }
            Pt::Tuple(items) => {
                let keys = (0..items.len()).map(Key::Index).collect();
                let children = items.into_iter().map(|x| x.flatten_into(leaves)).collect();
                TreeDef::Node {
                    kind: NodeKind::Tuple,
                    keys,
                    children,
                }
            }
        }
    }

    fn unflatten_from(def: &TreeDef, leaves: &mut Leaves<B>) -> Result<Self, VmapError> {
        match def {
            TreeDef::Leaf => leaves.next_leaf().map(Pt::Leaf),
            TreeDef::Node {
                kind: NodeKind::Map | NodeKind::Struct(_),
                keys,
                children,
            } => {
                let mut out = BTreeMap::new();
                for (k, c) in keys.iter().zip(children) {
                    let name = match k {
                        Key::Field(name) => name.clone(),
                        Key::Index(i) => i.to_string(),
                    };
                    out.insert(
                        name,
                        leaves.with_key(k.clone(), |l| Pt::unflatten_from(c, l))?,
                    );
                }
                Ok(Pt::Dict(out))
            }
            TreeDef::Node { keys, children, .. } => {
                let items = keys
                    .iter()
                    .zip(children)
                    .map(|(k, c)| leaves.with_key(k.clone(), |l| Pt::unflatten_from(c, l)))
                    .collect::<Result<_, _>>()?;
                Ok(Pt::Tuple(items))
            }
            TreeDef::Static(_) => Err(VmapError::TreeMismatch {
                what: "tree".into(),
                path: leaves.path(),
                why: "the runner's pytrees have no static values".into(),
            }),
        }
    }
}

/// A typed tensor (or any typed tree) as a [`Pt`].
fn pt<B: Backend, T: Tree<B>>(t: T) -> Pt<B> {
    let (leaves, def) = t.flatten();
    Pt::unflatten(&def, leaves).expect("a flattened tree rebuilds")
}

impl<B: Backend> Pt<B> {
    fn leaf(&self) -> &Leaf<B> {
        match self {
            Pt::Leaf(l) => l,
            other => panic!("runner: expected a tensor, got {}", other.describe()),
        }
    }

    fn describe(&self) -> String {
        match self {
            Pt::Leaf(l) => format!("{} tensor of shape {:?}", l.kind_name(), l.shape().to_vec()),
            Pt::Dict(m) => format!("dict with keys {:?}", m.keys().collect::<Vec<_>>()),
            Pt::Tuple(v) => format!("tuple of {}", v.len()),
        }
    }

    /// Logical rank of a tensor leaf.
    fn rank(&self) -> usize {
        self.leaf().shape().num_dims()
    }

    fn is_float(&self) -> bool {
        matches!(self.leaf(), Leaf::Float(_))
    }

    /// The typed tree `T` (a tensor of the right kind and rank); panics with the library's
    /// error otherwise.
    fn get<T: Tree<B>>(self) -> T {
        let (leaves, def) = self.flatten();
        T::unflatten_named(&def, leaves, "program argument")
            .unwrap_or_else(|e| panic!("runner: {e}"))
    }

    fn f<const D: usize>(self) -> Tensor<B, D> {
        self.get()
    }

    fn i<const D: usize>(self) -> Tensor<B, D, Int> {
        self.get()
    }

    fn field(&self, key: &str) -> Pt<B> {
        match self {
            Pt::Dict(m) => m
                .get(key)
                .cloned()
                .unwrap_or_else(|| panic!("runner: no field {key:?} in {}", self.describe())),
            other => panic!(
                "runner: expected a dict with field {key:?}, got {}",
                other.describe()
            ),
        }
    }

    /// The positional arguments of a call (the argument tuple).
    fn into_args(self) -> Vec<Pt<B>> {
        match self {
            Pt::Tuple(v) => v,
            other => panic!(
                "runner: expected the argument tuple, got {}",
                other.describe()
            ),
        }
    }

    /// Applies `f` to every leaf, keeping the structure.
    /// Leafwise `f(self_leaf, other_leaf)` over two trees of the same structure.
    fn zip_with(self, other: &Pt<B>, f: impl Fn(Pt<B>, Pt<B>) -> Pt<B> + Copy) -> Pt<B> {
        match (self, other) {
            (Pt::Dict(a), Pt::Dict(b)) => Pt::Dict(
                a.into_iter()
                    .map(|(k, v)| {
                        let o = &b[&k];
                        (k, v.zip_with(o, f))
                    })
                    .collect(),
            ),
            (Pt::Tuple(a), Pt::Tuple(b)) => Pt::Tuple(
                a.into_iter()
                    .zip(b)
                    .map(|(x, y)| x.zip_with(y, f))
                    .collect(),
            ),
            (a, b) => f(a, b.clone()),
        }
    }

    fn map_leaves<C: Backend>(self, f: &mut impl FnMut(Pt<B>) -> Pt<C>) -> Pt<C> {
        match self {
            Pt::Leaf(_) => f(self),
            Pt::Dict(m) => Pt::Dict(m.into_iter().map(|(k, v)| (k, v.map_leaves(f))).collect()),
            Pt::Tuple(v) => Pt::Tuple(v.into_iter().map(|x| x.map_leaves(f)).collect()),
        }
    }
}

/// `N` positional arguments.
fn take<const N: usize, B: Backend>(args: Vec<Pt<B>>) -> [Pt<B>; N] {
    let n = args.len();
    args.try_into()
        .unwrap_or_else(|_| panic!("runner: the program takes {N} arguments, got {n}"))
}

// =================================================================================================
// Building inputs, reading outputs
// =================================================================================================

/// A tensor leaf on `B` holding `a` (float32 -> float, int32 -> int, bool -> bool; shape `[]` is
/// a rank-0 tensor).
fn input_leaf<B: Backend>(a: &Array, device: &B::Device) -> Leaf<B> {
    let data = match a.dtype {
        DType::F32 => TensorData::new(
            a.data.iter().map(|&x| x as f32).collect::<Vec<_>>(),
            a.shape.clone(),
        ),
        DType::I32 => TensorData::new(
            a.data.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            a.shape.clone(),
        ),
        DType::Bool => TensorData::new(
            a.data.iter().map(|&x| x != 0.0).collect::<Vec<_>>(),
            a.shape.clone(),
        ),
    };
    match (a.dtype, a.shape.len()) {
        (DType::F32, 0) => pt(rank0::<B, Float>(data, device)),
        (DType::I32, 0) => pt(rank0::<B, Int>(data, device)),
        (DType::Bool, 0) => pt(rank0::<B, Bool>(data, device)),
        (DType::F32, r) => with_rank!(r, D => pt(Tensor::<B, D>::from_data(data, device))),
        (DType::I32, r) => with_rank!(r, D => pt(Tensor::<B, D, Int>::from_data(data, device))),
        (DType::Bool, r) => with_rank!(r, D => pt(Tensor::<B, D, Bool>::from_data(data, device))),
    }
    .leaf()
    .clone()
}

/// A rank-0 tensor holding the one value of `data`. `Tensor::from_data` refuses rank 0 and
/// NdArray cannot reshape to rank 0, but the backends accept rank-0 data: create it at the
/// dtype `from_data` picks for this kind.
fn rank0<B: Backend, K: BasicOps<B>>(data: TensorData, device: &B::Device) -> Tensor<B, 0, K> {
    let mut one = data.clone();
    one.shape = Shape::from(vec![1]);
    let dtype = Tensor::<B, 1, K>::from_data(one, device).dtype();
    Tensor::from_primitive(K::from_data(data, device, dtype))
}

fn build_arg<B: Backend>(case: &Case, spec: &ArgSpec, device: &B::Device) -> Result<Pt<B>, String> {
    match spec {
        ArgSpec::Input(name) => Ok(Pt::Leaf(input_leaf(case.input(name)?, device))),
        ArgSpec::Struct(fields) => Ok(Pt::Dict(
            fields
                .iter()
                .map(|(k, s)| Ok((k.clone(), build_arg(case, s, device)?)))
                .collect::<Result<_, String>>()?,
        )),
    }
}

/// The positional arguments of the program, as listed by `args`.
fn build_args<B: Backend>(case: &Case) -> Result<Vec<Pt<B>>, String> {
    let device = Default::default();
    case.args
        .iter()
        .map(|s| build_arg(case, s, &device))
        .collect()
}

/// An output array read back from a tensor.
#[derive(Debug, Clone)]
struct Got {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<f64>,
}

fn read_leaf<B: Backend>(leaf: Leaf<B>) -> Got {
    let shape = leaf.shape().to_vec();
    let (dtype, data): (DType, TensorData) = match leaf {
        Leaf::Float(_) => (
            DType::F32,
            with_rank!(shape.len(), D => Pt::Leaf(leaf).f::<D>().into_data()),
        ),
        Leaf::Int(_) => (
            DType::I32,
            with_rank!(shape.len(), D => Pt::Leaf(leaf).i::<D>().into_data()),
        ),
        Leaf::Bool(_) => (
            DType::Bool,
            with_rank!(shape.len(), D => Pt::Leaf(leaf).get::<Tensor<B, D, Bool>>().int().into_data()),
        ),
    };
    Got {
        dtype,
        shape,
        data: data.iter::<f64>().collect(),
    }
}

/// Outputs of a transformed call, keyed as `expected` is: `out`, `out['p']`, `grads[1]`, ...
/// `None`: the output is None (absent).
type Outputs = BTreeMap<String, Option<Got>>;

/// Adds the leaves of the output `pt` named `name`, keyed by their JAX `keystr` paths.
fn collect_outputs<B: Backend>(name: &str, pt: Pt<B>, out: &mut Outputs) {
    match pt {
        Pt::Leaf(l) => {
            out.insert(name.to_owned(), Some(read_leaf(l)));
        }
        Pt::Dict(m) => m
            .into_iter()
            .for_each(|(k, v)| collect_outputs(&format!("{name}['{k}']"), v, out)),
        Pt::Tuple(v) => v
            .into_iter()
            .enumerate()
            .for_each(|(i, x)| collect_outputs(&format!("{name}[{i}]"), x, out)),
    }
}

/// What a transformed call gave: outputs, or the library's error.
enum Run {
    Outputs(Outputs),
    Error(VmapError),
}

// =================================================================================================
// Comparison
// =================================================================================================

/// Checks a run against `expected`: `Err(why)` on a mismatch.
fn judge(case: &Case, run: Run) -> Result<(), String> {
    match (&case.expected, run) {
        (Expected::Outputs(expected), Run::Outputs(got)) => {
            for (key, exp) in expected {
                match (exp, got.get(key)) {
                    (None, None | Some(None)) => {}
                    (None, Some(Some(g))) => {
                        return Err(format!(
                            "{key}: expected None, got an array of shape {:?}",
                            g.shape
                        ))
                    }
                    (Some(_), None) => {
                        return Err(format!(
                            "{key}: missing output (got {:?})",
                            got.keys().collect::<Vec<_>>()
                        ));
                    }
                    (Some(_), Some(None)) => {
                        return Err(format!("{key}: expected an array, got None"))
                    }
                    (Some(e), Some(Some(g))) => {
                        compare(e, g, case.tolerance).map_err(|why| format!("{key}: {why}"))?
                    }
                }
            }
            Ok(())
        }
        (Expected::Outputs(_), Run::Error(e)) => Err(format!("unexpected error: {e}")),
        (Expected::Error { kind, .. }, Run::Outputs(got)) => Err(format!(
            "expected a {kind} error, got outputs {:?}",
            got.keys().collect::<Vec<_>>()
        )),
        (Expected::Error { kind, details }, Run::Error(e)) => check_error(case, kind, details, &e),
    }
}

/// numpy `allclose` for floats (`|a - e| <= atol + rtol * |e|`), exact for int and bool; shapes
/// and dtypes exactly.
fn compare(e: &Array, g: &Got, tol: Tolerance) -> Result<(), String> {
    if e.dtype != g.dtype {
        return Err(format!(
            "dtype: expected {}, got {}",
            e.dtype.name(),
            g.dtype.name()
        ));
    }
    if e.shape != g.shape {
        return Err(format!("shape: expected {:?}, got {:?}", e.shape, g.shape));
    }
    let bad: Vec<usize> = (0..e.data.len())
        .filter(|&i| {
            let (x, y) = (g.data[i], e.data[i]);
            match e.dtype {
                DType::F32 => {
                    // NaN in the actual value is a mismatch.
                    let close = (x - y).abs() <= tol.atol + tol.rtol * y.abs();
                    !close
                }
                DType::I32 | DType::Bool => x != y,
            }
        })
        .collect();
    if let Some(&i) = bad.first() {
        let max_err = bad
            .iter()
            .map(|&i| (g.data[i] - e.data[i]).abs())
            .fold(0.0, f64::max);
        return Err(format!(
            "{} of {} values differ (rtol {}, atol {}); first at flat index {i}: expected {}, got {}; max abs error {max_err:e}",
            bad.len(),
            e.data.len(),
            tol.rtol,
            tol.atol,
            e.data[i],
            g.data[i]
        ));
    }
    Ok(())
}

/// The integers written in `msg` (to check a message names the sizes).
fn integers_in(msg: &str) -> Vec<u64> {
    msg.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

fn json_usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as usize)
                .collect()
        })
        .unwrap_or_default()
}

/// Checks the library's error has the category `kind` and names what `details` lists.
fn check_error(case: &Case, kind: &str, details: &Value, e: &VmapError) -> Result<(), String> {
    let msg = e.to_string();
    let numbers = integers_in(&msg);
    let mentions = |n: usize| numbers.contains(&(n as u64));
    match kind {
        "inconsistent_batch_sizes" => {
            let VmapError::InconsistentBatchSizes { arguments } = e else {
                return Err(format!("expected InconsistentBatchSizes, got {e:?}"));
            };
            let want = json_usizes(&details["batch_sizes"]);
            let got: Vec<usize> = arguments.iter().map(|(_, s)| *s).collect();
            if got != want {
                return Err(format!(
                    "batch sizes: expected {want:?}, got {got:?} ({msg})"
                ));
            }
            if let Some(&n) = want.iter().find(|&&n| !mentions(n)) {
                return Err(format!("the message does not mention size {n}: {msg}"));
            }
            // Argument names: the library names an argument by its path, `args[i]` for the i-th
            // positional one; an argument that is not positional must appear as a whole word.
            for name in details["arguments"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let named = match case.arg_position(name) {
                    Some(i) => msg.contains(&format!("args[{i}]")),
                    None => msg
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .any(|w| w == name),
                };
                if !named {
                    let position = case
                        .arg_position(name)
                        .map(|i| format!(" (args[{i}])"))
                        .unwrap_or_default();
                    return Err(format!(
                        "the message does not name argument {name}{position}: {msg}"
                    ));
                }
            }
            Ok(())
        }
        "non_dividing_microbatch_size" => {
            let VmapError::NonDividingMicrobatchSize {
                batch_size,
                microbatch_size,
            } = e
            else {
                return Err(format!("expected NonDividingMicrobatchSize, got {e:?}"));
            };
            let want = (
                details["batch_size"].as_u64().unwrap_or(u64::MAX) as usize,
                details["microbatch_size"].as_u64().unwrap_or(u64::MAX) as usize,
            );
            if (*batch_size, *microbatch_size) != want {
                return Err(format!(
                    "expected batch_size/microbatch_size {want:?}, got ({batch_size}, {microbatch_size})"
                ));
            }
            if !(mentions(want.0) && mentions(want.1)) {
                return Err(format!("the message does not name both sizes: {msg}"));
            }
            Ok(())
        }
        "unsupported_out_axes" => {
            let VmapError::UnsupportedOutAxes { .. } = e else {
                return Err(format!("expected UnsupportedOutAxes, got {e:?}"));
            };
            let want = details["out_axes"].as_u64().unwrap_or(u64::MAX) as usize;
            if !mentions(want) {
                return Err(format!("the message does not name out_axes {want}: {msg}"));
            }
            Ok(())
        }
        "rank_too_small" | "incompatible_batch_shapes" => {
            check_auto_vmap_error(case, kind, details, e)
        }
        "chunk_size_not_positive" => {
            let VmapError::ChunkSizeNotPositive { chunk_size, .. } = e else {
                return Err(format!("expected ChunkSizeNotPositive, got {e:?}"));
            };
            let want = details["chunk_size"].as_i64().unwrap_or(0);
            if *chunk_size as i64 != want {
                return Err(format!(
                    "chunk_size: expected {want}, got {chunk_size} ({msg})"
                ));
            }
            if !msg.contains("chunk_size") || !mentions(want.unsigned_abs() as usize) {
                return Err(format!(
                    "the message does not name chunk_size = {want}: {msg}"
                ));
            }
            Ok(())
        }
        other => Err(format!(
            "runner: error kind {other} is not supported yet (got: {msg})"
        )),
    }
}

// =================================================================================================
// Apis
// =================================================================================================

/// Result of one case.
enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

/// Runs the api of `case`: `None` when the runner does not implement it yet.
fn run_api(case: &Case) -> Option<Result<Run, String>> {
    Some(match case.api.as_str() {
        "jax.vmap" => api_vmap(case),
        "jax.value_and_grad" => api_value_and_grad(case),
        "optax.microbatching.micro_vmap" => api_micro_vmap(case),
        "optax.microbatching.micro_grad" => api_micro_grad(case),
        "jax_autovmap.auto_vmap" => api_auto_vmap(case),
        "powerpax.chunked_vmap" => api_chunked_vmap(case),
        "powerpax.sliced_scan" => api_sliced_scan(case),
        "powerpax.checkpoint_chunked_scan" => api_checkpoint_chunked_scan(case),
        _ => return None,
    })
}

/// `in_axes` / `out_axes` from JSON: int, null, list (per position), object (per field).
fn parse_axes(v: &Value) -> Result<Axes, String> {
    match v {
        Value::Null => Ok(Spec::Leaf(None)),
        Value::Number(n) => Ok(Spec::Leaf(Some(
            n.as_i64().ok_or_else(|| format!("bad axis {n}"))? as isize,
        ))),
        Value::Array(items) => Ok(Spec::Seq(
            items.iter().map(parse_axes).collect::<Result<_, _>>()?,
        )),
        Value::Object(m) => Ok(Spec::fields(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), parse_axes(v)?)))
                .collect::<Result<Vec<_>, String>>()?,
        )),
        other => Err(format!("bad axes {other}")),
    }
}

/// An error of an inner `vmap` (nested cases), carried out of the outer call by a panic.
struct InnerVmapError(VmapError);

/// `jax.vmap` (FORMAT 3.1), optionally nested (`inner_in_axes`).
fn api_vmap(case: &Case) -> Result<Run, String> {
    let in_axes = parse_axes(case.param("in_axes").unwrap_or(&Value::from(0)))?;
    let out_axes = parse_axes(case.param("out_axes").unwrap_or(&Value::from(0)))?;
    let inner = match case.param("inner_in_axes") {
        Some(v) => Some((
            parse_axes(v)?,
            parse_axes(case.param("inner_out_axes").unwrap_or(&Value::from(0)))?,
        )),
        None => None,
    };
    if let Some(f) = ad_program::<AD>(&case.program) {
        vmap_run::<AD, V>(case, f, in_axes, out_axes, inner)
    } else if let Some(f) = program::<V>(&case.program) {
        vmap_run::<V, V>(case, f, in_axes, out_axes, inner)
    } else {
        Err(format!("runner: unknown program {:?}", case.program))
    }
}

fn vmap_run<BI: BatchOps, BO: BatchOps>(
    case: &Case,
    f: fn(Vec<Pt<BI>>) -> Pt<BO>,
    in_axes: Axes,
    out_axes: Axes,
    inner: Option<(Axes, Axes)>,
) -> Result<Run, String> {
    let args = Pt::Tuple(build_args::<BI>(case)?);
    let prog = move |a: Pt<BI>| f(a.into_args());
    let result: Result<Pt<BO>, VmapError> = match inner {
        None => vmap(prog).in_axes(in_axes).out_axes(out_axes).call(args),
        Some((inner_in, inner_out)) => {
            let outer = move |a: Pt<BI>| -> Pt<BO> {
                vmap(prog)
                    .in_axes(inner_in.clone())
                    .out_axes(inner_out.clone())
                    .call(a)
                    .unwrap_or_else(|e| panic::panic_any(InnerVmapError(e)))
            };
            match panic::catch_unwind(AssertUnwindSafe(|| {
                vmap(outer).in_axes(in_axes).out_axes(out_axes).call(args)
            })) {
                Ok(r) => r,
                Err(payload) => match payload.downcast::<InnerVmapError>() {
                    Ok(e) => Err(e.0),
                    Err(payload) => panic::resume_unwind(payload),
                },
            }
        }
    };
    Ok(match result {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// `argnums` as a list of positions, and whether it was a single int.
fn parse_argnums(v: Option<&Value>) -> Result<(Vec<usize>, bool), String> {
    match v {
        None => Ok((vec![0], true)),
        Some(Value::Number(n)) => Ok((vec![n.as_u64().ok_or("bad argnums")? as usize], true)),
        Some(Value::Array(a)) => Ok((
            a.iter()
                .map(|x| x.as_u64().map(|x| x as usize).ok_or("bad argnums"))
                .collect::<Result<_, _>>()?,
            false,
        )),
        Some(other) => Err(format!("bad argnums {other}")),
    }
}

/// Marks every float leaf as requiring a gradient.
fn require_grad<B: AutodiffBackend>(p: Pt<B>) -> Pt<B> {
    p.map_leaves(&mut |l: Pt<B>| {
        if !l.is_float() {
            panic!(
                "runner: cannot differentiate w.r.t. a non-float argument ({})",
                l.describe()
            );
        }
        with_rank!(l.rank(), D => pt(l.f::<D>().require_grad()))
    })
}

/// The gradient of every leaf of `p` (zeros where it does not contribute).
fn grads_of<B: AutodiffBackend>(p: &Pt<B>, grads: &B::Gradients) -> Pt<B::InnerBackend> {
    p.clone().map_leaves(&mut |l: Pt<B>| {
        with_rank!(l.rank(), D => {
            let t = l.f::<D>();
            let g = t.grad(grads).unwrap_or_else(|| t.inner().zeros_like());
            pt(g)
        })
    })
}

/// `jax.value_and_grad` (FORMAT 3.10), no batching: outputs `loss` and `grads`.
fn api_value_and_grad(case: &Case) -> Result<Run, String> {
    let f = program::<ADPlain>(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let (argnums, single) = parse_argnums(case.param("argnums"))?;
    let mut args = build_args::<ADPlain>(case)?;
    for &i in &argnums {
        let a = args
            .get(i)
            .ok_or_else(|| format!("argnums {i} out of range"))?
            .clone();
        args[i] = require_grad(a);
    }
    let loss = f(args.clone());
    let grads = match loss.leaf().shape().to_vec().as_slice() {
        [] => loss.clone().f::<0>().backward(),
        [1] => loss.clone().f::<1>().backward(),
        other => {
            return Err(format!(
                "value_and_grad: the loss must be a scalar, got shape {other:?}"
            ))
        }
    };
    let g: Vec<_> = argnums
        .iter()
        .map(|&i| grads_of(&args[i], &grads))
        .collect();
    let g = if single {
        g.into_iter().next().unwrap()
    } else {
        Pt::Tuple(g)
    };
    let mut outputs = Outputs::new();
    collect_outputs("loss", loss, &mut outputs);
    // A `[1]` loss is Burn's scalar (see `programs::xent`): JAX's shape `()`.
    if let Some(Some(l)) = outputs.get_mut("loss") {
        l.shape.clear();
    }
    collect_outputs("grads", g, &mut outputs);
    Ok(Run::Outputs(outputs))
}

// ---- optax.microbatching ------------------------------------------------------------------------

/// The custom `max` accumulator of the vectors (FORMAT 3.4): a running maximum from `-inf`.
#[derive(Clone)]
struct MaxAcc;

impl Accumulator for MaxAcc {
    fn name(&self) -> String {
        "max".into()
    }
    fn aggregate<B: Backend, K: AccKind<B>>(&self, rows: Tensor<B, 2, K>) -> Tensor<B, 2, K> {
        rows.max_dim(0)
    }
    fn init<B: Backend, K: AccKind<B>>(
        &self,
        value: &Tensor<B, 2, K>,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        Tensor::full(value.shape(), f32::NEG_INFINITY, &value.device())
    }
    fn update<B: Backend, K: AccKind<B>>(
        &self,
        carry: Tensor<B, 2, K>,
        value: Tensor<B, 2, K>,
        _: usize,
        _: &AccContext,
    ) -> Tensor<B, 2, K> {
        carry.max_pair(value)
    }
}

/// An accumulator id or a tree prefix of ids (FORMAT 3.4).
fn parse_accumulator<B: Backend>(v: &Value) -> Result<Spec<Acc<B>>, String> {
    match v {
        Value::String(s) => Ok(Spec::Leaf(match s.as_str() {
            "SUM" => Acc::new(Sum),
            "MEAN" => Acc::new(Mean),
            "RUNNING_MEAN" => Acc::new(RunningMean),
            "CONCAT" => Acc::new(Concat),
            "max" => Acc::new(MaxAcc),
            other => return Err(format!("runner: unknown accumulator {other}")),
        })),
        Value::Array(items) => Ok(Spec::Seq(
            items
                .iter()
                .map(parse_accumulator)
                .collect::<Result<_, _>>()?,
        )),
        Value::Object(m) => Ok(Spec::Fields(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), parse_accumulator(v)?)))
                .collect::<Result<_, String>>()?,
        )),
        other => Err(format!("runner: bad accumulator {other}")),
    }
}

fn parse_usize_opt(v: Option<&Value>) -> Option<usize> {
    v.and_then(Value::as_u64).map(|x| x as usize)
}

/// `optax.microbatching.micro_vmap` (FORMAT 3.2). Keyword arguments follow the positional ones,
/// batched on axis 0.
fn api_micro_vmap(case: &Case) -> Result<Run, String> {
    let f = program::<V>(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let n_pos = case.args.len();
    let in_axes = match case.param("in_axes").unwrap_or(&Value::from(0)) {
        Value::Array(_) => parse_axes(case.param("in_axes").unwrap())?,
        v => Spec::Seq(vec![parse_axes(v)?; n_pos]),
    };
    let mut args = build_args::<V>(case)?;
    let mut in_axes = match in_axes {
        Spec::Seq(s) => s,
        other => vec![other],
    };
    let device = Default::default();
    for (_, input) in case.kwargs.iter() {
        args.push(Pt::Leaf(input_leaf(case.input(input)?, &device)));
        in_axes.push(Spec::Leaf(Some(0)));
    }
    let acc = parse_accumulator::<V>(case.param("accumulator").unwrap_or(&Value::from("CONCAT")))?;
    let built = micro_vmap(move |a: Pt<V>| f(a.into_args()))
        .in_axes(Spec::Seq(in_axes))
        .microbatch_size(parse_usize_opt(case.param("microbatch_size")))
        .num_real_microbatches(parse_usize_opt(case.param("num_real_microbatches")))
        .accumulator(acc);
    let out_axes = parse_axes(case.param("out_axes").unwrap_or(&Value::from(0)))?;
    let built = match built.out_axes(out_axes) {
        Ok(b) => b,
        Err(e) => return Ok(Run::Error(e)),
    };
    Ok(match built.call::<V, V, _, _, _, Pt<V>>(Pt::Tuple(args)) {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// A loss `Pt` as Burn's scalar `[1]`.
fn loss1<B: Backend>(p: Pt<B>) -> Tensor<B, 1> {
    match p.rank() {
        0 => p.f::<0>().reshape([1]),
        1 => p.f::<1>(),
        r => panic!("runner: a loss of rank {r}"),
    }
}

/// `sqrt(sum of squares over every leaf)` of a gradient tree, as `[1]`.
fn global_norm<B: Backend>(g: &Pt<B>) -> Tensor<B, 1> {
    let (leaves, def) = g.clone().flatten();
    let total = leaves
        .into_iter()
        .map(|l| {
            let p = Pt::Leaf(l);
            with_rank!(p.rank(), D => { let t = p.f::<D>(); (t.clone() * t).sum() })
        })
        .reduce(|a, b| a + b);
    let _ = def;
    total.expect("runner: a gradient with no leaf").sqrt()
}

/// Scales every leaf of `g` by the `[1]` factor `s`.
fn scale_tree<B: Backend>(g: Pt<B>, s: Tensor<B, 1>) -> Pt<B> {
    g.map_leaves(&mut |l: Pt<B>| {
        with_rank!(l.rank(), D => {
            let t = l.f::<D>();
            pt(t * s.clone().reshape([1usize; D]))
        })
    })
}

/// `optax.microbatching.micro_grad` (FORMAT 3.3, 3.5).
fn api_micro_grad(case: &Case) -> Result<Run, String> {
    let f = program::<AD>(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    if case
        .param("has_aux")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        micro_grad_run(case, move |a: Pt<AD>| {
            let Pt::Tuple(mut out) = f(a.into_args()) else {
                panic!("runner: a has_aux program returns (loss, aux)")
            };
            let aux = out.pop().expect("aux");
            (loss1(out.pop().expect("loss")), aux)
        })
    } else {
        micro_grad_run(case, move |a: Pt<AD>| loss1(f(a.into_args())))
    }
}

fn micro_grad_run<Out: LossOutput<AD>>(
    case: &Case,
    f: impl Fn(Pt<AD>) -> Out,
) -> Result<Run, String> {
    let (argnums, single) = parse_argnums(case.param("argnums"))?;
    let (batch_argnums, _) =
        parse_argnums(Some(case.param("batch_argnums").unwrap_or(&Value::from(1))))?;
    let transform = case
        .param("transform_fn")
        .and_then(Value::as_str)
        .unwrap_or("identity")
        .to_string();
    let clip = case
        .param("clip_norm")
        .and_then(Value::as_f64)
        .unwrap_or(1.0) as f32;
    let metrics = case
        .param("metrics_fn")
        .and_then(Value::as_str)
        .map(str::to_string);
    let acc = parse_accumulator::<V>(case.param("accumulator").unwrap_or(&Value::from("SUM")))?;
    let base = micro_grad(f)
        .batch_argnums(batch_argnums)
        .keep_batch_dim(
            case.param("keep_batch_dim")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        )
        .microbatch_size(parse_usize_opt(case.param("microbatch_size")))
        .num_real_microbatches(parse_usize_opt(case.param("num_real_microbatches")))
        .accumulator(acc);
    let base = if single {
        base.argnums(argnums[0])
    } else {
        base.argnums(argnums)
    };
    let transform_kind = transform.clone();
    let built = base
        .transform_fn(move |g: Pt<V>| -> Pt<V> {
            match transform_kind.as_str() {
                "identity" => g,
                "grad_and_square" => {
                    let sq = g.clone().map_leaves(&mut |l: Pt<V>| {
                        with_rank!(l.rank(), D => { let t = l.f::<D>(); pt(t.clone() * t) })
                    });
                    Pt::Tuple(vec![g, sq])
                }
                "clip_global_norm" => {
                    let norm = global_norm(&g);
                    let factor = norm.clamp_min(clip).recip() * clip;
                    scale_tree(g, factor)
                }
                other => panic!("runner: unknown transform_fn {other}"),
            }
        })
        .metrics_fn(move |g: Pt<V>| -> Pt<V> {
            match metrics.as_deref() {
                None => Pt::Tuple(vec![]),
                Some("global_l2_norm") => pt(programs::scalar(global_norm(&g))),
                Some(other) => panic!("runner: unknown metrics_fn {other}"),
            }
        });
    let args = Pt::Tuple(build_args::<AD>(case)?);
    let (grads, aux) = match built.call::<AD, _, _, _, Pt<V>, Pt<V>, Pt<V>>(args) {
        Ok(r) => r,
        Err(e) => return Ok(Run::Error(e)),
    };
    let mut outputs = Outputs::new();
    let keys: Vec<&String> = match &case.expected {
        Expected::Outputs(e) => e.keys().collect(),
        Expected::Error { .. } => vec![],
    };
    let has = |prefix: &str| keys.iter().any(|k| k.starts_with(prefix));
    if transform == "grad_and_square" {
        let Pt::Tuple(mut pair) = grads else {
            return Err("grad_and_square gives a pair".into());
        };
        let g2 = pair.pop().expect("pair");
        let g = pair.pop().expect("pair");
        let (n1, n2) = if has("mean_g") {
            ("mean_g", "mean_g2")
        } else {
            ("grads", "squared_grads")
        };
        if has("variance") {
            let var = g2.clone().zip_with(&g, |m2, m| {
                with_rank!(m.rank(), D => { let m = m.f::<D>(); pt(m2.f::<D>() - m.clone() * m) })
            });
            collect_outputs("variance", var, &mut outputs);
        }
        collect_outputs(n1, g, &mut outputs);
        collect_outputs(n2, g2, &mut outputs);
    } else {
        let name = if has("per_example_grads") {
            "per_example_grads"
        } else {
            "grads"
        };
        collect_outputs(name, grads, &mut outputs);
    }
    collect_outputs("aux.values", pt(aux.values), &mut outputs);
    collect_outputs("aux.metrics", aux.metrics, &mut outputs);
    collect_outputs("aux.aux", aux.aux, &mut outputs);
    Ok(Run::Outputs(outputs))
}

// ---- jax_autovmap.auto_vmap ---------------------------------------------------------------------

/// Parameter names of the auto_vmap programs (FORMAT section 4), which `ranks` objects use.
fn auto_vmap_param_names(case: &Case) -> Vec<String> {
    let names: &[&str] = match case.program.as_str() {
        "foo_s_v_m" => &["s", "v", "m"],
        "alpha_times_norm" => &["v", "alpha"],
        "dot_a_x_plus_b" => &["p", "x"],
        "u_times_sum_w" => &["t"],
        _ => &[],
    };
    if names.len() == case.args.len() {
        return names.iter().map(|n| n.to_string()).collect();
    }
    // Otherwise the positional arguments' input names.
    case.args
        .iter()
        .enumerate()
        .map(|(i, a)| match a {
            ArgSpec::Input(n) => n.clone(),
            ArgSpec::Struct(_) => format!("arg{i}"),
        })
        .collect()
}

/// One rank entry: int, null, object per field, list per position.
fn parse_rank(v: &Value) -> Result<Ranks, String> {
    match v {
        Value::Null => Ok(Spec::Leaf(None)),
        Value::Number(n) => Ok(Spec::Leaf(Some(
            n.as_u64().ok_or_else(|| format!("bad rank {n}"))? as usize,
        ))),
        Value::Array(items) => Ok(Spec::Seq(
            items.iter().map(parse_rank).collect::<Result<_, _>>()?,
        )),
        Value::Object(m) => Ok(Spec::fields(
            m.iter()
                .map(|(k, v)| Ok((k.clone(), parse_rank(v)?)))
                .collect::<Result<Vec<_>, String>>()?,
        )),
        other => Err(format!("bad rank {other}")),
    }
}

/// `params.ranks` as one JSON rank per positional argument (null where absent).
fn auto_vmap_rank_values(case: &Case) -> Result<Vec<Value>, String> {
    let n = case.args.len();
    match case.param("ranks") {
        None => Ok(vec![Value::Null; n]),
        Some(Value::Array(items)) if items.len() == n => Ok(items.clone()),
        Some(Value::Array(items)) => Err(format!(
            "{} positional ranks for {n} arguments",
            items.len()
        )),
        Some(Value::Object(m)) => {
            let names = auto_vmap_param_names(case);
            if let Some(k) = m.keys().find(|k| !names.contains(k)) {
                return Err(format!("ranks name {k:?}, not a parameter of {names:?}"));
            }
            Ok(names
                .iter()
                .map(|n| m.get(n).cloned().unwrap_or(Value::Null))
                .collect())
        }
        Some(other) => Err(format!("bad ranks {other}")),
    }
}

/// Whether an argument has a leading batch dim beyond its rank somewhere.
fn has_batch_dims(case: &Case, arg: &ArgSpec, rank: &Value) -> bool {
    match (arg, rank) {
        (ArgSpec::Input(name), Value::Number(r)) => case
            .input(name)
            .is_ok_and(|a| a.shape.len() as u64 > r.as_u64().unwrap_or(u64::MAX)),
        (ArgSpec::Struct(fields), Value::Number(_)) => {
            fields.values().any(|f| has_batch_dims(case, f, rank))
        }
        (ArgSpec::Struct(fields), Value::Object(m)) => fields
            .iter()
            .any(|(k, f)| has_batch_dims(case, f, m.get(k).unwrap_or(&Value::Null))),
        _ => false,
    }
}

/// An argument built with an extra leading axis of size 1.
fn build_arg_lead1<B: Backend>(case: &Case, spec: &ArgSpec) -> Result<Pt<B>, String> {
    match spec {
        ArgSpec::Input(name) => {
            let mut a = case.input(name)?.clone();
            a.shape.insert(0, 1);
            Ok(Pt::Leaf(input_leaf(&a, &Default::default())))
        }
        ArgSpec::Struct(fields) => Ok(Pt::Dict(
            fields
                .iter()
                .map(|(k, s)| Ok((k.clone(), build_arg_lead1(case, s)?)))
                .collect::<Result<_, String>>()?,
        )),
    }
}

/// `jax_autovmap.auto_vmap` (FORMAT 3.9).
///
/// When no argument has a batch dim, the program runs unbatched and returns a rank-0 result,
/// which NdArray cannot make by a reshape: the call then runs inside a `vmap` of size 1 (every
/// input gets a leading axis of size 1, removed again from the outputs), which is the identity.
fn api_auto_vmap(case: &Case) -> Result<Run, String> {
    let f = auto_vmap_program::<V>(&case.program)
        .ok_or_else(|| format!("runner: unknown program {:?}", case.program))?;
    let rank_values = auto_vmap_rank_values(case)?;
    let ranks = Spec::Seq(
        rank_values
            .iter()
            .map(parse_rank)
            .collect::<Result<_, _>>()?,
    );
    let batched = case
        .args
        .iter()
        .zip(&rank_values)
        .any(|(a, r)| has_batch_dims(case, a, r));
    let prog = move |a: Pt<V>| f(a.into_args());
    let result: Result<Pt<V>, VmapError> = if batched {
        auto_vmap(prog)
            .ranks(ranks)
            .call(Pt::Tuple(build_args::<V>(case)?))
    } else {
        let args = case
            .args
            .iter()
            .map(|s| build_arg_lead1::<V>(case, s))
            .collect::<Result<Vec<_>, _>>()?;
        let outer = move |a: Pt<V>| -> Pt<V> {
            auto_vmap(prog)
                .ranks(ranks.clone())
                .call(a)
                .unwrap_or_else(|e| panic::panic_any(InnerVmapError(e)))
        };
        match panic::catch_unwind(AssertUnwindSafe(|| vmap(outer).call(Pt::Tuple(args)))) {
            Ok(r) => r,
            Err(payload) => match payload.downcast::<InnerVmapError>() {
                Ok(e) => Err(e.0),
                Err(payload) => panic::resume_unwind(payload),
            },
        }
    };
    Ok(match result {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            if !batched {
                for got in outputs.values_mut().flatten() {
                    if got.shape.first() != Some(&1) {
                        return Err(format!(
                            "runner: size-1 wrapper lost: shape {:?}",
                            got.shape
                        ));
                    }
                    got.shape.remove(0);
                }
            }
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// `rank_too_small` / `incompatible_batch_shapes`: the variant, its fields, and a message that
/// names the arguments (`args[i]`, i the parameter's position) and the sizes.
fn check_auto_vmap_error(
    case: &Case,
    kind: &str,
    details: &Value,
    e: &VmapError,
) -> Result<(), String> {
    let msg = e.to_string();
    let names = auto_vmap_param_names(case);
    let path_of = |name: &str| -> Result<String, String> {
        names
            .iter()
            .position(|n| n == name)
            .map(|i| format!("args[{i}]"))
            .ok_or_else(|| format!("runner: {name:?} is not a parameter of {names:?}"))
    };
    let numbers = integers_in(&msg);
    let mentions_all = |sizes: &[usize]| -> Result<(), String> {
        match sizes.iter().find(|&&n| !numbers.contains(&(n as u64))) {
            Some(n) => Err(format!("the message does not mention size {n}: {msg}")),
            None => Ok(()),
        }
    };
    match (kind, e) {
        (
            "rank_too_small",
            VmapError::RankTooSmall {
                argument,
                shape,
                min_rank,
            },
        ) => {
            let want_arg = path_of(details["argument"].as_str().unwrap_or_default())?;
            let want_shape = json_usizes(&details["shape"]);
            let want_rank = details["min_rank"].as_u64().unwrap_or(u64::MAX) as usize;
            if !argument.starts_with(&want_arg) || *shape != want_shape || *min_rank != want_rank {
                return Err(format!(
                    "expected {want_arg} of shape {want_shape:?} and min rank {want_rank}, got {e:?}"
                ));
            }
            if !msg.contains(&want_arg) {
                return Err(format!("the message does not name {want_arg}: {msg}"));
            }
            mentions_all(&want_shape)?;
            mentions_all(&[want_rank])
        }
        (
            "incompatible_batch_shapes",
            VmapError::IncompatibleBatchShapes {
                arguments,
                batch_shapes,
            },
        ) => {
            let want_args = details["arguments"].as_array().cloned().unwrap_or_default();
            let want_shapes = details["batch_shapes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for (name, shape) in want_args.iter().zip(&want_shapes) {
                let path = path_of(name.as_str().unwrap_or_default())?;
                let shape = json_usizes(shape);
                let found = arguments
                    .iter()
                    .zip(batch_shapes)
                    .any(|(a, s)| a.starts_with(&path) && *s == shape);
                if !found {
                    return Err(format!(
                        "expected {path} with batch shape {shape:?} among {arguments:?} / {batch_shapes:?}"
                    ));
                }
                if !msg.contains(&path) {
                    return Err(format!("the message does not name {path}: {msg}"));
                }
                mentions_all(&shape)?;
            }
            Ok(())
        }
        _ => Err(format!("expected a {kind} error, got {e:?}")),
    }
}

/// The auto_vmap programs (FORMAT section 4), written for their base ranks.
fn auto_vmap_program<B: Backend>(id: &str) -> Option<Program<B>> {
    let f: Program<B> = match id {
        "foo_s_v_m" => foo_s_v_m,
        "alpha_times_norm" => alpha_times_norm,
        "dot_a_x_plus_b" => dot_a_x_plus_b,
        "u_times_sum_w" => u_times_sum_w,
        _ => return program::<B>(id),
    };
    Some(f)
}

mod auto_vmap_programs {
    use super::programs::{lift, np_matmul, scalar, sum1};
    use super::*;

    /// `a * b` with numpy broadcasting.
    fn mul<B: Backend>(a: Pt<B>, b: Pt<B>) -> Pt<B> {
        with_rank!(a.rank().max(b.rank()), D => pt(lift::<B, D>(a) * lift::<B, D>(b)))
    }

    /// `a + b` with numpy broadcasting.
    fn add<B: Backend>(a: Pt<B>, b: Pt<B>) -> Pt<B> {
        with_rank!(a.rank().max(b.rank()), D => pt(lift::<B, D>(a) + lift::<B, D>(b)))
    }

    /// `v @ m @ v + s * size(v)`: s (), v (3,), m (3,3) -> ().
    pub fn foo_s_v_m<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [s, v, m] = take(args);
        let n = v.leaf().shape().num_elements() as f32;
        // `v·(m v)` kept as Burn's scalar `[1]` until the end: a rank-0 intermediate of
        // unbatched operands cannot be made on NdArray (see `programs::sum1`).
        let vmv = pt(sum1(mul(np_matmul(v.clone(), m), v)));
        let sn = with_rank!(s.rank(), D => pt(s.f::<D>().mul_scalar(n)));
        pt(scalar(add(vmv, sn).f::<1>()))
    }

    /// `alpha * sqrt(sum(v^2))`: v (4,), alpha (2,) -> (2,).
    pub fn alpha_times_norm<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v, alpha] = take(args);
        let norm = pt(sum1(mul(v.clone(), v)).sqrt());
        mul(alpha, norm)
    }

    /// `dot(p.a, x) + p.b`: p {a (3,), b ()}, x (3,) -> ().
    pub fn dot_a_x_plus_b<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [p, x] = take(args);
        let dot = pt(sum1(mul(p.field("a"), x)));
        pt(scalar(add(dot, p.field("b")).f::<1>()))
    }

    /// `t.u * sum(t.w)`: t {u (3,), w (4,)} -> (3,).
    pub fn u_times_sum_w<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [t] = take(args);
        let s = pt(sum1(t.field("w")));
        mul(t.field("u"), s)
    }
}
use auto_vmap_programs::{alpha_times_norm, dot_a_x_plus_b, foo_s_v_m, u_times_sum_w};

// ---- powerpax: chunked_vmap, sliced_scan, checkpoint_chunked_scan (scans branch) ------------

/// A program with its `captured` inputs bound (FORMAT: `captured` values are constants of the
/// closure, never batched): `tanh_matmul_and_sqnorm` captures `w`.
fn powerpax_program<B: Backend>(
    case: &Case,
) -> Result<impl Fn(Vec<Pt<B>>) -> Pt<B> + Clone, String> {
    let device = Default::default();
    let captured: BTreeMap<String, Pt<B>> = case
        .captured
        .iter()
        .map(|(k, input)| Ok((k.clone(), Pt::Leaf(input_leaf(case.input(input)?, &device)))))
        .collect::<Result<_, String>>()?;
    let plain = program::<B>(&case.program);
    let id = case.program.clone();
    match (id.as_str(), plain) {
        ("identity" | "tanh_matmul_and_sqnorm", _) | (_, Some(_)) => {}
        _ => return Err(format!("runner: unknown program {id:?}")),
    }
    Ok(move |args: Vec<Pt<B>>| match id.as_str() {
        "identity" => programs::identity(args),
        "tanh_matmul_and_sqnorm" => programs::tanh_matmul_and_sqnorm(args, captured["w"].clone()),
        _ => plain.expect("checked above")(args),
    })
}

/// A scan body `(carry, x) -> (carry, y)` registered for `id`.
type ScanBody<B> = fn(Pt<B>, Pt<B>) -> (Pt<B>, Pt<B>);

fn scan_body<B: Backend>(id: &str) -> Result<ScanBody<B>, String> {
    match id {
        "cumsum_carry" => Ok(programs::cumsum_carry),
        "sincos_carry" => Ok(programs::sincos_carry),
        other => Err(format!("runner: unknown scan body {other:?}")),
    }
}

/// Per-step scalars are Burn's scalars, `[1]` tensors (see `programs::sum1`): stacked, they
/// give `(n, 1)` where JAX has `(n,)`. Reports such a `ys` leaf with JAX's shape.
fn jax_ys_shape(case: &Case, outputs: &mut Outputs) {
    let Expected::Outputs(expected) = &case.expected else {
        return;
    };
    if let (Some(Some(e)), Some(Some(g))) = (expected.get("ys"), outputs.get_mut("ys")) {
        if g.shape.len() == e.shape.len() + 1 && g.shape.last() == Some(&1) {
            g.shape.pop();
        }
    }
}

fn param_isize(case: &Case, key: &str) -> Result<Option<isize>, String> {
    case.param(key)
        .map(|v| {
            v.as_i64()
                .map(|x| x as isize)
                .ok_or(format!("bad {key}: {v}"))
        })
        .transpose()
}

fn param_bool(case: &Case, key: &str) -> bool {
    case.param(key).and_then(Value::as_bool).unwrap_or(false)
}

/// `powerpax.chunked_vmap` (FORMAT 3.6): every positional argument mapped on axis 0.
fn api_chunked_vmap(case: &Case) -> Result<Run, String> {
    let chunk = param_isize(case, "chunk_size")?.ok_or("chunked_vmap needs a chunk_size")?;
    let f = powerpax_program::<V>(case)?;
    let chunked = match burn_vmap::transform::chunked_vmap(move |a: Pt<V>| f(a.into_args()), chunk)
    {
        Ok(c) => c,
        Err(e) => return Ok(Run::Error(e)),
    };
    let args = Pt::Tuple(build_args::<V>(case)?);
    Ok(match chunked.call::<V, V, _, _, _, Pt<V>>(args) {
        Ok(out) => {
            let mut outputs = Outputs::new();
            collect_outputs("out", out, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// `powerpax.sliced_scan` (FORMAT 3.7), `args = [init, xs]`.
fn api_sliced_scan(case: &Case) -> Result<Run, String> {
    type B = V;
    let body = scan_body::<B>(&case.program)?;
    let [init, xs] = take(build_args::<B>(case)?);
    let result = burn_vmap::transform::sliced_scan(body, init, xs)
        .slice(
            param_isize(case, "start")?,
            param_isize(case, "stop")?,
            param_isize(case, "step")?,
        )
        .reverse(param_bool(case, "reverse"))
        .call::<B, Pt<B>, Pt<B>, Pt<B>>();
    Ok(match result {
        Ok((carry, ys)) => {
            let mut outputs = Outputs::new();
            collect_outputs("carry", carry, &mut outputs);
            collect_outputs("ys", ys, &mut outputs);
            jax_ys_shape(case, &mut outputs);
            Run::Outputs(outputs)
        }
        Err(e) => Run::Error(e),
    })
}

/// `powerpax.checkpoint_chunked_scan` (FORMAT 3.8) on `Autodiff<_>`: values, and derivatives
/// through the checkpointed scan (each from a fresh forward pass: a backward pass consumes the
/// graph).
fn api_checkpoint_chunked_scan(case: &Case) -> Result<Run, String> {
    type A = ADPlain;
    let body = scan_body::<A>(&case.program)?;
    let chunk = param_isize(case, "chunk_size")?;
    let reverse = param_bool(case, "reverse");
    /// `(init, xs, carry, ys)` of one forward pass.
    type Pass = (Pt<A>, Pt<A>, Pt<A>, Pt<A>);
    let run = |grad_init: bool, grad_xs: bool| -> Result<Pass, VmapError> {
        let [init, xs] = take(build_args::<A>(case).expect("inputs"));
        let init = if grad_init { require_grad(init) } else { init };
        let xs = if grad_xs { require_grad(xs) } else { xs };
        let (carry, ys) =
            burn_vmap::transform::checkpoint_chunked_scan(body, init.clone(), xs.clone())
                .chunk_size(chunk)
                .reverse(reverse)
                .call::<V, _, Pt<A>, Pt<A>, Pt<A>>()?;
        Ok((init, xs, carry, ys))
    };
    /// Backward from `t` (a rank-0 tensor is its own sum: NdArray cannot reshape it).
    fn backward_sum(t: Pt<A>) -> <A as AutodiffBackend>::Gradients {
        match t.rank() {
            0 => t.f::<0>().backward(),
            r => with_rank!(r, D => t.f::<D>().sum().backward()),
        }
    }
    let inner =
        |p: Pt<A>| p.map_leaves(&mut |l: Pt<A>| with_rank!(l.rank(), D => pt(l.f::<D>().inner())));

    let (_, _, carry, ys) = match run(false, false) {
        Ok(r) => r,
        Err(e) => return Ok(Run::Error(e)),
    };
    let carry_shape = carry.leaf().shape().to_vec();
    let mut outputs = Outputs::new();
    collect_outputs("carry", inner(carry.clone()), &mut outputs);
    collect_outputs("ys", inner(ys), &mut outputs);
    jax_ys_shape(case, &mut outputs);

    // d sum(carry) / d init
    let (init, _, carry, _) = run(true, false).map_err(|e| e.to_string())?;
    let g = grads_of(&init, &backward_sum(carry));
    collect_outputs("grad_sum_carry_wrt_init", g, &mut outputs);

    // d sum(ys) / d xs
    let (_, xs, _, ys) = run(false, true).map_err(|e| e.to_string())?;
    let g = grads_of(&xs, &backward_sum(ys));
    collect_outputs("grad_sum_ys_wrt_xs", g, &mut outputs);

    // Jacobian [i][j] = d carry_i / d init_j: one backward pass per carry element.
    let jac = match carry_shape.len() {
        0 => {
            let (init, _, carry, _) = run(true, false).map_err(|e| e.to_string())?;
            grads_of(&init, &backward_sum(carry))
        }
        1 => {
            let d = carry_shape[0];
            let rows: Vec<Tensor<V, 1>> = (0..d)
                .map(|i| {
                    let (init, _, carry, _) = run(true, false).map_err(|e| e.to_string())?;
                    let ci = carry.f::<1>().narrow(0, i, 1).sum();
                    Ok(grads_of(&init, &ci.backward()).f::<1>())
                })
                .collect::<Result<_, String>>()?;
            pt(Tensor::stack::<2>(rows, 0))
        }
        r => return Err(format!("runner: jacobian of a rank-{r} carry")),
    };
    collect_outputs("jacobian_carry_wrt_init", jac, &mut outputs);
    Ok(Run::Outputs(outputs))
}

// =================================================================================================
// Programs
// =================================================================================================

/// A program: positional arguments to result, on any backend.
type Program<B> = fn(Vec<Pt<B>>) -> Pt<B>;

/// The program registered for `id` (FORMAT section 4).
fn program<B: Backend>(id: &str) -> Option<Program<B>> {
    use programs::*;
    let f: Program<B> = match id {
        "a_times_sum_b_plus_a" => a_times_sum_b_plus_a,
        "argmax" => argmax,
        "concat" => concat,
        "concat_double" => concat_double,
        "conv2d_same" => conv2d_same,
        "cumsum" => cumsum,
        "dict_sum_scale" => dict_sum_scale,
        "dot" => dot,
        "dot_self_plus_one" => dot_self_plus_one,
        "index" => index,
        "log_softmax_axis0" => log_softmax_axis0,
        "matmul" => matmul,
        "max_axis1" => max_axis1,
        "max_pool_2x2" => max_pool_2x2,
        "mean_all" => mean_all,
        "mean_axis0" => mean_axis0,
        "mlp_tanh_xent" => mlp_tanh_xent,
        "identity" => identity,
        "square" => square,
        "triple" => triple,
        "tanh_times_sumsq" => tanh_times_sumsq,
        "scale_by_sum" => scale_by_sum,
        "tanh_matmul" => tanh_matmul,
        "affine" => affine,
        "add_pair" => add_pair,
        "tree_stats" => tree_stats,
        "mse_linreg" => mse_linreg,
        "mse_linreg_aux" => mse_linreg_aux,
        "mse_linreg_bias" => mse_linreg_bias,
        "mse_linreg_dict_batch" => mse_linreg_dict_batch,
        "sum_matvec_times_ndim" => sum_matvec_times_ndim,
        "conv_tanh_meanpool_linear" => conv_tanh_meanpool_linear,
        "mul" => mul,
        "reshape_2x3" => reshape_2x3,
        "softmax" => softmax,
        "sum_axis0" => sum_axis0,
        "sum_pair" => sum_pair,
        "transpose" => transpose,
        "where_gt_else_neg" => where_gt_else_neg,
        _ => return None,
    };
    Some(f)
}

/// A program that takes gradients itself: runs on an autodiff backend, returns inner tensors.
type AdProgram<B> = fn(Vec<Pt<B>>) -> Pt<<B as AutodiffBackend>::InnerBackend>;

/// The gradient-taking program registered for `id`.
fn ad_program<B: AutodiffBackend>(id: &str) -> Option<AdProgram<B>> {
    use programs::*;
    let f: AdProgram<B> = match id {
        "grad_w_tanh_sq" => grad_w_tanh_sq,
        _ => return None,
    };
    Some(f)
}

mod programs {
    use burn::tensor::activation;
    use burn::tensor::module::{conv2d, max_pool2d};
    use burn::tensor::ops::PaddedConvOptions;

    use super::*;

    // ---- helpers ----------------------------------------------------------------------------

    /// A `[1]` tensor as a rank-0 one.
    pub fn scalar<B: Backend, K: BasicOps<B>>(t: Tensor<B, 1, K>) -> Tensor<B, 0, K> {
        t.reshape([0usize; 0])
    }

    /// Removes the size-1 axis `axis` (by a reshape: `squeeze_dim` refuses to produce rank 0).
    pub fn drop_axis<B: Backend, K: BasicOps<B>, const D: usize, const DM: usize>(
        t: Tensor<B, D, K>,
        axis: usize,
    ) -> Tensor<B, DM, K> {
        let dims = t.dims();
        assert_eq!(
            dims[axis], 1,
            "runner: drop_axis of an axis of size {}",
            dims[axis]
        );
        let mut out = [0usize; DM];
        for (o, &d) in out.iter_mut().zip(
            dims.iter()
                .enumerate()
                .filter(|(i, _)| *i != axis)
                .map(|(_, d)| d),
        ) {
            *o = d;
        }
        t.reshape(out)
    }

    /// A float tensor of rank `<= D` broadcast to rank `D` by leading 1-dims (numpy rules).
    pub fn lift<B: Backend, const D: usize>(p: Pt<B>) -> Tensor<B, D> {
        let r = p.rank();
        assert!(r <= D, "runner: cannot lift rank {r} to rank {D}");
        if r == D {
            return p.f::<D>();
        }
        with_rank!(r, R => {
            let t = p.f::<R>();
            let mut shape = [1usize; D];
            shape[D.saturating_sub(R)..].copy_from_slice(&t.dims());
            t.reshape(shape)
        })
    }

    /// `sum` over all elements, as Burn's scalar: a `[1]` tensor.
    ///
    /// Intermediate scalars stay `[1]` (they broadcast like rank 0); only a program's result is
    /// made rank 0 ([`scalar`]). NdArray cannot reshape to rank 0, so a rank-0 intermediate
    /// computed from an *unmapped* argument would panic (see the report on `Vmap` + rank 0).
    pub fn sum1<B: Backend>(p: Pt<B>) -> Tensor<B, 1> {
        // The sum of a scalar is itself (and Burn's autodiff cannot reduce a rank-0 tensor).
        if p.rank() == 0 {
            return p.f::<0>().reshape([1]);
        }
        with_rank!(p.rank(), D => p.f::<D>().sum())
    }

    /// Elementwise binary op with numpy broadcasting: `binop!(a, b, |x, y| expr)`.
    macro_rules! binop {
        ($a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {{
            let (a, b) = ($a, $b);
            with_rank!(a.rank().max(b.rank()), D => {
                let $x = lift::<B, D>(a);
                let $y = lift::<B, D>(b);
                pt($body)
            })
        }};
    }

    /// numpy `a @ b` (1-D operands act as vectors).
    pub fn np_matmul<B: Backend>(a: Pt<B>, b: Pt<B>) -> Pt<B> {
        match (a.rank(), b.rank()) {
            (1, 1) => pt(scalar(sum1(binop!(a, b, |x, y| x * y)))),
            (1, 2) => pt(a
                .f::<1>()
                .unsqueeze::<2>()
                .matmul(b.f::<2>())
                .squeeze_dim::<1>(0)),
            (2, 1) => pt(a
                .f::<2>()
                .matmul(b.f::<1>().unsqueeze_dim::<2>(1))
                .squeeze_dim::<1>(1)),
            (ra, rb) if ra >= 2 && rb >= 2 => binop!(a, b, |x, y| x.matmul(y)),
            (ra, rb) => panic!("runner: matmul of ranks {ra} and {rb} is not supported"),
        }
    }

    /// Mean over rows of `-log_softmax(logits)[label]`, logits `(b, c)`, labels `(b,)`.
    ///
    /// A loss is returned as Burn's scalar, a `[1]` tensor (what `mean()` gives): NdArray cannot
    /// reshape an unbatched tensor to rank 0. The apis that take a loss accept it as JAX's `()`.
    pub fn xent<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logp = activation::log_softmax(logits, 1);
        let picked = logp.gather(1, labels.unsqueeze_dim::<2>(1));
        picked.mean().neg()
    }

    // ---- jax.vmap programs --------------------------------------------------------------------

    pub fn a_times_sum_b_plus_a<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [a, b] = take(args);
        let rank = a.rank();
        let s = pt(sum1(b));
        let a2 = a.clone();
        let out = binop!(binop!(a, s, |x, y| x * y), a2, |x, y| x + y);
        if rank == 0 {
            pt(scalar(out.f::<1>()))
        } else {
            out
        }
    }

    pub fn argmax<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [r] = take(args);
        // numpy argmax without an axis: over the flattened array, first maximum.
        with_rank!(r.rank(), D => pt(scalar(r.f::<D>().reshape([-1]).argmax(0))))
    }

    pub fn concat<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [a, c] = take(args);
        with_rank!(a.rank(), D => pt(Tensor::cat(vec![a.f::<D>(), c.f::<D>()], 0)))
    }

    pub fn concat_double<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [a] = take(args);
        with_rank!(a.rank(), D => {
            let a = a.f::<D>();
            pt(Tensor::cat(vec![a.clone(), a.mul_scalar(2.0)], 0))
        })
    }

    /// One example CHW (or a batch NCHW), kernel OIHW, stride 1, SAME padding, no bias.
    pub fn conv2d_same<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [x, k] = take(args);
        let k = k.f::<4>();
        let [_, _, kh, kw] = k.dims();
        let (lo, hi) = (
            [(kh - 1) / 2, (kw - 1) / 2],
            [kh - 1 - (kh - 1) / 2, kw - 1 - (kw - 1) / 2],
        );
        let options = PaddedConvOptions::asymmetric([1, 1], lo, hi, [1, 1], 1);
        match x.rank() {
            3 => pt(conv2d(x.f::<3>().unsqueeze::<4>(), k, None, options).squeeze_dim::<3>(0)),
            4 => pt(conv2d(x.f::<4>(), k, None, options)),
            r => panic!("runner: conv2d_same of a rank-{r} input"),
        }
    }

    pub fn cumsum<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [r] = take(args);
        // numpy cumsum without an axis: over the flattened array.
        with_rank!(r.rank(), D => pt(r.f::<D>().reshape([-1]).cumsum(0)))
    }

    pub fn dict_sum_scale<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [d] = take(args);
        let (a, b) = (d.field("a"), d.field("b"));
        let s = pt(scalar(
            binop!(pt(sum1(a.clone())), b.clone(), |x, y| x * y).f::<1>(),
        ));
        let p = binop!(a, b, |x, y| x * y);
        Pt::Dict(BTreeMap::from([("p".to_owned(), p), ("s".to_owned(), s)]))
    }

    pub fn dot<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [a, b] = take(args);
        pt(scalar(sum1(binop!(a, b, |x, y| x * y))))
    }

    pub fn dot_self_plus_one<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [r] = take(args);
        pt(scalar(
            sum1(binop!(r.clone(), r, |x, y| x * y)).add_scalar(1.0),
        ))
    }

    /// `d/dw tanh(x·w)^2`: a gradient taken inside the program.
    pub fn grad_w_tanh_sq<B: AutodiffBackend>(args: Vec<Pt<B>>) -> Pt<B::InnerBackend> {
        let [w, x] = take(args);
        with_rank!(w.rank(), D => {
            let w = w.f::<D>().require_grad();
            let t = (x.f::<D>() * w.clone()).sum().tanh();
            let loss = t.clone() * t;
            let grads = loss.backward();
            pt(w.grad(&grads).expect("w is used"))
        })
    }

    /// `t[i]` along axis 0, `i` an int scalar.
    pub fn index<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [t, i] = take(args);
        let i = i.i::<0>().reshape([1]);
        with_rank_m1!(t.rank(), D, DM => pt(drop_axis::<B, Float, D, DM>(t.f::<D>().select(0, i), 0)))
    }

    pub fn log_softmax_axis0<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [m] = take(args);
        with_rank!(m.rank(), D => pt(activation::log_softmax(m.f::<D>(), 0)))
    }

    pub fn matmul<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [a, b] = take(args);
        np_matmul(a, b)
    }

    pub fn max_axis1<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [m] = take(args);
        with_rank_m1!(m.rank(), D, DM => pt(drop_axis::<B, Float, D, DM>(m.f::<D>().max_dim(1), 1)))
    }

    /// Window 2x2, stride 2, VALID, per channel; CHW (or NCHW).
    pub fn max_pool_2x2<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [x] = take(args);
        let pool = |x: Tensor<B, 4>| max_pool2d(x, [2, 2], [2, 2], [0, 0], [1, 1], false);
        match x.rank() {
            3 => pt(pool(x.f::<3>().unsqueeze::<4>()).squeeze_dim::<3>(0)),
            4 => pt(pool(x.f::<4>())),
            r => panic!("runner: max_pool_2x2 of a rank-{r} input"),
        }
    }

    pub fn mean_all<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [m] = take(args);
        with_rank!(m.rank(), D => pt(scalar(m.f::<D>().mean())))
    }

    pub fn mean_axis0<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [m] = take(args);
        with_rank_m1!(m.rank(), D, DM => pt(drop_axis::<B, Float, D, DM>(m.f::<D>().mean_dim(0), 0)))
    }

    pub fn mul<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [x, y] = take(args);
        binop!(x, y, |a, b| a * b)
    }

    pub fn reshape_2x3<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [m] = take(args);
        with_rank!(m.rank(), D => pt(m.f::<D>().reshape([2, 3])))
    }

    /// Softmax over the last axis.
    pub fn softmax<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [r] = take(args);
        with_rank_m1!(r.rank(), D, _DM => pt(activation::softmax(r.f::<D>(), D - 1)))
    }

    pub fn sum_axis0<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [m] = take(args);
        with_rank_m1!(m.rank(), D, DM => pt(drop_axis::<B, Float, D, DM>(m.f::<D>().sum_dim(0), 0)))
    }

    pub fn sum_pair<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [a, b] = take(args);
        pt(scalar(sum1(a) + sum1(b)))
    }

    /// All axes reversed (`m.T`).
    pub fn transpose<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [m] = take(args);
        with_rank!(m.rank(), D => pt(m.f::<D>().permute(core::array::from_fn::<isize, D, _>(|i| (D - i - 1) as isize))))
    }

    /// `where(r > t, r, -r)`, `t` broadcast (numpy rules).
    pub fn where_gt_else_neg<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [r, t] = take(args);
        binop!(r, t, |r, t| {
            let t = t.expand(r.dims());
            let mask = r.clone().greater(t);
            r.clone().neg().mask_where(mask, r)
        })
    }

    // ---- powerpax programs -------------------------------------------------------------------

    pub fn identity<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v] = take(args);
        v
    }

    /// `{"y": tanh(x @ w), "n": sum(x**2)}` with `w` captured.
    pub fn tanh_matmul_and_sqnorm<B: Backend>(args: Vec<Pt<B>>, w: Pt<B>) -> Pt<B> {
        let [x] = take(args);
        let y = np_matmul(x.clone(), w);
        let y = with_rank!(y.rank(), D => pt(y.f::<D>().tanh()));
        let n = pt(scalar(sum1(binop!(x.clone(), x, |a, b| a * b))));
        Pt::Dict(BTreeMap::from([("n".to_owned(), n), ("y".to_owned(), y)]))
    }

    /// Scan body: `c' = c + x`, `y = c'`.
    pub fn cumsum_carry<B: Backend>(c: Pt<B>, x: Pt<B>) -> (Pt<B>, Pt<B>) {
        let c2 = with_rank!(c.rank(), D => pt(c.f::<D>() + x.f::<D>()));
        (c2.clone(), c2)
    }

    /// Scan body: `c' = sin(c) cos(x) + 0.5 c x`, `y = sum(c'^2)` (Burn's scalar, `[1]`).
    pub fn sincos_carry<B: Backend>(c: Pt<B>, x: Pt<B>) -> (Pt<B>, Pt<B>) {
        with_rank!(c.rank(), D => {
            let (c, x) = (c.f::<D>(), x.f::<D>());
            let c2 = c.clone().sin() * x.clone().cos() + c * x * 0.5;
            let y = sum1(pt(c2.clone().powi_scalar(2)));
            (pt(c2), pt(y))
        })
    }

    // ---- losses -------------------------------------------------------------------------------

    /// `params {W1 (5,7), b1 (7,), W2 (7,3), b2 (3,)}, x (b,5), labels i32 (b,)` -> mean
    /// cross-entropy of a tanh MLP. `x (5,)`, `labels ()` are one row.
    pub fn mlp_tanh_xent<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [params, x, labels] = take(args);
        let (w1, b1) = (params.field("W1").f::<2>(), params.field("b1").f::<1>());
        let (w2, b2) = (params.field("W2").f::<2>(), params.field("b2").f::<1>());
        let (x, labels) = match x.rank() {
            2 => (x.f::<2>(), labels.i::<1>()),
            1 => (x.f::<1>().unsqueeze::<2>(), labels.i::<0>().reshape([1])),
            r => panic!("runner: mlp_tanh_xent of a rank-{r} x"),
        };
        let h = (x.matmul(w1) + b1.unsqueeze::<2>()).tanh();
        let logits = h.matmul(w2) + b2.unsqueeze::<2>();
        pt(xent(logits, labels))
    }

    // ---- optax.microbatching programs ---------------------------------------------------------

    /// `x * x` for any dtype and shape.
    pub fn square<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [x] = take(args);
        let r = x.rank();
        if x.is_float() {
            with_rank!(r, D => { let t = x.f::<D>(); pt(t.clone() * t) })
        } else {
            with_rank!(r, D => { let t = x.i::<D>(); pt(t.clone() * t) })
        }
    }

    pub fn triple<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v] = take(args);
        with_rank!(v.rank(), D => pt(v.f::<D>() * 3.0))
    }

    /// `tanh(v) * sum(v**2)`.
    pub fn tanh_times_sumsq<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v] = take(args);
        let v = v.f::<1>();
        let s = (v.clone() * v.clone()).sum();
        pt(v.tanh() * s)
    }

    /// `v * sum(v)`.
    pub fn scale_by_sum<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v] = take(args);
        let v = v.f::<1>();
        pt(v.clone() * v.sum())
    }

    /// `tanh(v @ w)`.
    pub fn tanh_matmul<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v, w] = take(args);
        pt(np_matmul(v, w).f::<1>().tanh())
    }

    /// `v @ w + b` with `b` a keyword argument (last).
    pub fn affine<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [w, v, b] = take(args);
        pt(np_matmul(v, w).f::<1>() + b.f::<1>())
    }

    pub fn add_pair<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v, u] = take(args);
        binop!(v, u, |x, y| x + y)
    }

    /// `{"per": 2v, "total": sum(v), "avg": v**2, "stats": (max(v), min(v))}`.
    pub fn tree_stats<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [v] = take(args);
        let v = v.f::<1>();
        let mut m = BTreeMap::new();
        m.insert("per".to_string(), pt(v.clone() * 2.0));
        m.insert("total".to_string(), pt(scalar(v.clone().sum())));
        m.insert("avg".to_string(), pt(v.clone() * v.clone()));
        m.insert(
            "stats".to_string(),
            Pt::Tuple(vec![pt(scalar(v.clone().max())), pt(scalar(v.min()))]),
        );
        Pt::Dict(m)
    }

    /// `X @ w - Y` (numpy matmul; an int `Y` as float).
    fn residual<B: Backend>(w: Pt<B>, x: Pt<B>, y: Pt<B>) -> Pt<B> {
        let y = if y.is_float() {
            y
        } else {
            with_rank!(y.rank(), D => pt(y.i::<D>().float()))
        };
        let preds = np_matmul(x, w);
        binop!(preds, y, |p, t| p - t)
    }

    /// `mean over all elements` as `[1]`.
    fn mean1<B: Backend>(p: Pt<B>) -> Tensor<B, 1> {
        if p.rank() == 0 {
            return p.f::<0>().reshape([1]);
        }
        with_rank!(p.rank(), D => p.f::<D>().mean())
    }

    /// `0.5 * mean((X @ w - Y)**2)`.
    pub fn mse_linreg<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [w, x, y] = take(args);
        let d = residual(w, x, y);
        let sq = binop!(d.clone(), d, |a, b| a * b);
        pt(mean1(sq) * 0.5)
    }

    /// `(loss, {"preds": X @ w, "abs_err": |X @ w - Y|})`.
    pub fn mse_linreg_aux<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [w, x, y] = take(args);
        let preds = np_matmul(x.clone(), w.clone());
        let d = residual(w, x, y);
        let abs = with_rank!(d.rank(), D => pt(d.clone().f::<D>().abs()));
        let sq = binop!(d.clone(), d, |a, b| a * b);
        let mut aux = BTreeMap::new();
        aux.insert("preds".to_string(), preds);
        aux.insert("abs_err".to_string(), abs);
        Pt::Tuple(vec![pt(mean1(sq) * 0.5), Pt::Dict(aux)])
    }

    /// `0.5 * mean((X @ w + b - Y)**2)`.
    pub fn mse_linreg_bias<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [w, b, x, y] = take(args);
        let d = residual(w, x, y);
        let d = binop!(d, b, |r, c| r + c);
        let sq = binop!(d.clone(), d, |a, b| a * b);
        pt(mean1(sq) * 0.5)
    }

    /// `0.5 * mean((batch.X @ w - batch.Y)**2)` over all elements.
    pub fn mse_linreg_dict_batch<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [w, batch] = take(args);
        let d = residual(w, batch.field("X"), batch.field("Y"));
        let sq = binop!(d.clone(), d, |a, b| a * b);
        pt(mean1(sq) * 0.5)
    }

    /// `sum(X @ w) * ndim(X)`.
    pub fn sum_matvec_times_ndim<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [w, x] = take(args);
        let ndim = x.rank() as f32;
        pt(sum1(np_matmul(x, w)) * ndim)
    }

    /// conv (VALID, stride 1) + bias, tanh, mean over h,w, linear, softmax cross-entropy.
    pub fn conv_tanh_meanpool_linear<B: Backend>(args: Vec<Pt<B>>) -> Pt<B> {
        let [params, x, labels] = take(args);
        let k = params.field("K").f::<4>();
        let bk = params.field("bk").f::<1>();
        let (wl, bl) = (params.field("Wl").f::<2>(), params.field("bl").f::<1>());
        let (x, labels) = match x.rank() {
            4 => (x.f::<4>(), labels.i::<1>()),
            3 => (x.f::<3>().unsqueeze::<4>(), labels.i::<0>().reshape([1])),
            r => panic!("runner: conv_tanh_meanpool_linear of a rank-{r} x"),
        };
        let z = conv2d(
            x,
            k,
            Some(bk),
            burn::tensor::ops::ConvOptions::new([1, 1], [0, 0], [1, 1], 1),
        );
        let [b, o, h, w] = z.dims();
        let f = z.tanh().reshape([b, o, h * w]).mean_dim(2).reshape([b, o]);
        let logits = f.matmul(wl) + bl.unsqueeze::<2>();
        pt(xent(logits, labels))
    }
}

// =================================================================================================
// The runner
// =================================================================================================

thread_local! {
    /// Message and location of the last panic on this thread (set by the runner's panic hook).
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    LAST_PANIC
        .with(|p| p.borrow_mut().take())
        .unwrap_or_else(|| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic with a non-string payload".into())
        })
}

fn run_case(case: &Case) -> Outcome {
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        run_api(case).map(|r| r.and_then(|run| judge(case, run)))
    }));
    match result {
        Ok(None) => Outcome::Skip(format!("{} not implemented yet", case.api)),
        Ok(Some(Ok(()))) => Outcome::Pass,
        Ok(Some(Err(why))) => Outcome::Fail(why),
        Err(payload) => Outcome::Fail(format!("panicked: {}", panic_message(&*payload))),
    }
}

#[test]
fn conformance() {
    let dir = vectors_dir();
    let filter = std::env::var("BURN_VMAP_FILTER").ok();
    let cases = load_cases(&dir);
    assert!(!cases.is_empty(), "no *.json case in {}", dir.display());

    // Panics are FAILs of their case: record the message instead of printing it.
    let default_hook = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()));
        if let Some(msg) = msg {
            let at = info
                .location()
                .map(|l| format!(" (at {}:{})", l.file(), l.line()))
                .unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(format!("{msg}{at}")));
        }
    }));

    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, case) in &cases {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        LAST_PANIC.with(|p| p.borrow_mut().take());
        let outcome = match case {
            Ok(case) => run_case(case),
            Err(e) => Outcome::Fail(e.clone()),
        };
        match outcome {
            Outcome::Pass => {
                passed += 1;
                println!("PASS {name}");
            }
            Outcome::Fail(why) => {
                failed += 1;
                println!("FAIL {name}: {why}");
            }
            Outcome::Skip(why) => {
                skipped += 1;
                println!("SKIP {name}: {why}");
            }
        }
    }
    panic::set_hook(default_hook);

    println!("conformance: {passed} passed, {failed} failed, {skipped} skipped");
    assert_eq!(
        failed, 0,
        "{failed} conformance case(s) failed (see the FAIL lines above)"
    );
}

// =================================================================================================
// Extra powerpax cases: the reference cases with other parameters and lengths,
// judged against host loops written here (f64), through the same apis and comparison.
// =================================================================================================

/// The first case named `name`, parsed.
fn load_case(name: &str) -> Case {
    let path = vectors_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Case::parse(&serde_json::from_str(&text).unwrap()).unwrap()
}

fn array(shape: Vec<usize>, data: Vec<f64>) -> Array {
    Array {
        dtype: DType::F32,
        shape,
        data,
    }
}

/// Keeps the first `n` rows of input `name`.
fn truncate_rows(case: &mut Case, name: &str, n: usize) {
    let a = case.inputs.get_mut(name).unwrap();
    let row: usize = a.shape[1..].iter().product();
    a.shape[0] = n;
    a.data.truncate(n * row);
}

fn run_extra(case: &Case) -> Result<(), String> {
    match run_case(case) {
        Outcome::Pass => Ok(()),
        Outcome::Fail(why) => Err(format!("{}: {why}", case.name)),
        Outcome::Skip(why) => Err(format!("{}: skipped: {why}", case.name)),
    }
}

/// `range(*slice(start, stop, step).indices(n))`, as Python computes it.
fn py_slice(n: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<usize> {
    let (lower, upper) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let fix = |v: i64| {
        if v < 0 {
            (v + n).max(lower)
        } else {
            v.min(upper)
        }
    };
    let mut i = start.map_or(if step > 0 { lower } else { upper }, fix);
    let stop = stop.map_or(if step > 0 { upper } else { lower }, fix);
    let mut out = vec![];
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        out.push(i as usize);
        i += step;
    }
    out
}

#[test]
fn powerpax_extra_sliced_scan_cases() {
    let mut failures = vec![];
    let mut count = 0;
    for base in [
        "sliced_scan_xs_startN_stopN_stepN_revFalse",
        "sliced_scan_xs2_startN_stopN_stepN_revFalse",
    ] {
        let base = load_case(base);
        for n in [0usize, 1, 4, 10] {
            for (start, stop, step) in [
                (None, None, None),
                (Some(-2), None, None),
                (Some(1), Some(-1), Some(2)),
                (None, None, Some(-3)),
                (Some(7), Some(-9), Some(-1)),
                (Some(12), Some(-12), Some(-5)),
                (Some(3), Some(3), None),
                (Some(-100), Some(100), Some(4)),
            ] {
                for reverse in [false, true] {
                    let mut case = base.clone();
                    case.name = format!(
                        "{} n{n} {start:?}:{stop:?}:{step:?} rev{reverse}",
                        base.name
                    );
                    truncate_rows(&mut case, "xs", n);
                    for (k, v) in [("start", start), ("stop", stop), ("step", step)] {
                        case.params
                            .insert(k.into(), v.map_or(Value::Null, Value::from));
                    }
                    case.params.insert("reverse".into(), Value::from(reverse));
                    // Oracle: cumsum_carry as a host loop, then the Python slice.
                    let xs = &case.inputs["xs"];
                    let row: usize = xs.shape[1..].iter().product();
                    let mut c = case.inputs["init"].data.clone();
                    let mut ys = vec![vec![]; n];
                    let order: Vec<usize> = if reverse {
                        (0..n).rev().collect()
                    } else {
                        (0..n).collect()
                    };
                    for t in order {
                        for (ci, x) in c.iter_mut().zip(&xs.data[t * row..(t + 1) * row]) {
                            *ci += x;
                        }
                        ys[t] = c.clone();
                    }
                    let idx = py_slice(n as i64, start, stop, step.unwrap_or(1));
                    let mut ys_shape = xs.shape.clone();
                    ys_shape[0] = idx.len();
                    let expected = BTreeMap::from([
                        ("carry".to_string(), Some(array(xs.shape[1..].to_vec(), c))),
                        (
                            "ys".to_string(),
                            Some(array(
                                ys_shape,
                                idx.iter().flat_map(|&t| ys[t].clone()).collect(),
                            )),
                        ),
                    ]);
                    case.expected = Expected::Outputs(expected);
                    count += 1;
                    if let Err(e) = run_extra(&case) {
                        failures.push(e);
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn powerpax_extra_checkpoint_chunked_scan_cases() {
    let base = load_case("checkpoint_chunked_scan_chunkNone_revFalse");
    let d = base.inputs["init"].shape[0];
    let mut failures = vec![];
    let mut count = 0;
    for n in [1usize, 5, 7] {
        for chunk in [None, Some(1), Some(2), Some(4), Some(5), Some(6), Some(9)] {
            for reverse in [false, true] {
                let mut case = base.clone();
                case.name = format!("checkpoint n{n} chunk{chunk:?} rev{reverse}");
                truncate_rows(&mut case, "xs", n);
                case.params
                    .insert("chunk_size".into(), chunk.map_or(Value::Null, Value::from));
                case.params.insert("reverse".into(), Value::from(reverse));
                // Oracle: sincos_carry as a host loop. Every op is elementwise, so d carry /
                // d init is diagonal: the product of the per-step derivatives.
                let xs = case.inputs["xs"].data.clone();
                let mut c = case.inputs["init"].data.clone();
                let mut cs = vec![c.clone()];
                let order: Vec<usize> = if reverse {
                    (0..n).rev().collect()
                } else {
                    (0..n).collect()
                };
                let mut ys = vec![0.0; n];
                let mut dc = vec![1.0; d];
                for &t in &order {
                    let x = &xs[t * d..(t + 1) * d];
                    for i in 0..d {
                        dc[i] *= c[i].cos() * x[i].cos() + 0.5 * x[i];
                    }
                    c = (0..d)
                        .map(|i| c[i].sin() * x[i].cos() + 0.5 * c[i] * x[i])
                        .collect();
                    ys[t] = c.iter().map(|v| v * v).sum();
                    cs.push(c.clone());
                }
                // d sum(ys) / d xs: reverse accumulation over the executed steps.
                let mut gc = vec![0.0; d];
                let mut gx = vec![0.0; n * d];
                for (k, &t) in order.iter().enumerate().rev() {
                    let (before, after) = (&cs[k], &cs[k + 1]);
                    let x = &xs[t * d..(t + 1) * d];
                    for i in 0..d {
                        let g = gc[i] + 2.0 * after[i];
                        gx[t * d + i] = g * (-before[i].sin() * x[i].sin() + 0.5 * before[i]);
                        gc[i] = g * (before[i].cos() * x[i].cos() + 0.5 * x[i]);
                    }
                }
                let mut jac = vec![0.0; d * d];
                for i in 0..d {
                    jac[i * d + i] = dc[i];
                }
                case.expected = Expected::Outputs(BTreeMap::from([
                    ("carry".to_string(), Some(array(vec![d], c))),
                    ("ys".to_string(), Some(array(vec![n], ys))),
                    (
                        "grad_sum_carry_wrt_init".to_string(),
                        Some(array(vec![d], dc)),
                    ),
                    (
                        "grad_sum_ys_wrt_xs".to_string(),
                        Some(array(vec![n, d], gx)),
                    ),
                    (
                        "jacobian_carry_wrt_init".to_string(),
                        Some(array(vec![d, d], jac)),
                    ),
                ]));
                count += 1;
                if let Err(e) = run_extra(&case) {
                    failures.push(e);
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn powerpax_extra_chunked_vmap_cases() {
    let base = load_case("chunked_vmap_chunk3");
    let w = base.inputs["w"].data.clone();
    let (k, m) = (base.inputs["w"].shape[0], base.inputs["w"].shape[1]);
    let mut failures = vec![];
    let mut count = 0;
    for batch in [1usize, 6, 10] {
        for chunk in 1..=(batch as i64 + 2) {
            let mut case = base.clone();
            case.name = format!("chunked_vmap batch{batch} chunk{chunk}");
            truncate_rows(&mut case, "x", batch);
            case.params.insert("chunk_size".into(), Value::from(chunk));
            let x = case.inputs["x"].data.clone();
            let mut y = vec![];
            let mut norms = vec![];
            for b in 0..batch {
                let row = &x[b * k..(b + 1) * k];
                for j in 0..m {
                    y.push((0..k).map(|i| row[i] * w[i * m + j]).sum::<f64>().tanh());
                }
                norms.push(row.iter().map(|v| v * v).sum());
            }
            case.expected = Expected::Outputs(BTreeMap::from([
                ("out['y']".to_string(), Some(array(vec![batch, m], y))),
                ("out['n']".to_string(), Some(array(vec![batch], norms))),
            ]));
            count += 1;
            if let Err(e) = run_extra(&case) {
                failures.push(e);
            }
        }
    }
    // Errors: negative chunk sizes at construction, inconsistent sizes at the call.
    for chunk in [0i64, -1, -7] {
        let mut case = load_case("chunked_vmap_error_chunk0");
        case.name = format!("chunked_vmap chunk{chunk}");
        case.params.insert("chunk_size".into(), Value::from(chunk));
        case.expected = Expected::Error {
            kind: "chunk_size_not_positive".into(),
            details: serde_json::json!({ "chunk_size": chunk }),
        };
        count += 1;
        if let Err(e) = run_extra(&case) {
            failures.push(e);
        }
    }
    let mut case = load_case("checkpoint_chunked_scan_chunk2_revFalse");
    case.name = "checkpoint chunk -3".into();
    case.params.insert("chunk_size".into(), Value::from(-3));
    case.expected = Expected::Error {
        kind: "chunk_size_not_positive".into(),
        details: serde_json::json!({ "chunk_size": -3 }),
    };
    count += 1;
    if let Err(e) = run_extra(&case) {
        failures.push(e);
    }
    assert!(
        failures.is_empty(),
        "{} of {count} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
