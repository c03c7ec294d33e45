//! GPU discovery, shared by the private root (`rootfs.rs`) and Landlock
//! (`landlock_rules.rs`), so both decide "this job gets a GPU" by the same
//! rule: the `/dev` they look at holds an entry whose name starts with
//! `nvidia`.

use std::ffi::OsString;
use std::path::Path;

/// The names of the NVIDIA entries in `dev` (`nvidiactl`, `nvidia0`...,
/// `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`, the `nvidia-caps`
/// directory), sorted. Empty when there is none or `dev` cannot be read:
/// then the job gets no GPU.
pub(super) fn nvidia_nodes(dev: &Path) -> Vec<OsString> {
    let Ok(entries) = std::fs::read_dir(dev) else {
        return Vec::new();
    };
    let mut names: Vec<OsString> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .filter(|n| n.as_encoded_bytes().starts_with(b"nvidia"))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_nvidia_entries_are_found_sorted() {
        let dir = tempfile::tempdir().unwrap();
        assert!(nvidia_nodes(&dir.path().join("missing")).is_empty());
        for n in ["null", "zero", "nvme0", "nvidiactl", "nvidia0"] {
            std::fs::write(dir.path().join(n), b"").unwrap();
        }
        std::fs::create_dir(dir.path().join("nvidia-caps")).unwrap();
        assert_eq!(
            nvidia_nodes(dir.path()),
            ["nvidia-caps", "nvidia0", "nvidiactl"].map(OsString::from)
        );
    }
}
