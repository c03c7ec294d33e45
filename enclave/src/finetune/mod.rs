//! The fine-tune job's parts (issue 14), built up piece by piece: today the
//! real model as the evaluation's [`kolm_eval::Scorer`] ([`scorer`]), so
//! the base model can be evaluated with the same code that will gate a
//! tuned one.

pub mod scorer;
