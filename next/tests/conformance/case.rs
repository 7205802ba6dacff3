//! Cases: the JSON model of the reference vectors (`FORMAT.md`), and loading them.

use crate::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DType {
    F32,
    I32,
    Bool,
}

impl DType {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        match s {
            "float32" => Ok(DType::F32),
            "int32" => Ok(DType::I32),
            "bool" => Ok(DType::Bool),
            other => Err(format!("unsupported dtype {other:?}")),
        }
    }

    pub(crate) fn name(self) -> &'static str {
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
pub(crate) struct Array {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<f64>,
}

impl Array {
    pub(crate) fn parse(v: &Value) -> Result<Self, String> {
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

pub(crate) fn flatten_json(v: &Value, out: &mut Vec<f64>) -> Result<(), String> {
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
pub(crate) enum ArgSpec {
    Input(String),
    Struct(BTreeMap<String, ArgSpec>),
}

impl ArgSpec {
    pub(crate) fn parse(v: &Value) -> Result<Self, String> {
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
pub(crate) enum Expected {
    /// Output key (`out`, `grads['W1']`, ...) -> array, or `None` for a `null` (absent) output.
    Outputs(BTreeMap<String, Option<Array>>),
    /// The call must fail with an error of this kind.
    Error { kind: String, details: Value },
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Tolerance {
    pub(crate) rtol: f64,
    pub(crate) atol: f64,
}

/// One conformance case (one JSON file).
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) name: String,
    pub(crate) api: String,
    pub(crate) program: String,
    pub(crate) args: Vec<ArgSpec>,
    #[allow(dead_code)] // used by later apis (`affine`)
    pub(crate) kwargs: BTreeMap<String, String>,
    #[allow(dead_code)] // used by later apis (`tanh_matmul_and_sqnorm`)
    pub(crate) captured: BTreeMap<String, String>,
    pub(crate) params: serde_json::Map<String, Value>,
    pub(crate) inputs: BTreeMap<String, Array>,
    pub(crate) expected: Expected,
    pub(crate) tolerance: Tolerance,
}

impl Case {
    pub(crate) fn parse(v: &Value) -> Result<Self, String> {
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

    pub(crate) fn param(&self, key: &str) -> Option<&Value> {
        self.params.get(key).filter(|v| !v.is_null())
    }

    pub(crate) fn input(&self, name: &str) -> Result<&Array, String> {
        self.inputs
            .get(name)
            .ok_or_else(|| format!("no input named {name:?}"))
    }

    /// Position of the positional argument that is the input `name`.
    pub(crate) fn arg_position(&self, name: &str) -> Option<usize> {
        self.args
            .iter()
            .position(|a| matches!(a, ArgSpec::Input(n) if n == name))
    }
}

pub(crate) fn vectors_dir() -> PathBuf {
    std::env::var_os("BURN_VMAP_VECTORS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors")))
}

/// Every `*.json` of `dir`, sorted by file name: `(name, parsed case or parse error)`.
pub(crate) fn load_cases(dir: &Path) -> Vec<(String, Result<Case, String>)> {
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
