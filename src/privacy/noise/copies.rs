//! Every copy of a tensor's values between the host and its device that the noise makes goes
//! through [`to_host`] or [`to_device`], so the tests can count them: hardened noise on a wgpu
//! or CUDA device (the keyed kernel) makes none, and reads one flag (are all values finite).

use burn::tensor::{Bool, DType, Device, Tensor, TensorData};

#[cfg(test)]
thread_local! {
    static COUNTS: std::cell::Cell<Copies> = const {
        std::cell::Cell::new(Copies { to_host: 0, to_device: 0, flags: 0 })
    };
}

/// The copies this thread's noise has made so far (tests).
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Copies {
    /// Tensors whose values were read back.
    pub(crate) to_host: usize,
    /// Tensors written from host values.
    pub(crate) to_device: usize,
    /// Single flags read back.
    pub(crate) flags: usize,
}

#[cfg(test)]
pub(crate) fn counted() -> Copies {
    COUNTS.with(std::cell::Cell::get)
}

#[cfg(test)]
fn count(add: impl FnOnce(&mut Copies)) {
    COUNTS.with(|c| {
        let mut n = c.get();
        add(&mut n);
        c.set(n);
    });
}

/// `tensor`'s values on the host.
pub(crate) fn to_host(tensor: Tensor<1>) -> TensorData {
    #[cfg(test)]
    count(|n| n.to_host += 1);
    tensor.into_data()
}

/// `data` as a tensor of `dtype` on `device`.
pub(crate) fn to_device(data: TensorData, device: &Device, dtype: DType) -> Tensor<1> {
    #[cfg(test)]
    count(|n| n.to_device += 1);
    Tensor::from_data(data, (device, dtype))
}

/// Whether any of `flags` is set, read back as one value.
pub(crate) fn any(flags: Tensor<1, Bool>) -> bool {
    #[cfg(test)]
    count(|n| n.flags += 1);
    flags.any().into_scalar()
}
