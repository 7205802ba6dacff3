//! Code shared by the examples: the datasets (UCI digits shipped in the repository's `data/`,
//! MNIST IDX files), a deterministic shuffle, the MLP classifier, evaluation, progress bars and
//! flags.
#![allow(dead_code)] // each example uses a part

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::{Device, Int, Tensor, TensorData};
use burn_vmap::ParamGrads;
use burn_vmap::Tree;
use burn_vmap::tree::TensorVisitor;
use flate2::read::GzDecoder;
use indicatif::{ProgressBar, ProgressStyle};

// -------------------------------------------------------------------------------------------------
// Datasets
// -------------------------------------------------------------------------------------------------

/// Where UCI's optical recognition of handwritten digits (the 1,797-image copy scikit-learn
/// ships, CC BY 4.0, Alpaydin & Kaynak: see `data/README.md`) is, relative to this crate's
/// manifest. No download.
pub const DIGITS_PATH: &str = "data/digits.csv.gz";

/// What is published of a data set, the only sizes a DP run may be configured from: under
/// add/remove neighbours the number of examples actually held, `N`, is private (a neighbouring
/// data set has one more or one fewer), so the sampling rate `q` and `δ` come from the
/// published size of the training split, never from `train.len()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// The data set's name.
    pub name: &'static str,
    /// The published size of the training split.
    pub train: usize,
    /// Pixels per image.
    pub dim: usize,
}

/// The UCI digits as published: 1,797 images of 8×8 pixels, of which the examples hold out
/// [`DIGITS_TEST`] for testing.
pub const DIGITS: Published = Published {
    name: "UCI digits",
    train: 1797 - DIGITS_TEST,
    dim: 64,
};

/// The images of the UCI digits the examples hold out for testing.
pub const DIGITS_TEST: usize = 360;

/// MNIST as published: 60,000 training images of 28×28 pixels.
pub const MNIST: Published = Published {
    name: "MNIST",
    train: 60_000,
    dim: 784,
};

impl Published {
    /// DP-SGD's sampling rate for an expected batch of `expected_batch` examples, `B / N` with
    /// the published `N`.
    pub fn sampling_rate(&self, expected_batch: usize) -> f64 {
        expected_batch as f64 / self.train as f64
    }

    /// The default `δ`, `1 / (10 N)` with the published `N`.
    pub fn default_delta(&self) -> f64 {
        1.0 / (10.0 * self.train as f64)
    }
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
    /// Pixels per image (64 for digits, 784 for MNIST).
    pub dim: usize,
    /// The largest possible pixel value (16 for digits, 255 for MNIST); tensors are scaled by it.
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

/// The examples of a [`Dataset`] as a `burn::data` dataset: item `i` is the index `i`, and the
/// batcher ([`Rows`]) reads the rows.
pub struct Indices(pub usize);

impl burn::data::dataset::Dataset<usize> for Indices {
    fn get(&self, index: usize) -> Result<usize, burn::data::dataset::DatasetError> {
        assert!(index < self.0, "index {index} out of {}", self.0);
        Ok(index)
    }

    fn len(&self) -> usize {
        self.0
    }
}

/// The batcher: the rows of the given indices of a [`Dataset`].
#[derive(Clone)]
pub struct Rows(pub std::sync::Arc<Dataset>);

impl burn::data::dataloader::batcher::Batcher<usize, Batch> for Rows {
    fn batch(&self, items: Vec<usize>, device: &Device) -> Batch {
        self.0.batch(&items, device)
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

/// Where `data/digits.csv.gz` is ([`DIGITS_PATH`] beside the crate's manifest).
///
/// # Errors
/// If the file is not there.
pub fn digits_path() -> io::Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(DIGITS_PATH);
    if path.is_file() {
        Ok(path)
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("digits: {} does not exist", path.display()),
        ))
    }
}

/// The UCI digits from `data/digits.csv.gz` (see [`DIGITS_PATH`]): 1,797 images of 8×8
/// pixels.
///
/// # Errors
/// If the file is in neither place, or corrupt.
pub fn load_digits() -> io::Result<Dataset> {
    let path = digits_path()?;
    let file = File::open(&path)?;
    parse_digits_csv(BufReader::new(GzDecoder::new(BufReader::new(file))))
}

/// Opens `dir/name`, or `dir/name.gz` (decompressed on the fly).
fn open_maybe_gz(dir: &Path, name: &str) -> io::Result<(PathBuf, Box<dyn Read>)> {
    let plain = dir.join(name);
    if plain.is_file() {
        return Ok((plain.clone(), Box::new(BufReader::new(File::open(plain)?))));
    }
    let gz = dir.join(format!("{name}.gz"));
    if gz.is_file() {
        let f = File::open(&gz)?;
        return Ok((gz, Box::new(GzDecoder::new(BufReader::new(f)))));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "mnist: neither {} nor {} exists",
            plain.display(),
            gz.display()
        ),
    ))
}

fn read_u32(r: &mut dyn Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

/// Reads an IDX file of unsigned bytes (LeCun's MNIST format): magic `0x0000_08_NN` (`NN` =
/// number of dims), big-endian `u32` sizes, then the data. Returns `(dims, data)`.
///
/// # Errors
/// Another magic number or element type, or a file shorter than its header says.
pub fn read_idx_u8(r: &mut dyn Read, what: &str) -> io::Result<(Vec<usize>, Vec<u8>)> {
    let magic = read_u32(r)?;
    if magic >> 8 != 0x08 {
        return Err(invalid(format!(
            "{what}: magic 0x{magic:08x} is not an IDX file of unsigned bytes (0x000008NN)"
        )));
    }
    let rank = (magic & 0xff) as usize;
    let mut dims = Vec::with_capacity(rank);
    for _ in 0..rank {
        dims.push(read_u32(r)? as usize);
    }
    let len: usize = dims.iter().product();
    let mut data = vec![0u8; len];
    r.read_exact(&mut data).map_err(|e| {
        invalid(format!(
            "{what}: expected {len} bytes of data for dims {dims:?}: {e}"
        ))
    })?;
    Ok((dims, data))
}

/// Loads one MNIST split (`"train"` or `"t10k"`) from `dir`: `{split}-images-idx3-ubyte` and
/// `{split}-labels-idx1-ubyte`, each optionally gzipped (`.gz`).
///
/// # Errors
/// Missing files, malformed IDX, or image and label counts that differ.
pub fn load_mnist_split(dir: &Path, split: &str) -> io::Result<Dataset> {
    let (ipath, mut images) = open_maybe_gz(dir, &format!("{split}-images-idx3-ubyte"))?;
    let (lpath, mut labels) = open_maybe_gz(dir, &format!("{split}-labels-idx1-ubyte"))?;
    let (idims, pixels) = read_idx_u8(&mut *images, &ipath.display().to_string())?;
    let (ldims, labels) = read_idx_u8(&mut *labels, &lpath.display().to_string())?;
    if idims.len() != 3 || ldims.len() != 1 || idims[0] != ldims[0] {
        return Err(invalid(format!(
            "mnist: images {} have dims {idims:?} and labels {} dims {ldims:?}; expected \
             [n, rows, cols] and [n]",
            ipath.display(),
            lpath.display()
        )));
    }
    if let Some(bad) = labels.iter().find(|&&l| l > 9) {
        return Err(invalid(format!(
            "mnist: {}: label {bad} is not in 0..=9",
            lpath.display()
        )));
    }
    Ok(Dataset {
        pixels,
        labels,
        dim: idims[1] * idims[2],
        pixel_max: 255,
    })
}

/// Loads MNIST from `dir`: `(train, test)`.
///
/// # Errors
/// As [`load_mnist_split`].
pub fn load_mnist(dir: &Path) -> io::Result<(Dataset, Dataset)> {
    Ok((
        load_mnist_split(dir, "train")?,
        load_mnist_split(dir, "t10k")?,
    ))
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
/// last, shorter batch is dropped (every step then has the same batch size, which DP-SGD's
/// noise calibration and microbatching rely on).
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

/// A multilayer perceptron classifier: `Linear-ReLU-...-Linear`, trained with softmax
/// cross-entropy. Its parameters are `layers.{i}.weight` and `layers.{i}.bias`.
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
        // Burn 0.22's clones share a lazily initialized parameter: clones start equal.
        Self {
            layers: sizes
                .windows(2)
                .map(|w| LinearConfig::new(w[0], w[1]).init(device))
                .collect(),
            act: Relu::new(),
        }
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
        let correct: i64 = pred.equal(y).int().sum().into_scalar::<i64>();
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
// Progress bars
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
