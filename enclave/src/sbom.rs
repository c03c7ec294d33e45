//! SPDX SBOM (placeholder; being written).
