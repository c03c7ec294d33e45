//! The `{data, path}` file entries two messages carry in an array (a
//! hello's evidence, a job-submit's collateral): one codec, each entry type
//! naming its fields and caps.

use super::cbor::{Decoder, Encoder};
use super::codec::DecodeError;
use super::file_name::MAX_FILE_NAME;

/// A file entry's keys, in deterministic key order.
pub(super) const FIELDS: &[&str] = &["data", "path"];

/// A file entry type: where its array sits and what it may hold.
pub(super) trait FileEntry: Sized {
    /// What errors name: the array (and each entry's map), its `data`, its
    /// `path`.
    const NAMES: [&'static str; 3];
    /// Most entries in the array (refused from the array's head).
    const MAX_FILES: usize;
    /// Most bytes of one entry's `data` (refused from its head).
    const MAX_DATA: usize;

    fn new(data: Vec<u8>, path: String) -> Self;
    fn data(&self) -> &[u8];
    fn path(&self) -> &str;
}

/// An array of `T` entries: at most [`FileEntry::MAX_FILES`], each
/// `data` at most [`FileEntry::MAX_DATA`] bytes (refused from the heads).
pub(super) fn read_files<T: FileEntry>(d: &mut Decoder<'_>) -> Result<Vec<T>, DecodeError> {
    let [what, data_what, path_what] = T::NAMES;
    let n = d.array(what, T::MAX_FILES)?;
    // Grown as entries decode: a short frame declaring many entries costs nothing.
    let mut files = Vec::new();
    for _ in 0..n {
        let mut fm = d.map(what, FIELDS)?;
        d.key(&mut fm, "data")?;
        let data = d.bytes(data_what, T::MAX_DATA)?.to_vec();
        d.key(&mut fm, "path")?;
        let path = d.text(path_what, MAX_FILE_NAME)?.to_owned();
        d.end(fm)?;
        files.push(T::new(data, path));
    }
    Ok(files)
}

/// The encoding [`read_files`] reads.
pub(super) fn encode_files<T: FileEntry>(e: &mut Encoder, files: &[T]) {
    e.array(files.len());
    for f in files {
        e.map(FIELDS);
        e.key("data");
        e.bytes(f.data());
        e.key("path");
        e.text(f.path());
    }
}
