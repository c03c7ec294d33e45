//! kolm-tee-layouts: the byte layout of every hardware attestation structure
//! kolm reads or writes, written once.
//!
//! The enclave's providers and its simulated TEE write reports and quotes
//! through these tables; the verifier reads them through the same tables. No
//! other crate spells a structure's size or a field's offset
//! (`tests/tests/layouts_once.rs` enforces it for the sizes).
//!
//! Each structure is a module with its size (`SIZE`), one [`Field`] constant
//! per field (offset and length, the name the specification uses), the table
//! of all of them in offset order (`FIELDS`), and the specification table it
//! comes from in its doc comment. A compile-time assertion checks that the
//! fields tile the structure exactly (no gap, no overlap, nothing past
//! `SIZE`): a wrong offset or length does not build.
//!
//! | module | structure | bytes |
//! |---|---|---|
//! | [`snp::report`] | SEV-SNP `ATTESTATION_REPORT` (versions 2, 3, 5) | 1184 |
//! | [`snp::msg_report_rsp`] | SEV-SNP `MSG_REPORT_RSP` (the firmware's reply around a report) | 1216 |
//! | [`tdx::header`] | TDX DCAP quote header (v4 and v5) | 48 |
//! | [`tdx::body_descriptor`] | TDX quote v5 body descriptor | 6 |
//! | [`tdx::td_report10`] | TD quote body / TD report 1.0 (v4; v5 body type 2) | 584 |
//! | [`tdx::td_report15`] | TD report 1.5 (v5 body type 3) | 648 |
//! | [`tdx::td_report15_ex`] | TD report 1.5-Ex (v5 body type 4) | 885 |
//! | [`tdx::qe_report`] | QE report (SGX `REPORT` body) | 384 |
//! | [`tdx::signature_data`], [`tdx::qe_certification_data`] | the fixed heads of the quote's signature data | 134, 450 |
//! | [`tdx::tdreport`] | `TDREPORT_STRUCT` (Azure's HCL report carries it) | 1024 |
//! | [`nitro::document`] | the NSM attestation document's map keys | |
//!
//! Reading and writing never panic and never index: a [`Field`] reads from
//! or writes into a `&[u8; SIZE]` of its own structure (its type says which
//! size, so it fits by construction), or from a slice whose length it checks
//! ([`LayoutError`]).
//!
//! This crate has no dependencies, does no I/O and no allocation
//! (`no_std`), and holds no cryptography.

#![no_std]
#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::arithmetic_side_effects
)]

mod field;
pub mod nitro;
pub mod snp;
pub mod tdx;

pub use field::{Field, FieldInfo, LayoutError, field_at, tiles};
