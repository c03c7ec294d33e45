//! Canonical ZIP container: the one byte layout of a kolm sealed artifact
//! ("kolm container profile v1", specified in `docs/container.md`).
//!
//! The writer ([`write_canonical_zip`]) drives the `zip` crate with fixed
//! options, so the same entries always give the same bytes. The reader
//! ([`read_canonical_zip`]) is our own strict parser of exactly that profile:
//! every byte outside entry data is pinned to the value the writer emits, the
//! records must be contiguous from offset 0 to the end of the stream, and
//! entry data is covered by CRC-32 ([`hash_entry`], [`read_entry`]). Any
//! single flipped, inserted, removed or appended byte is therefore an error.
//!
//! The reader walks the archive forwards (local headers, then the central
//! directory, then the end record), so every record's position follows from
//! the previous one: it never scans for signatures and never allocates from a
//! count it has not checked against [`MAX_ENTRIES`] and the stream length.
//! The fixed part of every record is described once, in the header table
//! `FIELDS` (each field's offset in the local file header, the central
//! directory header and the end record, and the one rule it is pinned to);
//! the three record readers split and check their bytes by that table, with
//! the shared [`Reader`].
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::as_conversions,
    clippy::unreachable
)]

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, System, ZipWriter};

use crate::reader::Reader;

/// Most entries a container may hold.
pub const MAX_ENTRIES: usize = 4096;
/// Longest entry name, in UTF-8 bytes.
pub const MAX_NAME_LEN: usize = 512;

/// Largest container, in bytes: everything must fit the 32-bit ZIP fields
/// without zip64 (`0xFFFF_FFFF` itself is the zip64 marker and is never a
/// valid size or offset, and no field can reach it in an archive this size).
const MAX_ARCHIVE_LEN: u64 = 0xFFFF_FFFF;

const SIG_LOCAL: u32 = 0x0403_4b50;
const SIG_CENTRAL: u32 = 0x0201_4b50;
const SIG_EOCD: u32 = 0x0605_4b50;

const LOCAL_LEN: u64 = 30;
const CENTRAL_LEN: u64 = 46;
const EOCD_LEN: u64 = 22;

// The 16-bit fields' values are held as u32, the width the header table
// ([`FIELDS`]) compares in.

/// "Version needed to extract": 1.0, enough for stored files.
const VERSION_NEEDED: u32 = 10;
/// "Version made by": host system 3 (UNIX) in the high byte, 1.0 in the low.
const VERSION_MADE_BY: u32 = 0x030A;
/// General purpose flag bit 11: the name is UTF-8. Set exactly when the name
/// is not pure ASCII (what zip 9.8.2 writes); no other flag bit is ever set.
const FLAG_UTF8: u32 = 0x0800;
const METHOD_STORED: u32 = 0;
/// MS-DOS time 00:00:00.
const DOS_TIME: u32 = 0x0000;
/// MS-DOS date 1980-01-01: (1980 - 1980) << 9 | 1 << 5 | 1.
const DOS_DATE: u32 = 0x0021;
/// UNIX mode 0o100644 (regular file, rw-r--r--) in the high 16 bits.
const EXTERNAL_ATTRS: u32 = 0o100_644 << 16;

/// Everything that can be wrong with a container, or with writing one.
/// Each variant names the rule that failed and where.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// A record does not start with the signature the layout requires here.
    #[error("bad signature at byte {offset}: found {found:#010x}, expected {expected}")]
    BadSignature {
        offset: u64,
        expected: &'static str,
        found: u32,
    },
    /// A header field differs from its one canonical value.
    #[error(
        "{record} field `{field}` at byte {offset}{}: found {found:#x}, expected {expected:#x}",
        entry.as_deref().map(|e| format!(" (entry {e:?})")).unwrap_or_default()
    )]
    FieldNotCanonical {
        record: &'static str,
        /// The entry the record belongs to; `None` for the end record.
        entry: Option<String>,
        field: &'static str,
        offset: u64,
        found: u64,
        expected: u64,
    },
    /// The central directory names an entry differently from its local header.
    #[error(
        "central directory header at byte {offset} names {central:?}, local header names {local:?}"
    )]
    NameMismatch {
        offset: u64,
        local: String,
        central: String,
    },
    /// Bytes after the end of central directory record.
    #[error("{len} trailing byte(s) at byte {offset}, after the end of central directory record")]
    TrailingBytes { offset: u64, len: u64 },
    /// Entries are not in strictly ascending order of their UTF-8 name bytes.
    #[error("entries not sorted by name bytes: {prev:?} comes before {next:?}")]
    Unsorted { prev: String, next: String },
    /// Two entries have the same name.
    #[error("duplicate entry name {name:?}")]
    DuplicateName { name: String },
    /// Two names are equal ignoring ASCII case; they would clobber each other
    /// when extracted on a case-insensitive filesystem. (Names are ASCII, so
    /// this is Unicode case folding and NFC normalisation as well.)
    #[error("entry names {a:?} and {b:?} differ only in ASCII case")]
    CaseCollision { a: String, b: String },
    /// An entry name breaks a name rule (see [`check_entry_name`]).
    #[error("bad entry name {name:?}: {reason}")]
    BadName { name: String, reason: &'static str },
    /// An entry name holds a character outside the portable set
    /// `A-Z a-z 0-9 . _ - /` (see [`check_entry_name`]).
    #[error(
        "bad entry name {name:?}: character {character:?} (U+{:04X}) is outside the portable set A-Z a-z 0-9 . _ - /",
        u32::from(*character)
    )]
    NonPortableCharacter { name: String, character: char },
    /// One name is a file where another name needs a directory (ignoring
    /// ASCII case): they cannot both be unpacked.
    #[error("entry {file:?} is a file, but {other:?} needs a directory of that name")]
    FileDirectoryConflict { file: String, other: String },
    /// A header declares a name longer than [`MAX_NAME_LEN`].
    #[error("entry name of {len} bytes at byte {offset} exceeds the cap of {max}")]
    NameTooLong { offset: u64, len: u64, max: usize },
    /// More than [`MAX_ENTRIES`] entries (the reader stops counting at the
    /// first one over the cap).
    #[error("{count} entries exceed the cap of {max}")]
    TooManyEntries { count: u64, max: usize },
    /// The stream ends inside a record.
    #[error("truncated: {what} at byte {offset} runs past the end of the archive")]
    Truncated { what: &'static str, offset: u64 },
    /// An entry's declared data runs past the end of the archive.
    #[error(
        "entry {entry:?} declares {size} data bytes at byte {offset}, past the end of the {archive_len}-byte archive"
    )]
    DataOutOfBounds {
        entry: String,
        offset: u64,
        size: u64,
        archive_len: u64,
    },
    /// An entry's data does not match its CRC-32.
    #[error("entry {entry:?}: CRC-32 of the data is {found:#010x}, header says {expected:#010x}")]
    CrcMismatch {
        entry: String,
        expected: u32,
        found: u32,
    },
    /// An entry's data has a different length than declared (a source file
    /// changed while being written, or the archive shrank while being read).
    #[error("entry {entry:?}: expected {expected} data bytes, found {found}")]
    SizeMismatch {
        entry: String,
        expected: u64,
        found: u64,
    },
    /// An entry is larger than the caller's cap, or than the profile allows.
    #[error("entry {entry:?} is {size} bytes, over the cap of {cap}")]
    EntryTooLarge { entry: String, size: u64, cap: u64 },
    /// The whole archive would be, or is, 4 GiB or larger.
    #[error("archive of {len} bytes exceeds the cap of {max} bytes (no zip64)")]
    ArchiveTooLarge { len: u64, max: u64 },
    /// The destination path has no file name.
    #[error("destination {path:?} has no file name")]
    BadDestination { path: PathBuf },
    /// An [`EntryData::File`] source is not a regular file.
    #[error("entry {entry:?}: source {path:?} is not a regular file")]
    NotAFile { entry: String, path: PathBuf },
    /// An [`EntryData::File`] source could not be read.
    // The OS error is in the message and not a `source` (a chain printer,
    // anyhow's `{:#}`, would print it again; the sealing path shows only
    // the message).
    #[error("entry {entry:?}: reading source {path:?}: {error}")]
    Source {
        entry: String,
        path: PathBuf,
        error: io::Error,
    },
    // The three below carry their cause in the message and not as a
    // `source` (their `From`s are written out below instead of
    // `#[from]`, which would make it one): callers print the message alone
    // (`to_string()`, or inside their own `{0}`), and a chain printer would
    // print a source a second time.
    /// The `zip` crate refused to write.
    #[error("zip writer: {0}")]
    Zip(zip::result::ZipError),
    /// The bytes the `zip` crate wrote are not a canonical container (a
    /// changed `zip` crate would show up here, never in a sealed artifact).
    #[error("written archive is not canonical: {0}")]
    WriterOutputRejected(Box<ContainerError>),
    /// The written archive reads back with different contents than written.
    #[error("written archive reads back wrong: {field} of entry {entry:?}")]
    WriterMismatch { entry: String, field: &'static str },
    /// Any other I/O error.
    #[error("I/O error: {0}")]
    Io(io::Error),
}

impl From<zip::result::ZipError> for ContainerError {
    fn from(e: zip::result::ZipError) -> Self {
        ContainerError::Zip(e)
    }
}

impl From<io::Error> for ContainerError {
    fn from(e: io::Error) -> Self {
        ContainerError::Io(e)
    }
}

type Result<T, E = ContainerError> = std::result::Result<T, E>;

/// Longest path component, in bytes (the limit of ext4, NTFS, APFS).
pub const MAX_COMPONENT_LEN: usize = 255;

/// Checks one entry name against the profile's name rules, so that an
/// artifact unpacks to the same files on every operating system:
///
/// - non-empty, at most [`MAX_NAME_LEN`] bytes, each `/`-separated
///   component at most [`MAX_COMPONENT_LEN`] bytes;
/// - not absolute, no drive letter, no trailing `/`, no empty, `.` or `..`
///   component;
/// - no component ending in `.` or ` ` (Windows strips them), no Windows
///   reserved device name (`CON`, `PRN`, `AUX`, `NUL`, `COM0`-`COM9`,
///   `LPT0`-`LPT9`, any case, with or without an extension: `aux.txt`);
/// - only the portable characters `A-Z a-z 0-9 . _ - /` (so no control
///   character, backslash, `:`, space, bidirectional control or any other
///   non-ASCII character: with ASCII only, Unicode NFC normalisation is the
///   identity and Unicode case folding is ASCII case folding, which
///   [`check_name_collisions`] applies across names).
///
/// (`&str` is valid UTF-8 by construction; the reader rejects non-UTF-8
/// names before calling this.) Rules across names (order, duplicates, case
/// collisions, a file where another name needs a directory) are checked on
/// the whole set.
pub fn check_entry_name(name: &str) -> Result<()> {
    match name_violation(name) {
        None => Ok(()),
        Some(NameViolation::Rule(reason)) => Err(ContainerError::BadName {
            name: name.to_owned(),
            reason,
        }),
        Some(NameViolation::Character(character)) => Err(ContainerError::NonPortableCharacter {
            name: name.to_owned(),
            character,
        }),
    }
}

enum NameViolation {
    Rule(&'static str),
    Character(char),
}

/// Bidirectional formatting characters: embeddings and overrides
/// (U+202A-U+202E), isolates (U+2066-U+2069), marks (U+200E, U+200F,
/// U+061C). A name holding one displays differently from its bytes.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// The characters a name may hold.
fn is_portable(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')
}

/// Windows reserves these device names in every directory, whatever the
/// case and whatever follows a first `.` (`aux.txt`, `Con.tar.gz`).
fn is_windows_reserved(component: &str) -> bool {
    let stem = component.split('.').next().unwrap_or(component);
    let upper = stem.to_ascii_uppercase();
    match upper.as_bytes() {
        b"CON" | b"PRN" | b"AUX" | b"NUL" => true,
        [b'C', b'O', b'M', d] | [b'L', b'P', b'T', d] => d.is_ascii_digit(),
        _ => false,
    }
}

fn name_violation(name: &str) -> Option<NameViolation> {
    use NameViolation::{Character, Rule};
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return Some(Rule("empty"));
    }
    if bytes.len() > MAX_NAME_LEN {
        return Some(Rule("longer than 512 bytes"));
    }
    if name.chars().any(char::is_control) {
        return Some(Rule("contains a NUL or control character"));
    }
    if name.chars().any(is_bidi_control) {
        return Some(Rule("contains a bidirectional control character"));
    }
    if name.contains('\\') {
        return Some(Rule("contains a backslash"));
    }
    if name.starts_with('/') {
        return Some(Rule("absolute path (leading '/')"));
    }
    if let (Some(first), Some(b':')) = (bytes.first(), bytes.get(1))
        && first.is_ascii_alphabetic()
    {
        return Some(Rule("starts with a drive letter"));
    }
    if name.contains(':') {
        return Some(Rule(
            "contains ':' (a drive or NTFS alternate data stream separator)",
        ));
    }
    if name.ends_with('/') {
        return Some(Rule("trailing '/' (directory entry)"));
    }
    for component in name.split('/') {
        match component {
            "" => return Some(Rule("empty path component ('//')")),
            "." => return Some(Rule("'.' path component")),
            ".." => return Some(Rule("'..' path component")),
            _ => {}
        }
        if component.len() > MAX_COMPONENT_LEN {
            return Some(Rule("path component longer than 255 bytes"));
        }
        if component.ends_with('.') || component.ends_with(' ') {
            return Some(Rule(
                "path component ends with '.' or ' ' (Windows drops it)",
            ));
        }
        if is_windows_reserved(component) {
            return Some(Rule(
                "Windows reserved device name (CON, PRN, AUX, NUL, COM0-9, LPT0-9, with any extension)",
            ));
        }
    }
    name.chars().find(|&c| !is_portable(c)).map(Character)
}

/// Rules across the (already individually valid) names, in archive order:
/// strictly ascending by bytes, so no duplicates, then
/// [`check_name_collisions`].
fn check_name_set<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Result<()> {
    let mut prev: Option<&str> = None;
    for name in names.clone() {
        if let Some(prev) = prev {
            match prev.as_bytes().cmp(name.as_bytes()) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    return Err(ContainerError::DuplicateName {
                        name: name.to_owned(),
                    });
                }
                std::cmp::Ordering::Greater => {
                    return Err(ContainerError::Unsorted {
                        prev: prev.to_owned(),
                        next: name.to_owned(),
                    });
                }
            }
        }
        prev = Some(name);
    }
    check_name_collisions(names)
}

/// Rules across names that a set of files must meet to unpack the same
/// everywhere, in any order: no two names equal ignoring ASCII case (for
/// names of [`check_entry_name`], which are ASCII, this is Unicode case
/// folding and NFC normalisation too), and no name that is, ignoring case,
/// a directory another name needs (`a` and `a/b`, `A` and `a/b`).
/// Exact duplicates count as a case collision here.
pub fn check_name_collisions<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let mut files: HashMap<String, &str> = HashMap::new();
    let mut dirs: HashMap<String, &str> = HashMap::new();
    for name in names {
        let folded = name.to_ascii_lowercase();
        if let Some(other) = files.insert(folded.clone(), name) {
            return Err(ContainerError::CaseCollision {
                a: other.to_owned(),
                b: name.to_owned(),
            });
        }
        if let Some(other) = dirs.get(&folded) {
            return Err(ContainerError::FileDirectoryConflict {
                file: name.to_owned(),
                other: (*other).to_owned(),
            });
        }
        for (i, _) in folded.match_indices('/') {
            let dir = folded.get(..i).unwrap_or_default();
            if let Some(other) = files.get(dir) {
                return Err(ContainerError::FileDirectoryConflict {
                    file: (*other).to_owned(),
                    other: name.to_owned(),
                });
            }
            dirs.entry(dir.to_owned()).or_insert(name);
        }
    }
    Ok(())
}

/// The general purpose flags the profile requires for `name`.
fn canonical_flags(name: &str) -> u32 {
    if name.is_ascii() { 0 } else { FLAG_UTF8 }
}

/// Where an entry's bytes come from when writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryData {
    /// Bytes held in memory.
    Bytes(Vec<u8>),
    /// A regular file, streamed when written.
    File(PathBuf),
}

/// Writes `entries` as a canonical container at `dest`.
///
/// Writes atomically: a temp file `"<dest>.tmp-<pid>-<n>"` in dest's
/// directory (created with `create_new`), fsync, rename over dest, fsync the
/// directory. On any error before the rename the temp file is removed and
/// dest is untouched; an error from the final directory fsync is reported
/// although dest has already been replaced. Entries are sorted here (callers
/// pass any order); bad or duplicate names, too many entries and oversized
/// sources are errors before anything is written. The written file is read
/// back with [`read_canonical_zip`] and compared before it is renamed.
pub fn write_canonical_zip(dest: &Path, entries: Vec<(String, EntryData)>) -> Result<()> {
    let plan = plan_entries(entries)?;
    let (tmp_path, file) = create_temp(dest)?;
    let mut guard = TempGuard(Some(tmp_path));
    write_body(file, &plan)?;
    if let Some(tmp_path) = guard.0.as_deref() {
        fs::rename(tmp_path, dest)?;
    }
    guard.0 = None;
    sync_dir(&parent_dir(dest))?;
    Ok(())
}

struct Planned {
    name: String,
    data: EntryData,
    size: u64,
}

struct Plan {
    entries: Vec<Planned>,
    total_len: u64,
}

/// Validates names, sorts, sizes every source and checks the caps, all
/// before any byte is written.
fn plan_entries(mut entries: Vec<(String, EntryData)>) -> Result<Plan> {
    if entries.len() > MAX_ENTRIES {
        return Err(ContainerError::TooManyEntries {
            count: u64::try_from(entries.len()).unwrap_or(u64::MAX),
            max: MAX_ENTRIES,
        });
    }
    for (name, _) in &entries {
        check_entry_name(name)?;
    }
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    check_name_set(entries.iter().map(|(name, _)| name.as_str()))?;

    let too_large = |len| ContainerError::ArchiveTooLarge {
        len,
        max: MAX_ARCHIVE_LEN,
    };
    let mut total_len = EOCD_LEN;
    let mut planned = Vec::with_capacity(entries.len());
    for (name, data) in entries {
        let size = match &data {
            EntryData::Bytes(bytes) => u64::try_from(bytes.len()).unwrap_or(u64::MAX),
            EntryData::File(path) => {
                let meta = fs::metadata(path).map_err(|source| ContainerError::Source {
                    entry: name.clone(),
                    path: path.clone(),
                    error: source,
                })?;
                if !meta.is_file() {
                    return Err(ContainerError::NotAFile {
                        entry: name.clone(),
                        path: path.clone(),
                    });
                }
                meta.len()
            }
        };
        if size >= MAX_ARCHIVE_LEN {
            return Err(ContainerError::EntryTooLarge {
                entry: name,
                size,
                cap: MAX_ARCHIVE_LEN.saturating_sub(1),
            });
        }
        // Local header + name + data, central header + name.
        let name_len = u64::try_from(name.len()).unwrap_or(u64::MAX);
        let entry_len = [LOCAL_LEN, CENTRAL_LEN, name_len, name_len, size]
            .into_iter()
            .try_fold(0u64, u64::checked_add)
            .ok_or_else(|| too_large(u64::MAX))?;
        total_len = total_len
            .checked_add(entry_len)
            .ok_or_else(|| too_large(u64::MAX))?;
        planned.push(Planned { name, data, size });
    }
    if total_len > MAX_ARCHIVE_LEN {
        return Err(too_large(total_len));
    }
    Ok(Plan {
        entries: planned,
        total_len,
    })
}

/// The options that make the `zip` crate write profile v1. `system` is set
/// explicitly so the bytes do not depend on the host OS.
fn canonical_options() -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(CompressionMethod::Stored)
        .last_modified_time(DateTime::default())
        .unix_permissions(0o644)
        .system(System::Unix)
        .large_file(false)
}

fn write_body(file: File, plan: &Plan) -> Result<()> {
    let options = canonical_options();
    let mut zip = ZipWriter::new(BufWriter::with_capacity(1 << 16, file));
    let mut crcs = Vec::with_capacity(plan.entries.len());
    for entry in &plan.entries {
        zip.start_file(entry.name.as_str(), options)?;
        let mut crc = crc32fast::Hasher::new();
        match &entry.data {
            EntryData::Bytes(bytes) => {
                crc.update(bytes);
                zip.write_all(bytes)?;
            }
            EntryData::File(path) => copy_source(entry, path, &mut zip, &mut crc)?,
        }
        crcs.push(crc.finalize());
    }
    let file = zip
        .finish()?
        .into_inner()
        .map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;

    let container = read_canonical_zip(&mut BufReader::new(&file))
        .map_err(|e| ContainerError::WriterOutputRejected(Box::new(e)))?;
    if container.total_len != plan.total_len || container.entries.len() != plan.entries.len() {
        return Err(ContainerError::WriterMismatch {
            entry: String::new(),
            field: "archive length",
        });
    }
    for ((got, want), crc) in container.entries.iter().zip(&plan.entries).zip(&crcs) {
        let field = if got.name != want.name {
            "name"
        } else if got.size != want.size {
            "size"
        } else if got.crc32 != *crc {
            "crc-32"
        } else {
            continue;
        };
        return Err(ContainerError::WriterMismatch {
            entry: want.name.clone(),
            field,
        });
    }
    Ok(())
}

/// Streams a source file into the archive, refusing a file whose length
/// changed since it was sized.
fn copy_source<W: Write>(
    entry: &Planned,
    path: &Path,
    out: &mut W,
    crc: &mut crc32fast::Hasher,
) -> Result<()> {
    let source_err = |error| ContainerError::Source {
        entry: entry.name.clone(),
        path: path.to_path_buf(),
        error,
    };
    let file = File::open(path).map_err(source_err)?;
    // Read one byte past the declared size to notice a file that grew.
    let mut limited = file.take(entry.size.saturating_add(1));
    let mut buf = vec![0u8; 1 << 16];
    let mut copied: u64 = 0;
    loop {
        let n = match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(source_err(e)),
        };
        let chunk = buf.get(..n).unwrap_or_default();
        copied = copied.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
        if copied > entry.size {
            break;
        }
        crc.update(chunk);
        out.write_all(chunk)?;
    }
    if copied != entry.size {
        return Err(ContainerError::SizeMismatch {
            entry: entry.name.clone(),
            expected: entry.size,
            found: copied,
        });
    }
    Ok(())
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn parent_dir(dest: &Path) -> PathBuf {
    match dest.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Creates `"<dest>.tmp-<pid>-<n>"` next to dest, never reusing a path.
fn create_temp(dest: &Path) -> Result<(PathBuf, File)> {
    let file_name = dest
        .file_name()
        .ok_or_else(|| ContainerError::BadDestination {
            path: dest.to_path_buf(),
        })?;
    let dir = parent_dir(dest);
    let pid = std::process::id();
    for _ in 0..64 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tmp_name = file_name.to_os_string();
        tmp_name.push(format!(".tmp-{pid}-{n}"));
        let path = dir.join(tmp_name);
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => return Ok((path, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free temporary file name next to the destination",
    )
    .into())
}

/// Removes the temp file on drop unless it has been renamed into place.
struct TempGuard(Option<PathBuf>);

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            // Best effort: the original error is what the caller needs.
            let _ = fs::remove_file(path);
        }
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// One entry of a parsed container. Offsets are absolute from the start of
/// the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryInfo {
    /// The entry name, checked against the name rules.
    pub name: String,
    /// Offset of the local file header.
    pub header_offset: u64,
    /// Offset of the first data byte.
    pub data_offset: u64,
    /// Data length (stored, so compressed and uncompressed sizes are equal).
    pub size: u64,
    /// CRC-32 declared in both headers; checked against the data by
    /// [`hash_entry`] and [`read_entry`].
    pub crc32: u32,
}

/// A container whose whole structure has been checked.
#[derive(Debug)]
pub struct Container {
    /// Entries in archive order, which is ascending name-byte order.
    pub entries: Vec<EntryInfo>,
    /// Length of the archive in bytes.
    pub total_len: u64,
}

impl Container {
    /// The entry named exactly `name`.
    pub fn entry(&self, name: &str) -> Option<&EntryInfo> {
        self.entries
            .binary_search_by(|e| e.name.as_bytes().cmp(name.as_bytes()))
            .ok()
            .and_then(|i| self.entries.get(i))
    }
}

/// The three fixed-size records of the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// Local file header (30 bytes), followed by the name and the data.
    Local,
    /// Central directory header (46 bytes), followed by the name.
    Central,
    /// End of central directory record (22 bytes), last in the stream.
    End,
}

impl Record {
    fn what(self) -> &'static str {
        match self {
            Record::Local => "local file header",
            Record::Central => "central directory header",
            Record::End => "end of central directory record",
        }
    }

    fn signature(self) -> u32 {
        match self {
            Record::Local => SIG_LOCAL,
            Record::Central => SIG_CENTRAL,
            Record::End => SIG_EOCD,
        }
    }

    fn len(self) -> u64 {
        match self {
            Record::Local => LOCAL_LEN,
            Record::Central => CENTRAL_LEN,
            Record::End => EOCD_LEN,
        }
    }
}

/// The longest fixed record (the central directory header).
const MAX_RECORD_LEN: usize = 46;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    U16,
    U32,
}

/// A value every entry's two headers carry: the local header declares it,
/// the central directory header must repeat it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Declared {
    /// The length of the name that follows the fixed header.
    NameLen,
    /// The CRC-32 of the entry's data.
    Crc32,
    /// The data length: the local header's compressed size. Stored entries
    /// only, so its uncompressed size and both central sizes repeat it.
    DataSize,
}

/// What the canonical profile requires of one header field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// The record's signature (a mismatch is [`ContainerError::BadSignature`]).
    Signature,
    /// Exactly this value.
    Is(u32),
    /// [`FLAG_UTF8`] when the entry name is not pure ASCII, else 0.
    Utf8Flag,
    /// Declared by the local header, compared with it in the central
    /// directory.
    Entry(Declared),
    /// The offset of the entry's local file header.
    LocalHeaderOffset,
    /// The number of entries in the archive, itself at most [`MAX_ENTRIES`].
    EntryCount,
    /// Bytes from the first central directory header to the end record.
    CentralSize,
    /// Offset of the first central directory header.
    CentralOffset,
}

/// One field of the fixed records: its name, width, offset in each record
/// that has it, and the one rule it must satisfy wherever it appears.
#[derive(Debug)]
struct Field {
    name: &'static str,
    width: Width,
    local: Option<u8>,
    central: Option<u8>,
    end: Option<u8>,
    rule: Rule,
}

impl Field {
    fn offset(&self, record: Record) -> Option<u8> {
        match record {
            Record::Local => self.local,
            Record::Central => self.central,
            Record::End => self.end,
        }
    }
}

const fn field(
    name: &'static str,
    width: Width,
    (local, central, end): (Option<u8>, Option<u8>, Option<u8>),
    rule: Rule,
) -> Field {
    Field {
        name,
        width,
        local,
        central,
        end,
        rule,
    }
}

/// "Not in this record", in the table below.
const NO: Option<u8> = None;

/// The ZIP header table: every fixed field of the three records, with its
/// offset in (local file header, central directory header, end record) and
/// the rule the profile pins it to. In each record the fields appear in this
/// order, back to back (checked by a unit test), and the reader checks them in
/// this order. `docs/container.md` shows the same table per record.
#[rustfmt::skip]
static FIELDS: [Field; 24] = {
    use Declared::*;
    use Rule::*;
    use Width::*;
    [
        // name                                      width  (local     central   end)      rule
        field("signature",                           U32, (Some(0),  Some(0),  Some(0)),  Signature),
        field("version made by",                     U16, (NO,       Some(4),  NO),       Is(VERSION_MADE_BY)),
        field("version needed to extract",           U16, (Some(4),  Some(6),  NO),       Is(VERSION_NEEDED)),
        field("general purpose flags",               U16, (Some(6),  Some(8),  NO),       Utf8Flag),
        field("compression method",                  U16, (Some(8),  Some(10), NO),       Is(METHOD_STORED)),
        field("last modified time",                  U16, (Some(10), Some(12), NO),       Is(DOS_TIME)),
        field("last modified date",                  U16, (Some(12), Some(14), NO),       Is(DOS_DATE)),
        field("crc-32",                              U32, (Some(14), Some(16), NO),       Entry(Crc32)),
        field("compressed size",                     U32, (Some(18), Some(20), NO),       Entry(DataSize)),
        field("uncompressed size",                   U32, (Some(22), Some(24), NO),       Entry(DataSize)),
        field("file name length",                    U16, (Some(26), Some(28), NO),       Entry(NameLen)),
        field("extra field length",                  U16, (Some(28), Some(30), NO),       Is(0)),
        field("file comment length",                 U16, (NO,       Some(32), NO),       Is(0)),
        field("disk number start",                   U16, (NO,       Some(34), NO),       Is(0)),
        field("internal file attributes",            U16, (NO,       Some(36), NO),       Is(0)),
        field("external file attributes",            U32, (NO,       Some(38), NO),       Is(EXTERNAL_ATTRS)),
        field("local header offset",                 U32, (NO,       Some(42), NO),       LocalHeaderOffset),
        field("number of this disk",                 U16, (NO,       NO,       Some(4)),  Is(0)),
        field("disk where central directory starts", U16, (NO,       NO,       Some(6)),  Is(0)),
        field("entries on this disk",                U16, (NO,       NO,       Some(8)),  EntryCount),
        field("total entries",                       U16, (NO,       NO,       Some(10)), EntryCount),
        field("central directory size",              U32, (NO,       NO,       Some(12)), CentralSize),
        field("central directory offset",            U32, (NO,       NO,       Some(16)), CentralOffset),
        field("comment length",                      U16, (NO,       NO,       Some(20)), Is(0)),
    ]
};

/// What the rules of one record are checked against.
enum Expect<'a> {
    /// An entry's headers: the local header's declared values (for the local
    /// header itself these are its own, so its `Entry` rules relate its
    /// fields to each other).
    Entry(&'a EntryInfo),
    /// The end record: what the walk found before it.
    End {
        count: u64,
        central_offset: u64,
        central_size: u64,
    },
}

impl Rule {
    /// The value this rule requires, or `None` where the rule does not apply
    /// to the record being checked (a table error, caught by a unit test).
    fn expected(self, record: Record, expect: &Expect<'_>) -> Option<u64> {
        match (self, expect) {
            (Rule::Signature, _) => Some(u64::from(record.signature())),
            (Rule::Is(value), _) => Some(u64::from(value)),
            (Rule::Utf8Flag, Expect::Entry(e)) => Some(u64::from(canonical_flags(&e.name))),
            (Rule::Entry(Declared::NameLen), Expect::Entry(e)) => {
                Some(u64::try_from(e.name.len()).unwrap_or(u64::MAX))
            }
            (Rule::Entry(Declared::Crc32), Expect::Entry(e)) => Some(u64::from(e.crc32)),
            (Rule::Entry(Declared::DataSize), Expect::Entry(e)) => Some(e.size),
            (Rule::LocalHeaderOffset, Expect::Entry(e)) => Some(e.header_offset),
            (Rule::EntryCount, Expect::End { count, .. }) => Some(*count),
            (Rule::CentralSize, Expect::End { central_size, .. }) => Some(*central_size),
            (Rule::CentralOffset, Expect::End { central_offset, .. }) => Some(*central_offset),
            _ => None,
        }
    }
}

/// One fixed record, split into its fields by the table (not yet checked).
struct Header {
    record: Record,
    /// Offset of the record in the stream.
    base: u64,
    values: Vec<(&'static Field, u32)>,
}

impl Header {
    /// Reads the fixed part of `record` at `base`, field by field as the
    /// table lays it out.
    fn read<R: Read + Seek>(src: &mut Source<'_, R>, record: Record, base: u64) -> Result<Header> {
        let what = record.what();
        let bad = || malformed(what, base);
        let mut buf = [0u8; MAX_RECORD_LEN];
        let len = usize::try_from(record.len()).map_err(|_| bad())?;
        let buf = buf.get_mut(..len).ok_or_else(bad)?;
        src.read_at(base, buf, what)?;
        let mut r = Reader::with_base(buf, usize::try_from(base).unwrap_or(usize::MAX));
        let mut values = Vec::with_capacity(FIELDS.len());
        for field in &FIELDS {
            let Some(at) = field.offset(record) else {
                continue;
            };
            if r.position() != usize::from(at) {
                return Err(bad());
            }
            let value = match field.width {
                Width::U16 => r.u16_le(field.name).map(u32::from),
                Width::U32 => r.u32_le(field.name),
            };
            values.push((field, value.map_err(|_| bad())?));
        }
        r.finish(what).map_err(|_| bad())?;
        Ok(Header {
            record,
            base,
            values,
        })
    }

    /// The value of the first field with `rule`.
    fn value(&self, rule: Rule) -> Result<u32> {
        self.values
            .iter()
            .find(|(f, _)| f.rule == rule)
            .map(|&(_, v)| v)
            .ok_or_else(|| malformed(self.record.what(), self.base))
    }

    /// The record must start with its signature.
    fn check_signature(&self) -> Result<()> {
        let found = self.value(Rule::Signature)?;
        if found != self.record.signature() {
            return Err(ContainerError::BadSignature {
                offset: self.base,
                expected: self.record.what(),
                found,
            });
        }
        Ok(())
    }

    /// Checks every field with a rule `selected` accepts, in table order.
    fn check(&self, expect: &Expect<'_>, selected: impl Fn(Rule) -> bool) -> Result<()> {
        for &(field, found) in &self.values {
            if field.rule == Rule::Signature || !selected(field.rule) {
                continue;
            }
            let expected = field
                .rule
                .expected(self.record, expect)
                .ok_or_else(|| malformed(self.record.what(), self.base))?;
            if u64::from(found) != expected {
                let at = field.offset(self.record).map_or(0, u64::from);
                return Err(ContainerError::FieldNotCanonical {
                    record: self.record.what(),
                    entry: match expect {
                        Expect::Entry(e) => Some(e.name.clone()),
                        Expect::End { .. } => None,
                    },
                    field: field.name,
                    offset: self.base.saturating_add(at),
                    found: u64::from(found),
                    expected,
                });
            }
        }
        Ok(())
    }
}

/// The stream being parsed, with its length.
struct Source<'r, R> {
    r: &'r mut R,
    len: u64,
}

impl<R: Read + Seek> Source<'_, R> {
    fn read_at(&mut self, offset: u64, buf: &mut [u8], what: &'static str) -> Result<()> {
        let truncated = ContainerError::Truncated { what, offset };
        let end = u64::try_from(buf.len())
            .ok()
            .and_then(|n| offset.checked_add(n));
        match end {
            Some(end) if end <= self.len => {}
            _ => return Err(truncated),
        }
        self.r.seek(SeekFrom::Start(offset))?;
        self.r.read_exact(buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                truncated
            } else {
                ContainerError::Io(e)
            }
        })
    }

    fn read_u32_at(&mut self, offset: u64, what: &'static str) -> Result<u32> {
        let mut buf = [0u8; 4];
        self.read_at(offset, &mut buf, what)?;
        Reader::new(&buf)
            .u32_le(what)
            .map_err(|_| malformed(what, offset))
    }

    fn read_name(&mut self, offset: u64, len: u32, what: &'static str) -> Result<Vec<u8>> {
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > MAX_NAME_LEN {
            return Err(ContainerError::NameTooLong {
                offset,
                len: u64::try_from(len).unwrap_or(u64::MAX),
                max: MAX_NAME_LEN,
            });
        }
        let mut name = vec![0u8; len];
        self.read_at(offset, &mut name, what)?;
        Ok(name)
    }
}

fn malformed(what: &'static str, offset: u64) -> ContainerError {
    // Only reachable if the field table contradicts itself (the unit tests
    // check that it does not).
    ContainerError::Truncated { what, offset }
}

fn decode_name(bytes: Vec<u8>) -> Result<String> {
    let name = String::from_utf8(bytes).map_err(|e| ContainerError::BadName {
        name: String::from_utf8_lossy(e.as_bytes()).into_owned(),
        reason: "not valid UTF-8",
    })?;
    check_entry_name(&name)?;
    Ok(name)
}

/// Parses and checks the whole structure (every byte outside entry data),
/// without reading entry data. The container is the whole stream, from
/// offset 0 to its end, whatever the stream's current position.
pub fn read_canonical_zip<R: Read + Seek>(r: &mut R) -> Result<Container> {
    let len = r.seek(SeekFrom::End(0))?;
    if len > MAX_ARCHIVE_LEN {
        return Err(ContainerError::ArchiveTooLarge {
            len,
            max: MAX_ARCHIVE_LEN,
        });
    }
    let mut src = Source { r, len };

    // Local headers, each followed by its name and data, from offset 0.
    let mut entries: Vec<EntryInfo> = Vec::new();
    let mut pos: u64 = 0;
    loop {
        let sig = src.read_u32_at(pos, "record signature")?;
        match sig {
            SIG_LOCAL => {
                if entries.len() >= MAX_ENTRIES {
                    return Err(ContainerError::TooManyEntries {
                        count: u64::try_from(entries.len())
                            .unwrap_or(u64::MAX)
                            .saturating_add(1),
                        max: MAX_ENTRIES,
                    });
                }
                let entry = parse_local(&mut src, pos)?;
                pos = entry
                    .data_offset
                    .checked_add(entry.size)
                    .ok_or_else(|| malformed("entry data", entry.data_offset))?;
                entries.push(entry);
            }
            SIG_CENTRAL | SIG_EOCD => break,
            found => {
                return Err(ContainerError::BadSignature {
                    offset: pos,
                    expected: "local file header, central directory header or end of central directory record",
                    found,
                });
            }
        }
    }

    // The central directory: one header per local header, in the same order.
    let cd_start = pos;
    for entry in &entries {
        pos = parse_central(&mut src, pos, entry)?;
    }
    let cd_size = pos.saturating_sub(cd_start);

    // The end of central directory record, then nothing.
    let eocd_end = parse_eocd(&mut src, pos, entries.len(), cd_start, cd_size)?;
    if eocd_end != len {
        return Err(ContainerError::TrailingBytes {
            offset: eocd_end,
            len: len.saturating_sub(eocd_end),
        });
    }

    check_name_set(entries.iter().map(|e| e.name.as_str()))?;
    Ok(Container {
        entries,
        total_len: len,
    })
}

fn parse_local<R: Read + Seek>(src: &mut Source<'_, R>, base: u64) -> Result<EntryInfo> {
    let header = Header::read(src, Record::Local, base)?;
    header.check_signature()?;
    let bad = || malformed(Record::Local.what(), base);
    let name_len = header.value(Rule::Entry(Declared::NameLen))?;
    let name_offset = base.checked_add(LOCAL_LEN).ok_or_else(bad)?;
    let name = decode_name(src.read_name(name_offset, name_len, "local file header name")?)?;
    let data_offset = name_offset
        .checked_add(u64::from(name_len))
        .ok_or_else(bad)?;
    // The local header declares the entry; its own fields are then checked
    // against the table like the central directory's are.
    let entry = EntryInfo {
        name,
        header_offset: base,
        data_offset,
        size: u64::from(header.value(Rule::Entry(Declared::DataSize))?),
        crc32: header.value(Rule::Entry(Declared::Crc32))?,
    };
    header.check(&Expect::Entry(&entry), |_| true)?;

    let in_bounds = data_offset
        .checked_add(entry.size)
        .is_some_and(|end| end <= src.len);
    if !in_bounds {
        return Err(ContainerError::DataOutOfBounds {
            entry: entry.name,
            offset: data_offset,
            size: entry.size,
            archive_len: src.len,
        });
    }
    Ok(entry)
}

/// Parses the central directory header at `base` for `entry`; returns the
/// offset just past it.
fn parse_central<R: Read + Seek>(
    src: &mut Source<'_, R>,
    base: u64,
    entry: &EntryInfo,
) -> Result<u64> {
    let header = Header::read(src, Record::Central, base)?;
    header.check_signature()?;
    let bad = || malformed(Record::Central.what(), base);
    let expect = Expect::Entry(entry);
    // The name length first, so the name is read only at the local length.
    let is_name_len = |rule| rule == Rule::Entry(Declared::NameLen);
    header.check(&expect, is_name_len)?;
    let name_len = header.value(Rule::Entry(Declared::NameLen))?;
    let name_offset = base.checked_add(CENTRAL_LEN).ok_or_else(bad)?;
    let name = src.read_name(name_offset, name_len, "central directory header name")?;
    if name != entry.name.as_bytes() {
        return Err(ContainerError::NameMismatch {
            offset: name_offset,
            local: entry.name.clone(),
            central: String::from_utf8_lossy(&name).into_owned(),
        });
    }
    header.check(&expect, |rule| !is_name_len(rule))?;
    name_offset.checked_add(u64::from(name_len)).ok_or_else(bad)
}

/// Parses the end of central directory record at `base`; returns the offset
/// just past it.
fn parse_eocd<R: Read + Seek>(
    src: &mut Source<'_, R>,
    base: u64,
    count: usize,
    central_offset: u64,
    central_size: u64,
) -> Result<u64> {
    let header = Header::read(src, Record::End, base)?;
    header.check_signature()?;
    // A declared count over the cap is named as such, before it is compared.
    for &(field, declared) in &header.values {
        if field.rule == Rule::EntryCount
            && usize::try_from(declared).map_or(true, |d| d > MAX_ENTRIES)
        {
            return Err(ContainerError::TooManyEntries {
                count: u64::from(declared),
                max: MAX_ENTRIES,
            });
        }
    }
    let expect = Expect::End {
        count: u64::try_from(count).unwrap_or(u64::MAX),
        central_offset,
        central_size,
    };
    header.check(&expect, |_| true)?;
    base.checked_add(EOCD_LEN)
        .ok_or_else(|| malformed(Record::End.what(), base))
}

/// Reads an entry's data in chunks, feeding `sink`; checks length and CRC-32.
fn stream_entry<R: Read + Seek>(
    r: &mut R,
    e: &EntryInfo,
    mut sink: impl FnMut(&[u8]),
) -> Result<()> {
    r.seek(SeekFrom::Start(e.data_offset))?;
    let mut limited = r.take(e.size);
    let mut buf = vec![0u8; 1 << 16];
    let mut crc = crc32fast::Hasher::new();
    let mut read: u64 = 0;
    loop {
        let n = match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err.into()),
        };
        let chunk = buf.get(..n).unwrap_or_default();
        crc.update(chunk);
        sink(chunk);
        read = read.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
    }
    if read != e.size {
        return Err(ContainerError::SizeMismatch {
            entry: e.name.clone(),
            expected: e.size,
            found: read,
        });
    }
    let found = crc.finalize();
    if found != e.crc32 {
        return Err(ContainerError::CrcMismatch {
            entry: e.name.clone(),
            expected: e.crc32,
            found,
        });
    }
    Ok(())
}

/// Streams one entry's data: returns its SHA-256 and checks its CRC-32 and
/// size.
pub fn hash_entry<R: Read + Seek>(r: &mut R, e: &EntryInfo) -> Result<[u8; 32]> {
    let mut hasher = Sha256::new();
    stream_entry(r, e, |chunk| hasher.update(chunk))?;
    Ok(hasher.finalize().into())
}

/// Reads one entry fully into memory, refusing entries larger than `cap`;
/// also checks its CRC-32 and size.
pub fn read_entry<R: Read + Seek>(r: &mut R, e: &EntryInfo, cap: u64) -> Result<Vec<u8>> {
    let too_large = || ContainerError::EntryTooLarge {
        entry: e.name.clone(),
        size: e.size,
        cap,
    };
    if e.size > cap {
        return Err(too_large());
    }
    let mut data = Vec::with_capacity(usize::try_from(e.size).map_err(|_| too_large())?);
    stream_entry(r, e, |chunk| data.extend_from_slice(chunk))?;
    Ok(data)
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::panic,
    clippy::as_conversions
)]
mod tests {
    use super::*;

    const RECORDS: [Record; 3] = [Record::Local, Record::Central, Record::End];

    #[test]
    fn header_table_lays_each_record_out_back_to_back() {
        for record in RECORDS {
            let fields: Vec<&Field> = FIELDS
                .iter()
                .filter(|f| f.offset(record).is_some())
                .collect();
            let mut next = 0u64;
            for f in &fields {
                assert_eq!(
                    u64::from(f.offset(record).unwrap()),
                    next,
                    "{record:?}: {}",
                    f.name
                );
                next += match f.width {
                    Width::U16 => 2,
                    Width::U32 => 4,
                };
            }
            assert_eq!(next, record.len(), "{record:?}");
            assert!(record.len() as usize <= MAX_RECORD_LEN);
            let signatures: Vec<&str> = fields
                .iter()
                .filter(|f| f.rule == Rule::Signature)
                .map(|f| f.name)
                .collect();
            assert_eq!(signatures, ["signature"], "{record:?}");
            assert_eq!(fields[0].rule, Rule::Signature);
        }
        let mut names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FIELDS.len(), "field names are unique");
    }

    #[test]
    fn header_table_rules_apply_where_the_fields_are() {
        let entry = EntryInfo {
            name: "a".into(),
            header_offset: 0,
            data_offset: 31,
            size: 1,
            crc32: 2,
        };
        let end = Expect::End {
            count: 1,
            central_offset: 32,
            central_size: 47,
        };
        for f in &FIELDS {
            for record in RECORDS {
                let Some(_) = f.offset(record) else { continue };
                let expect = match record {
                    Record::End => &end,
                    Record::Local | Record::Central => &Expect::Entry(&entry),
                };
                let expected = f.rule.expected(record, expect);
                let max = match f.width {
                    Width::U16 => u64::from(u16::MAX),
                    Width::U32 => u64::from(u32::MAX),
                };
                assert!(expected.is_some_and(|v| v <= max), "{record:?}: {}", f.name);
            }
            // What the local header declares, the central directory repeats.
            if let Rule::Entry(_) = f.rule {
                assert!(f.local.is_some() && f.central.is_some(), "{}", f.name);
            }
        }
        // The local header's first data-size field is its compressed size,
        // which `Header::value` reads as the entry's size.
        let first_size = FIELDS
            .iter()
            .find(|f| f.rule == Rule::Entry(Declared::DataSize) && f.local.is_some())
            .unwrap();
        assert_eq!(first_size.name, "compressed size");
    }

    #[test]
    fn header_fields_are_read_at_their_offsets_and_checked() {
        // A central directory header for entry "a" with the crc-32 at 16 off
        // by one: named with its absolute offset.
        let mut bytes = vec![0u8; 100];
        let mut rec = Vec::new();
        rec.extend(SIG_CENTRAL.to_le_bytes());
        rec.extend(0x030Au16.to_le_bytes());
        rec.extend(10u16.to_le_bytes());
        rec.extend([0; 6]); // flags, method, time
        rec.extend(0x0021u16.to_le_bytes());
        rec.extend(3u32.to_le_bytes()); // crc-32
        rec.extend(1u32.to_le_bytes());
        rec.extend(1u32.to_le_bytes());
        rec.extend(1u16.to_le_bytes()); // name length
        rec.extend([0; 8]);
        rec.extend(EXTERNAL_ATTRS.to_le_bytes());
        rec.extend(0u32.to_le_bytes());
        assert_eq!(rec.len(), 46);
        bytes[40..86].copy_from_slice(&rec);
        let mut cur = io::Cursor::new(&bytes);
        let mut src = Source {
            r: &mut cur,
            len: 100,
        };
        let header = Header::read(&mut src, Record::Central, 40).unwrap();
        header.check_signature().unwrap();
        assert_eq!(header.value(Rule::Entry(Declared::NameLen)).unwrap(), 1);
        let entry = EntryInfo {
            name: "a".into(),
            header_offset: 0,
            data_offset: 31,
            size: 1,
            crc32: 2,
        };
        match header.check(&Expect::Entry(&entry), |_| true) {
            Err(ContainerError::FieldNotCanonical {
                record,
                entry,
                field,
                offset,
                found,
                expected,
            }) => assert_eq!(
                (record, entry.as_deref(), field, offset, found, expected),
                ("central directory header", Some("a"), "crc-32", 56, 3, 2)
            ),
            other => panic!("{other:?}"),
        }
        // The same bytes are not a local file header.
        let header = Header::read(&mut src, Record::Local, 40).unwrap();
        assert!(matches!(
            header.check_signature(),
            Err(ContainerError::BadSignature {
                offset: 40,
                found: SIG_CENTRAL,
                ..
            })
        ));
        // A record that runs past the end of the stream.
        assert!(matches!(
            Header::read(&mut src, Record::Central, 60),
            Err(ContainerError::Truncated {
                what: "central directory header",
                offset: 60
            })
        ));
    }

    #[test]
    fn name_rules() {
        for ok in [
            "a",
            "a.txt",
            "dir/b.bin",
            "dir/sub/c",
            ".hidden",
            "..x",
            "a..b",
            "A-Z_a-z.0-9",
            "console",
            "com10",
            "lpt",
            "auxiliary.txt",
            "x.aux",
            // What kolm itself writes.
            "manifest.json",
            "receipt.cose",
            "evidence/index.json",
            "evidence/snp-ask-ark.pem",
            "governance/SHA256SUMS",
            "governance/sbom.spdx.json",
            "governance/sandbox-record.json",
            "outputs/metrics.json",
            "outputs/model/bigram.json",
            &"x".repeat(MAX_COMPONENT_LEN),
            &["x"; 256].join("/"),
        ] {
            assert!(check_entry_name(ok).is_ok(), "{ok:?}");
        }
        for (bad, reason) in [
            ("", "empty"),
            (
                &format!("{}x", "x/".repeat(MAX_NAME_LEN / 2)) as &str,
                "longer than 512 bytes",
            ),
            ("a\0b", "contains a NUL or control character"),
            ("a\nb", "contains a NUL or control character"),
            ("a\u{7f}", "contains a NUL or control character"),
            ("a\u{85}", "contains a NUL or control character"),
            ("a\\b", "contains a backslash"),
            ("/abs", "absolute path (leading '/')"),
            ("C:x", "starts with a drive letter"),
            ("z:", "starts with a drive letter"),
            (
                "ab:c",
                "contains ':' (a drive or NTFS alternate data stream separator)",
            ),
            (
                "1:x",
                "contains ':' (a drive or NTFS alternate data stream separator)",
            ),
            (
                "outputs/a.txt:hidden",
                "contains ':' (a drive or NTFS alternate data stream separator)",
            ),
            ("dir/", "trailing '/' (directory entry)"),
            ("a//b", "empty path component ('//')"),
            ("./a", "'.' path component"),
            ("a/./b", "'.' path component"),
            ("../x", "'..' path component"),
            ("a/..", "'..' path component"),
            (
                &"x".repeat(MAX_COMPONENT_LEN + 1),
                "path component longer than 255 bytes",
            ),
        ] {
            match check_entry_name(bad) {
                Err(ContainerError::BadName { name, reason: got }) => {
                    assert_eq!(name, bad);
                    assert_eq!(got, reason, "{bad:?}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        for bad in [
            "a.",
            "a./b",
            "a/b.",
            "a ",
            "a /b",
            "...",
            "outputs/report.txt.",
        ] {
            assert!(
                matches!(check_entry_name(bad), Err(ContainerError::BadName { reason, .. })
                    if reason == "path component ends with '.' or ' ' (Windows drops it)"),
                "{bad:?}"
            );
        }
        for bad in [
            "CON",
            "con",
            "Con.txt",
            "aux.txt",
            "AUX.tar.gz",
            "nul",
            "PRN.json",
            "com1",
            "COM9.x",
            "com0",
            "lpt1",
            "LPT9.bin",
            "outputs/aux",
            "outputs/nul.txt/x",
            "outputs/Lpt5.log",
        ] {
            assert!(
                matches!(check_entry_name(bad), Err(ContainerError::BadName { reason, .. })
                    if reason.starts_with("Windows reserved device name")),
                "{bad:?}"
            );
        }
        for c in [
            '\u{202A}', '\u{202B}', '\u{202C}', '\u{202D}', '\u{202E}', '\u{2066}', '\u{2067}',
            '\u{2068}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{061C}',
        ] {
            let bad = format!("outputs/report{c}txt.exe");
            assert!(
                matches!(check_entry_name(&bad), Err(ContainerError::BadName { reason, .. })
                    if reason == "contains a bidirectional control character"),
                "{bad:?}"
            );
        }
        // Everything else outside A-Z a-z 0-9 . _ - / is named: spaces,
        // shell and Windows-forbidden characters, any non-ASCII character
        // (precomposed or decomposed accents, the Kelvin sign that case-folds
        // to 'k', full-width letters, zero-width characters).
        for (bad, c) in [
            ("a b", ' '),
            ("a*b", '*'),
            ("a?b", '?'),
            ("a\"b", '"'),
            ("a<b", '<'),
            ("a>b", '>'),
            ("a|b", '|'),
            ("a+b", '+'),
            ("a~b", '~'),
            ("\u{e9}/\u{fc}.bin", '\u{e9}'),
            ("e\u{301}", '\u{301}'),
            ("\u{212a}", '\u{212a}'),
            ("\u{ff41}", '\u{ff41}'),
            ("a\u{200b}b", '\u{200b}'),
        ] {
            match check_entry_name(bad) {
                Err(ContainerError::NonPortableCharacter { name, character }) => {
                    assert_eq!(name, bad);
                    assert_eq!(character, c, "{bad:?}");
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn name_set_rules() {
        assert!(check_name_set(["A", "B", "c/x", "d/y"].into_iter()).is_ok());
        // "A" is a file and "a/x" needs a directory "a".
        assert!(matches!(
            check_name_set(["A", "a/x"].into_iter()),
            Err(ContainerError::FileDirectoryConflict { file, other }) if file == "A" && other == "a/x"
        ));
        assert!(matches!(
            check_name_set(["a", "a"].into_iter()),
            Err(ContainerError::DuplicateName { name }) if name == "a"
        ));
        assert!(matches!(
            check_name_set(["b", "a"].into_iter()),
            Err(ContainerError::Unsorted { prev, next }) if prev == "b" && next == "a"
        ));
        // Not adjacent in byte order: "Ab" < "B" < "aB".
        assert!(matches!(
            check_name_set(["Ab", "B", "aB"].into_iter()),
            Err(ContainerError::CaseCollision { a, b }) if a == "Ab" && b == "aB"
        ));
    }

    #[test]
    fn name_collisions_in_any_order() {
        for names in [
            &["outputs/Model.bin", "outputs/model.bin"][..],
            &["outputs/model.bin", "outputs/MODEL.BIN"],
            &["OUTPUTS/a", "outputs/a"],
        ] {
            assert!(
                matches!(
                    check_name_collisions(names.iter().copied()),
                    Err(ContainerError::CaseCollision { .. })
                ),
                "{names:?}"
            );
        }
        for names in [
            &["outputs/a", "outputs/a/b"][..],
            &["outputs/a/b", "outputs/a"],
            &["outputs/A", "outputs/a/b"],
            &["outputs/x/y/z", "outputs/X/Y"],
        ] {
            assert!(
                matches!(
                    check_name_collisions(names.iter().copied()),
                    Err(ContainerError::FileDirectoryConflict { .. })
                ),
                "{names:?}"
            );
        }
        assert!(check_name_collisions(["outputs/a/b", "outputs/a/c", "outputs/ab"]).is_ok());
    }

    #[test]
    fn canonical_constants() {
        assert_eq!(EXTERNAL_ATTRS, 0x81A4_0000);
        assert_eq!(canonical_flags("a.txt"), 0);
        assert_eq!(canonical_flags("é"), 0x0800);
    }

    /// The error as a chain printer shows it (anyhow's `{:#}`: each
    /// `source` appended after `": "`).
    fn chain(e: &dyn std::error::Error) -> String {
        let mut out = e.to_string();
        let mut next = e.source();
        while let Some(s) = next {
            out.push_str(": ");
            out.push_str(&s.to_string());
            next = s.source();
        }
        out
    }

    /// An unreadable source names the entry, the path and the OS error in
    /// its message, and has no `source`: printed as a chain, the OS error
    /// comes once (it used to come twice: `...: No such file or directory
    /// (os error 2): No such file or directory (os error 2)`).
    #[test]
    fn an_unreadable_source_prints_the_os_error_once() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("does-not-exist");
        let e = write_canonical_zip(
            &dir.path().join("out.zip"),
            vec![("b".into(), EntryData::File(missing.clone()))],
        )
        .unwrap_err();
        let ContainerError::Source { entry, path, error } = &e else {
            panic!("expected ContainerError::Source, got {e:?}");
        };
        assert_eq!(entry, "b");
        assert_eq!(*path, missing);
        let message = format!("entry \"b\": reading source {missing:?}: {error}");
        assert_eq!(e.to_string(), message);
        assert_eq!(chain(&e), message);
    }

    /// A reader that fails every call with `why`.
    struct Failing(&'static str);

    impl Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other(self.0))
        }
    }

    impl Seek for Failing {
        fn seek(&mut self, _: SeekFrom) -> io::Result<u64> {
            Err(io::Error::other(self.0))
        }
    }

    /// The variants that carry their cause in the message have no
    /// `source`: printed alone or as a chain, the cause comes once (they
    /// were `#[from]`/`#[source]` as well, so a chain printed it twice).
    #[test]
    fn causes_in_the_message_are_printed_once() {
        let why = "the medium went away";
        let io_err = read_canonical_zip(&mut Failing(why)).unwrap_err();
        assert!(matches!(&io_err, ContainerError::Io(_)), "{io_err:?}");
        let zip_err = ContainerError::from(zip::result::ZipError::Io(io::Error::other(why)));
        let rejected = ContainerError::WriterOutputRejected(Box::new(ContainerError::Io(
            io::Error::other(why),
        )));
        for (e, shown) in [
            (io_err, format!("I/O error: {why}")),
            (zip_err, format!("zip writer: i/o error: {why}")),
            (
                rejected,
                format!("written archive is not canonical: I/O error: {why}"),
            ),
        ] {
            assert_eq!(e.to_string(), shown);
            assert_eq!(chain(&e), shown);
            assert_eq!(chain(&e).matches(why).count(), 1, "{}", chain(&e));
        }
    }
}
