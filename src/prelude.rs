//! The names most programs use: the crate root's, and every transform function.
//!
//! ```
//! use burn::tensor::{Device, Tensor};
//! use burn_vmap::prelude::*;
//! let xs = Tensor::<2>::ones([6, 2], &Device::default());
//! let ys: Tensor<2> = chunked_vmap(|x: Tensor<1>| x * 2.0, 4).unwrap().call(xs).unwrap();
//! assert_eq!(ys.dims(), [6, 2]);
//! ```

pub use crate::transform::{
    auto_vmap, checkpoint_chunked_scan, chunked_vmap, custom_vmap, scan, sequential_vmap,
    sliced_scan,
};
pub use crate::{
    BatchOps, MicroAux, ParamGrads, Randomness, Static, Tree, Vmap, VmapError, clip_by_global_norm,
    global_norm, micro_grad, micro_grad_module, micro_vmap, per_example_grads, vmap,
};
