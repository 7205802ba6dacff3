//! Code shared by the `per_example_gradients` and `gradient_moments` examples (and
//! `tests/examples_smoke.rs`): the UCI digits shipped in `data/`, a deterministic shuffle, the
//! MLP classifier, evaluation, gradients as flat vectors, progress bars and flags.
#![allow(dead_code)] // each example uses a part

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::tree::TensorVisitor;
use burn_vmap::{ParamGrads, Tree};
use flate2::read::GzDecoder;
use indicatif::{ProgressBar, ProgressStyle};

// -------------------------------------------------------------------------------------------------
// Datasets
// -------------------------------------------------------------------------------------------------

/// Where the digits live, relative to the package: `data/` once this crate is the repository
/// root, `../data/` while it grows in `next/`.
const DIGITS_CANDIDATES: [&str; 2] = ["data/digits.csv.gz", "../data/digits.csv.gz"];

/// The bundled UCI digits file (`data/digits.csv.gz`), looked up beside the package and in the
/// directory above it.
///
/// # Errors
/// `NotFound`, naming both places, when neither holds the file.
pub fn digits_path() -> io::Result<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates: Vec<PathBuf> = DIGITS_CANDIDATES.iter().map(|p| root.join(p)).collect();
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "digits: neither {} nor {} exists",
                    candidates[0].display(),
                    candidates[1].display()
                ),
            )
        })
}

/// A batch: images `[n, dim]` in `[0, 1]` and their labels `[n]`.
pub type Batch = (Tensor<2>, Tensor<1, Int>);

/// Images with integer pixels and their class labels.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// `rows * dim` pixels, row-major.
    pub pixels: Vec<u8>,
    /// One label per row, in `0..classes`.
    pub labels: Vec<u8>,
    /// Pixels per image (64 for digits).
    pub dim: usize,
    /// The largest possible pixel value (16 for digits); tensors are scaled by it.
    pub pixel_max: u8,
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl Dataset {
    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no image.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The rows `idx`, as a float tensor `[idx.len(), dim]` scaled to `[0, 1]` and a label
    /// tensor `[idx.len()]`.
    pub fn batch(&self, idx: &[usize], device: &Device) -> Batch {
        let scale = 1.0 / self.pixel_max as f32;
        let mut x = Vec::with_capacity(idx.len() * self.dim);
        for &i in idx {
            x.extend(
                self.pixels[i * self.dim..(i + 1) * self.dim]
                    .iter()
                    .map(|&p| p as f32 * scale),
            );
        }
        let y: Vec<i64> = idx.iter().map(|&i| self.labels[i] as i64).collect();
        (
            Tensor::from_data(TensorData::new(x, [idx.len(), self.dim]), device),
            Tensor::from_data(TensorData::new(y, [idx.len()]), device),
        )
    }

    /// Every row, in order.
    pub fn all(&self, device: &Device) -> Batch {
        let idx: Vec<usize> = (0..self.len()).collect();
        self.batch(&idx, device)
    }

    /// The rows `idx` as a new dataset.
    pub fn subset(&self, idx: &[usize]) -> Dataset {
        let mut pixels = Vec::with_capacity(idx.len() * self.dim);
        for &i in idx {
            pixels.extend_from_slice(&self.pixels[i * self.dim..(i + 1) * self.dim]);
        }
        Dataset {
            pixels,
            labels: idx.iter().map(|&i| self.labels[i]).collect(),
            dim: self.dim,
            pixel_max: self.pixel_max,
        }
    }

    /// A shuffled split into `(train, test)` with `test_len` test rows.
    pub fn split(&self, test_len: usize, rng: &mut SplitMix64) -> (Dataset, Dataset) {
        let mut idx: Vec<usize> = (0..self.len()).collect();
        rng.shuffle(&mut idx);
        let test_len = test_len.min(self.len());
        let (test, train) = idx.split_at(test_len);
        (self.subset(train), self.subset(test))
    }
}

/// Parses UCI digits in scikit-learn's CSV form: one image a line, 64 pixels in `0..=16`, then
/// the label in `0..=9`, comma-separated.
///
/// # Errors
/// A line with another number of fields, a pixel or label out of range, or a read error; the
/// message names the line.
pub fn parse_digits_csv<R: BufRead>(reader: R) -> io::Result<Dataset> {
    const DIM: usize = 64;
    let mut pixels = Vec::new();
    let mut labels = Vec::new();
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.trim().split(',').collect();
        if fields.len() != DIM + 1 {
            return Err(invalid(format!(
                "digits: line {}: {} fields, expected {} (64 pixels and a label)",
                n + 1,
                fields.len(),
                DIM + 1
            )));
        }
        let parse = |s: &str, max: u8, what: &str| -> io::Result<u8> {
            // The CSV stores integers as floats ("0.0") in some versions.
            let v: f64 = s.trim().parse().map_err(|_| {
                invalid(format!(
                    "digits: line {}: {what} `{s}` is not a number",
                    n + 1
                ))
            })?;
            if v.fract() != 0.0 || !(0.0..=max as f64).contains(&v) {
                return Err(invalid(format!(
                    "digits: line {}: {what} {v} is not an integer in 0..={max}",
                    n + 1
                )));
            }
            Ok(v as u8)
        };
        for f in &fields[..DIM] {
            pixels.push(parse(f, 16, "pixel")?);
        }
        labels.push(parse(fields[DIM], 9, "label")?);
    }
    Ok(Dataset {
        pixels,
        labels,
        dim: DIM,
        pixel_max: 16,
    })
}

/// UCI's optical recognition of handwritten digits (the 1,797-image copy scikit-learn ships),
/// CC BY 4.0, Alpaydin & Kaynak: see `data/README.md`. Read from [`digits_path`]: 1,797
/// images of 8×8 pixels.
///
/// # Errors
/// A missing or corrupt file.
pub fn load_digits() -> io::Result<Dataset> {
    let path = digits_path()?;
    let file = File::open(&path)?;
    parse_digits_csv(BufReader::new(GzDecoder::new(BufReader::new(file))))
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

// -------------------------------------------------------------------------------------------------
// Randomness
// -------------------------------------------------------------------------------------------------

/// SplitMix64: a small seeded generator for shuffling (no dependency, same order everywhere).
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A Fisher–Yates shuffle.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next_u64() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}

/// The batches of one epoch: a fresh shuffle of `0..n` cut into batches of `batch_size`; the
/// last, shorter batch is dropped (every step then has the same batch size).
pub fn epoch_batches(n: usize, batch_size: usize, rng: &mut SplitMix64) -> Vec<Vec<usize>> {
    let mut idx: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut idx);
    idx.chunks_exact(batch_size.max(1))
        .map(|c| c.to_vec())
        .collect()
}

// -------------------------------------------------------------------------------------------------
// Model
// -------------------------------------------------------------------------------------------------

/// Reads every float parameter once, so that a lazily initialized parameter draws its values
/// now, on the model's device, rather than inside a recording.
struct Touch;

impl ModuleVisitor for Touch {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let _ = param.val();
    }
}

/// Initializes every parameter of `model` now (Burn initializes parameters lazily, on first use).
pub fn init_params<M: Module>(model: &M) {
    model.visit(&mut Touch);
}

/// A multilayer perceptron classifier: `Linear-ReLU-...-Linear`, trained with softmax
/// cross-entropy. An ordinary Burn 0.22 module (no backend parameter). Its parameters are
/// `layers.{i}.weight` and `layers.{i}.bias`.
#[derive(Module, Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
    act: Relu,
}

impl Mlp {
    /// `sizes` = `[inputs, hidden..., classes]`.
    ///
    /// # Panics
    /// With fewer than two sizes.
    pub fn new(sizes: &[usize], device: &Device) -> Self {
        assert!(sizes.len() >= 2, "Mlp::new: give [inputs, ..., classes]");
        let model = Self {
            layers: sizes
                .windows(2)
                .map(|w| LinearConfig::new(w[0], w[1]).init(device))
                .collect(),
            act: Relu::new(),
        };
        init_params(&model);
        model
    }

    /// Logits `[n, classes]` of a batch `[n, inputs]`.
    pub fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let last = self.layers.len() - 1;
        let mut h = x;
        for (i, layer) in self.layers.iter().enumerate() {
            h = layer.forward(h);
            if i < last {
                h = self.act.forward(h);
            }
        }
        h
    }

    /// Mean softmax cross-entropy of a batch (one example is a batch of one): shape `[1]`.
    pub fn loss(&self, x: Tensor<2>, y: Tensor<1, Int>) -> Tensor<1> {
        let logp = burn::tensor::activation::log_softmax(self.forward(x), 1);
        logp.gather(1, y.unsqueeze_dim(1)).mean().neg()
    }

    /// Fraction of rows whose largest logit is the label.
    pub fn accuracy(&self, x: Tensor<2>, y: Tensor<1, Int>) -> f64 {
        let n = y.dims()[0];
        let pred = self.forward(x).argmax(1).squeeze_dim::<1>(1);
        let correct = pred.equal(y).int().sum().into_scalar::<i64>();
        correct as f64 / n.max(1) as f64
    }
}

// -------------------------------------------------------------------------------------------------
// Gradients as flat vectors
// -------------------------------------------------------------------------------------------------

/// Every float tensor of a tree, flattened, in leaf order.
struct Flatten(Vec<Tensor<1>>);

impl TensorVisitor for Flatten {
    fn visit_float<const D: usize>(&mut self, _path: &str, t: &Tensor<D>) {
        let n = t.shape().num_elements();
        self.0.push(t.clone().reshape([n]));
    }
}

/// Every gradient of `grads` as `(path, flat vector)`, in order.
pub fn flat_params(grads: &ParamGrads) -> Vec<(String, Tensor<1>)> {
    let mut flat = Flatten(Vec::with_capacity(grads.len()));
    grads
        .visit_tensors(&mut flat)
        .expect("parameters of rank at most 8");
    grads.paths().map(str::to_string).zip(flat.0).collect()
}

/// A tensor's values, flattened.
pub fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("float data")
}

// -------------------------------------------------------------------------------------------------
// Progress bars and flags
// -------------------------------------------------------------------------------------------------

/// A progress bar over `len` steps (hidden when stderr is not a terminal).
pub fn progress(len: usize, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} {elapsed} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(what.to_string());
    bar
}

/// Parses `--name value` from the command line.
///
/// # Errors
/// A value that does not parse.
pub fn flag<T: std::str::FromStr>(args: &[String], name: &str) -> Result<Option<T>, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(None),
        Some(i) => {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("{name} needs a value"))?;
            v.parse()
                .map(Some)
                .map_err(|_| format!("{name}: cannot parse `{v}`"))
        }
    }
}
