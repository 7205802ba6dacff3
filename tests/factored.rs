//! Clipped sums and `(g, g²)` moments through `micro_grad_module` against the per-example loop
//! (Burn's own backward, one example at a time), for burn-nn 0.22 layers whose per-example
//! weight gradients the engine holds factored: a `Linear` over sequences, 1-d and 2-d
//! convolutions (strides, padding, dilation, groups), an `Embedding`, an `Lstm`, a model of all
//! of them and a `TransformerEncoder` with an `Embedding` (`models`); 3-d and transposed
//! convolutions, a `Gru`, gated and normalized layers, a `TransformerDecoder` and
//! `CrossAttention` (`layers`); microbatched and not. Then that the gradients really stay
//! factored: the peak memory of a clipped sum stays far below one `batch × d_in × d_out`
//! tensor, which the per-example gradients (`Concat`) do build.

#[path = "factored/alloc.rs"]
mod alloc;
#[path = "shared/gated.rs"]
mod gated;
#[path = "factored/layers.rs"]
mod layers;
#[path = "factored/memory.rs"]
mod memory;
#[path = "factored/models.rs"]
mod models;
#[path = "factored/oracle.rs"]
mod oracle;
