//! (being written) The training loop.

/// (being written)
#[derive(Debug)]
pub struct TrainJob;
/// (being written)
#[derive(Debug)]
pub struct Trained;
/// (being written)
#[derive(Debug)]
pub struct Progress;
/// (being written)
pub fn run() {}
