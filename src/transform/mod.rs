//! The transforms: [`vmap`] and per-example gradients.

pub mod auto;
mod axes;
pub mod chunked;
pub mod custom;
pub mod grad;
pub mod micro;
pub mod scan;
pub mod vmap;

pub use axes::Axes;

/// Rows of values (one row per step, chunk or example, each with one value per output leaf) as
/// columns (one per output leaf), each in row order.
pub(crate) fn columns<T>(rows: impl IntoIterator<Item = Vec<T>>, width: usize) -> Vec<Vec<T>> {
    let mut columns: Vec<Vec<T>> = (0..width).map(|_| Vec::new()).collect();
    for row in rows {
        for (col, value) in columns.iter_mut().zip(row) {
            col.push(value);
        }
    }
    columns
}
