//! Tests of the canonical ZIP container (kolm container profile v1,
//! `docs/container.md`): writer/reader round trips, compatibility with the
//! `zip` crate's reader, a committed byte-exact vector, and rejection of
//! mutated archives.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

use std::io::{Cursor, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use kolm_format::container::{
    Container, ContainerError, EntryData, MAX_ENTRIES, MAX_NAME_LEN, check_entry_name, hash_entry,
    read_canonical_zip, read_entry, write_canonical_zip,
};
use sha2::{Digest, Sha256};

const VECTOR: &str = "tests/vectors/container/two-entries.zip";
/// sha256 of `two-entries.zip`. If a `zip` crate upgrade changes this, the
/// container format changed: that is a new profile, not a silent update.
const VECTOR_SHA256: &str = "1eea7637303e3b57a4693486d9ad946c0844668b4b9ba4a54db0e79ea77a88d9";

fn vector_entries() -> Vec<(String, EntryData)> {
    vec![
        ("a.txt".into(), EntryData::Bytes(b"hello\n".to_vec())),
        ("dir/b.bin".into(), EntryData::Bytes(vec![0x00, 0x01, 0xff])),
    ]
}

fn bytes_entries(entries: &[(&str, &[u8])]) -> Vec<(String, EntryData)> {
    entries
        .iter()
        .map(|(n, d)| ((*n).to_owned(), EntryData::Bytes(d.to_vec())))
        .collect()
}

/// Writes with the library writer into a fresh temp dir; returns the bytes.
fn write_to_vec(entries: Vec<(String, EntryData)>) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out.zip");
    write_canonical_zip(&dest, entries).unwrap();
    std::fs::read(&dest).unwrap()
}

fn read(bytes: &[u8]) -> Result<Container, ContainerError> {
    read_canonical_zip(&mut Cursor::new(bytes))
}

/// What an error must look like, in the tables below.
type Matcher = fn(&ContainerError) -> bool;
/// Entries as (name, data), in the order given.
type Entries = &'static [(&'static str, &'static [u8])];

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn le16(v: u16) -> [u8; 2] {
    v.to_le_bytes()
}

fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

/// An independent, byte-by-byte writer of profile v1 that writes entries in
/// the order given and does not check names: used to check the `zip`-based
/// writer against the written spec, and to craft archives the library
/// writer refuses to produce.
fn craft(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cd = Vec::new();
    for (name, data) in entries {
        let offset = u32::try_from(out.len()).unwrap();
        let crc = crc32fast::hash(data);
        let size = u32::try_from(data.len()).unwrap();
        let name_len = u16::try_from(name.len()).unwrap();
        let flags: u16 = if name.is_ascii() { 0 } else { 0x0800 };
        out.extend(le32(0x0403_4b50));
        out.extend(le16(10)); // version needed
        out.extend(le16(flags));
        out.extend(le16(0)); // stored
        out.extend(le16(0)); // time 00:00:00
        out.extend(le16(0x0021)); // date 1980-01-01
        out.extend(le32(crc));
        out.extend(le32(size));
        out.extend(le32(size));
        out.extend(le16(name_len));
        out.extend(le16(0)); // extra length
        out.extend(name.as_bytes());
        out.extend(*data);

        cd.extend(le32(0x0201_4b50));
        cd.extend(le16(0x030A)); // made by: UNIX, 1.0
        cd.extend(le16(10));
        cd.extend(le16(flags));
        cd.extend(le16(0));
        cd.extend(le16(0));
        cd.extend(le16(0x0021));
        cd.extend(le32(crc));
        cd.extend(le32(size));
        cd.extend(le32(size));
        cd.extend(le16(name_len));
        cd.extend(le16(0)); // extra length
        cd.extend(le16(0)); // comment length
        cd.extend(le16(0)); // disk number start
        cd.extend(le16(0)); // internal attributes
        cd.extend(le32(0o100_644 << 16)); // external attributes
        cd.extend(le32(offset));
        cd.extend(name.as_bytes());
    }
    let n = u16::try_from(entries.len()).unwrap();
    let cd_offset = u32::try_from(out.len()).unwrap();
    let cd_size = u32::try_from(cd.len()).unwrap();
    out.extend(cd);
    out.extend(le32(0x0605_4b50));
    out.extend(le16(0));
    out.extend(le16(0));
    out.extend(le16(n));
    out.extend(le16(n));
    out.extend(le32(cd_size));
    out.extend(le32(cd_offset));
    out.extend(le16(0));
    out
}

fn sample_entries() -> Vec<(&'static str, &'static [u8])> {
    vec![
        ("a.txt", b"hello\n"),
        ("b/empty", b""),
        ("dir/b.bin", &[0x00, 0x01, 0xff]),
        ("z/ete-1_A.json", b"{\"k\":1}"),
    ]
}

#[test]
fn writer_output_matches_the_written_spec() {
    let entries = sample_entries();
    assert_eq!(write_to_vec(bytes_entries(&entries)), craft(&entries));
    assert_eq!(
        write_to_vec(vector_entries()),
        craft(&[("a.txt", b"hello\n"), ("dir/b.bin", &[0, 1, 0xff])])
    );
}

#[test]
fn round_trip_entries_offsets_and_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("source.bin");
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &big).unwrap();
    let mut entries = bytes_entries(&sample_entries());
    entries.push(("big/data.bin".into(), EntryData::File(src)));
    let dest = dir.path().join("out.zip");
    write_canonical_zip(&dest, entries).unwrap();

    let mut file = std::fs::File::open(&dest).unwrap();
    let c = read_canonical_zip(&mut file).unwrap();
    let names: Vec<&str> = c.entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "a.txt",
            "b/empty",
            "big/data.bin",
            "dir/b.bin",
            "z/ete-1_A.json"
        ]
    );
    assert_eq!(c.total_len, std::fs::metadata(&dest).unwrap().len());

    let mut expected: Vec<(&str, Vec<u8>)> = sample_entries()
        .into_iter()
        .map(|(n, d)| (n, d.to_vec()))
        .collect();
    expected.push(("big/data.bin", big));
    let mut next_header = 0;
    for e in &c.entries {
        assert_eq!(e.header_offset, next_header, "contiguous from offset 0");
        assert_eq!(e.data_offset, e.header_offset + 30 + e.name.len() as u64);
        next_header = e.data_offset + e.size;
    }
    for (name, data) in &expected {
        let e = c.entry(name).unwrap();
        assert_eq!(e.size, data.len() as u64);
        assert_eq!(e.crc32, crc32fast::hash(data));
        assert_eq!(hash_entry(&mut file, e).unwrap(), sha256(data), "{name}");
        assert_eq!(&read_entry(&mut file, e, 1 << 20).unwrap(), data, "{name}");
    }
    assert!(c.entry("missing").is_none());
    assert!(c.entry("A.txt").is_none());
}

#[test]
fn same_entries_in_any_order_give_identical_bytes() {
    let entries = sample_entries();
    let forward = write_to_vec(bytes_entries(&entries));
    let mut reversed = entries.clone();
    reversed.reverse();
    assert_eq!(write_to_vec(bytes_entries(&reversed)), forward);
    let mut rotated = entries.clone();
    rotated.rotate_left(2);
    assert_eq!(write_to_vec(bytes_entries(&rotated)), forward);
}

#[test]
fn zip_crate_reads_every_entry_of_our_output() {
    let entries = sample_entries();
    let bytes = write_to_vec(bytes_entries(&entries));
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    assert_eq!(archive.len(), entries.len());
    assert!(archive.comment().is_empty());
    for (i, (name, data)) in entries.iter().enumerate() {
        let mut f = archive.by_index(i).unwrap();
        assert_eq!(f.name().unwrap(), *name);
        assert_eq!(f.compression(), zip::CompressionMethod::Stored);
        assert_eq!(f.unix_mode(), Some(0o100_644));
        assert!(f.is_file());
        assert!(f.extra_data().is_none_or(|x| x.is_empty()));
        let mut content = Vec::new();
        f.read_to_end(&mut content).unwrap();
        assert_eq!(&content, data);
    }
}

#[test]
fn empty_archive_round_trips() {
    let bytes = write_to_vec(Vec::new());
    let mut eocd = vec![0x50, 0x4b, 0x05, 0x06];
    eocd.extend([0u8; 18]);
    assert_eq!(bytes, eocd);
    assert_eq!(bytes, craft(&[]));
    let c = read(&bytes).unwrap();
    assert!(c.entries.is_empty());
    assert_eq!(c.total_len, 22);
    assert_eq!(zip::ZipArchive::new(Cursor::new(bytes)).unwrap().len(), 0);
}

#[test]
fn committed_vector_is_byte_stable() {
    let vector = std::fs::read(VECTOR).unwrap();
    assert_eq!(hex(&sha256(&vector)), VECTOR_SHA256, "{VECTOR} changed");
    assert_eq!(
        write_to_vec(vector_entries()),
        vector,
        "writer no longer produces {VECTOR}"
    );
    let c = read(&vector).unwrap();
    let summary: Vec<(&str, u64, u64, u64, u32)> = c
        .entries
        .iter()
        .map(|e| {
            (
                e.name.as_str(),
                e.header_offset,
                e.data_offset,
                e.size,
                e.crc32,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("a.txt", 0, 35, 6, crc32fast::hash(b"hello\n")),
            ("dir/b.bin", 41, 80, 3, crc32fast::hash(&[0x00, 0x01, 0xff])),
        ]
    );
    assert_eq!(c.total_len, 83 + 2 * 46 + 5 + 9 + 22);
    assert_eq!(vector.len() as u64, c.total_len);
}

/// Every single-byte change is caught: outside entry data by the structural
/// reader, inside entry data (which the reader does not read) by the CRC.
fn assert_every_flip_detected(original: &[u8]) {
    let base = read(original).unwrap();
    let owner = |pos: u64| {
        base.entries
            .iter()
            .find(|e| (e.data_offset..e.data_offset + e.size).contains(&pos))
    };
    let mut data_flips = 0;
    for pos in 0..original.len() {
        for mask in [0x01u8, 0xff] {
            let mut m = original.to_vec();
            m[pos] ^= mask;
            match (read(&m), owner(pos as u64)) {
                (Err(_), None) => {}
                (Err(e), Some(_)) => panic!("data byte {pos} ^ {mask:#x}: structure rejected: {e}"),
                (Ok(_), None) => panic!("header byte {pos} ^ {mask:#x} accepted"),
                (Ok(c), Some(owner)) => {
                    assert_eq!(c.entries, base.entries);
                    let mut cur = Cursor::new(&m);
                    for e in &c.entries {
                        let hashed = hash_entry(&mut cur, e);
                        if e.name == owner.name {
                            assert!(
                                matches!(&hashed, Err(ContainerError::CrcMismatch { entry, .. }) if *entry == e.name),
                                "data byte {pos} ^ {mask:#x}: {hashed:?}"
                            );
                            assert!(matches!(
                                read_entry(&mut cur, e, 1 << 20),
                                Err(ContainerError::CrcMismatch { .. })
                            ));
                        } else {
                            hashed.unwrap();
                        }
                    }
                    data_flips += 1;
                }
            }
        }
    }
    let data_len: u64 = base.entries.iter().map(|e| e.size).sum();
    assert_eq!(data_flips, 2 * data_len);
}

#[test]
fn every_single_byte_flip_is_rejected() {
    assert_every_flip_detected(&std::fs::read(VECTOR).unwrap());
    assert_every_flip_detected(&write_to_vec(bytes_entries(&sample_entries())));
    assert_every_flip_detected(&write_to_vec(Vec::new()));
}

#[test]
fn every_truncation_is_rejected() {
    for original in [std::fs::read(VECTOR).unwrap(), write_to_vec(Vec::new())] {
        for len in 0..original.len() {
            assert!(
                read(&original[..len]).is_err(),
                "truncated to {len} accepted"
            );
        }
    }
    // Where the cut lands decides the error.
    let vector = std::fs::read(VECTOR).unwrap();
    let cases: [(usize, Matcher); 3] = [
        (0, |e| {
            matches!(e, ContainerError::Truncated { offset: 0, .. })
        }),
        (vector.len() - 1, |e| {
            matches!(
                e,
                ContainerError::Truncated {
                    what: "end of central directory record",
                    ..
                }
            )
        }),
        // Inside the first entry's data.
        (37, |e| matches!(e, ContainerError::DataOutOfBounds { .. })),
    ];
    for (len, matcher) in cases {
        let err = read(&vector[..len]).unwrap_err();
        assert!(matcher(&err), "cut at {len}: {err:?}");
    }
}

#[test]
fn appended_and_prepended_bytes_are_rejected() {
    let vector = std::fs::read(VECTOR).unwrap();
    for extra in [0x00u8, 0x50] {
        let mut appended = vector.clone();
        appended.push(extra);
        match read(&appended) {
            Err(ContainerError::TrailingBytes { offset, len }) => {
                assert_eq!((offset, len), (vector.len() as u64, 1));
            }
            other => panic!("{other:?}"),
        }
        let mut prepended = vec![extra];
        prepended.extend(&vector);
        assert!(matches!(
            read(&prepended),
            Err(ContainerError::BadSignature { offset: 0, .. })
        ));
    }
    // A whole second archive appended is trailing data too.
    let mut doubled = vector.clone();
    doubled.extend(&vector);
    assert!(matches!(
        read(&doubled),
        Err(ContainerError::TrailingBytes { .. })
    ));
}

fn assert_write_fails(entries: Vec<(String, EntryData)>, check: impl Fn(&ContainerError) -> bool) {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("out.zip");
    let err = write_canonical_zip(&dest, entries).unwrap_err();
    assert!(check(&err), "{err:?}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn duplicate_and_case_colliding_names_are_rejected_by_the_writer() {
    let cases: [(Entries, Matcher); 2] = [
        (
            &[("b", b"1"), ("a", b"x"), ("b", b"2")],
            |e| matches!(e, ContainerError::DuplicateName { name } if name == "b"),
        ),
        (
            &[("Dir/A.txt", b"1"), ("B", b"x"), ("dir/a.TXT", b"2")],
            |e| matches!(e, ContainerError::CaseCollision { a, b } if a == "Dir/A.txt" && b == "dir/a.TXT"),
        ),
    ];
    for (entries, matcher) in cases {
        assert_write_fails(bytes_entries(entries), matcher);
    }
}

/// The rules across names (strictly ascending name bytes, no ASCII-case
/// collisions) on archives crafted in the order given. `None`: accepted.
#[test]
fn name_set_rules_on_crafted_archives() {
    let cases: [(Entries, Option<Matcher>); 8] = [
        (
            &[("a", b"1"), ("a", b"2")],
            Some(|e| matches!(e, ContainerError::DuplicateName { name } if name == "a")),
        ),
        (
            &[("README", b"1"), ("readme", b"2")],
            Some(|e| matches!(e, ContainerError::CaseCollision { .. })),
        ),
        // Non-ASCII names are refused outright (so no Unicode case folding
        // or normalisation is needed to find collisions).
        (
            &[("\u{c9}", b"1"), ("\u{e9}", b"2")],
            Some(|e| {
                matches!(
                    e,
                    ContainerError::NonPortableCharacter {
                        character: '\u{c9}',
                        ..
                    }
                )
            }),
        ),
        // A file where another entry needs a directory, ignoring case.
        (
            &[("A", b"1"), ("a/b", b"2")],
            Some(|e| matches!(e, ContainerError::FileDirectoryConflict { .. })),
        ),
        (
            &[("b", b"1"), ("a", b"2")],
            Some(
                |e| matches!(e, ContainerError::Unsorted { prev, next } if prev == "b" && next == "a"),
            ),
        ),
        // Byte order, not case-insensitive order: "B" (0x42) sorts before "a".
        (&[("B", b"1"), ("a", b"2")], None),
        (
            &[("a", b"1"), ("B", b"2")],
            Some(|e| matches!(e, ContainerError::Unsorted { .. })),
        ),
        // "a/b" < "a0": '/' (0x2f) < '0' (0x30); a path-aware sort would differ.
        (&[("a/b", b"1"), ("a0", b"2")], None),
    ];
    for (entries, want) in cases {
        let got = read(&craft(entries));
        match (want, &got) {
            (None, Ok(_)) => {}
            (Some(matcher), Err(e)) if matcher(e) => {}
            _ => panic!("{entries:?}: {got:?}"),
        }
    }
}

#[test]
fn bad_names_are_rejected_by_writer_and_reader() {
    let long = "x".repeat(MAX_NAME_LEN + 1);
    let bad = [
        "../x",
        "/abs",
        "a\\b",
        "a//b",
        "./a",
        "dir/",
        "a/..",
        "",
        "C:/x",
        "a\0b",
        "a\tb",
        long.as_str(),
    ];
    for name in bad {
        assert!(
            matches!(check_entry_name(name), Err(ContainerError::BadName { .. })),
            "{name:?}"
        );
        assert_write_fails(
            bytes_entries(&[("ok", b"1"), (name, b"2")]),
            |e| matches!(e, ContainerError::BadName { name: n, .. } if n == name),
        );
        let crafted = craft(&[(name, b"2")]);
        let err = read(&crafted).unwrap_err();
        if name.len() > MAX_NAME_LEN {
            assert!(
                matches!(
                    err,
                    ContainerError::NameTooLong {
                        offset: 30,
                        len: 513,
                        ..
                    }
                ),
                "{err:?}"
            );
        } else {
            assert!(
                matches!(&err, ContainerError::BadName { name: n, .. } if n == name),
                "{err:?}"
            );
        }
    }
    // Names that would unpack differently (or not at all) on some OS:
    // refused by the writer and by the reader (the crafted archive sets the
    // UTF-8 flag for the non-ASCII ones, so only the name rule can refuse).
    let unportable = [
        "z/\u{e9}t\u{e9}.json",
        "e\u{301}.txt",
        "a b",
        "outputs/aux.txt",
        "outputs/CON",
        "outputs/lpt1.log",
        "outputs/a.",
        "outputs/a ",
        "outputs/a:b",
        "outputs/x\u{202e}txt.exe",
        "outputs/x\u{2066}y",
    ];
    for name in unportable {
        let refused = |e: &ContainerError| {
            matches!(e, ContainerError::BadName { name: n, .. }
                | ContainerError::NonPortableCharacter { name: n, .. } if n == name)
        };
        assert!(refused(&check_entry_name(name).unwrap_err()), "{name:?}");
        assert_write_fails(bytes_entries(&[("ok", b"1"), (name, b"2")]), refused);
        let err = read(&craft(&[(name, b"2")])).unwrap_err();
        assert!(refused(&err), "{name:?}: {err:?}");
    }
    // The longest allowed name works end to end.
    let longest = format!("{}/y/{}", "y".repeat(255), "y".repeat(254));
    assert_eq!(longest.len(), MAX_NAME_LEN);
    let bytes = write_to_vec(bytes_entries(&[(longest.as_str(), b"1")]));
    assert_eq!(read(&bytes).unwrap().entries[0].name, longest);
}

#[test]
fn non_utf8_name_is_rejected() {
    let mut crafted = craft(&[("ab", b"1")]);
    crafted[30] = 0xff; // first name byte in the local header
    assert!(matches!(
        read(&crafted),
        Err(ContainerError::BadName {
            reason: "not valid UTF-8",
            ..
        })
    ));
}

/// Sets both size fields of the first local header (offsets 18 and 22).
fn set_local_sizes(bytes: &mut [u8], size: u32) {
    bytes[18..22].copy_from_slice(&le32(size));
    bytes[22..26].copy_from_slice(&le32(size));
}

#[test]
fn declared_size_larger_than_file_is_rejected() {
    let mut crafted = craft(&[("a", b"hello")]);
    let len = crafted.len() as u64;
    set_local_sizes(&mut crafted, 5 + 1000);
    match read(&crafted) {
        Err(ContainerError::DataOutOfBounds {
            entry,
            offset,
            size,
            archive_len,
        }) => {
            assert_eq!(
                (entry.as_str(), offset, size, archive_len),
                ("a", 31, 1005, len)
            );
        }
        other => panic!("{other:?}"),
    }
    // A size pointing exactly at the end of the file is not enough either.
    let mut crafted = craft(&[("a", b"hello")]);
    let to_end = u32::try_from(len - 31).unwrap();
    set_local_sizes(&mut crafted, to_end);
    assert!(read(&crafted).is_err());
}

#[test]
fn stored_entry_claiming_4_gib_is_rejected() {
    for size in [u32::MAX, u32::MAX - 1, 1 << 31] {
        let mut crafted = craft(&[("a", b"hello")]);
        set_local_sizes(&mut crafted, size);
        assert!(
            matches!(read(&crafted), Err(ContainerError::DataOutOfBounds { .. })),
            "{size:#x}"
        );
    }
    // Only the central directory claims it (the zip64 marker).
    let mut crafted = craft(&[("a", b"hello")]);
    let cd = 31 + 5;
    crafted[cd + 20..cd + 24].copy_from_slice(&le32(u32::MAX));
    crafted[cd + 24..cd + 28].copy_from_slice(&le32(u32::MAX));
    assert!(matches!(
        read(&crafted),
        Err(ContainerError::FieldNotCanonical {
            field: "compressed size",
            found: 0xFFFF_FFFF,
            expected: 5,
            ..
        })
    ));
}

/// A stream that claims to be `len` bytes long (for the 4 GiB cap) but
/// holds nothing.
struct HugeStream {
    len: u64,
    pos: u64,
}

impl Read for HugeStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        buf.fill(0);
        Ok(buf.len())
    }
}

impl Seek for HugeStream {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        self.pos = match to {
            SeekFrom::Start(p) => p,
            SeekFrom::End(d) => self.len.checked_add_signed(d).unwrap(),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d).unwrap(),
        };
        Ok(self.pos)
    }
}

#[test]
fn archive_of_4_gib_or_more_is_rejected() {
    for len in [1u64 << 32, 5 << 30, u64::MAX] {
        let err = read_canonical_zip(&mut HugeStream { len, pos: 0 }).unwrap_err();
        assert!(
            matches!(err, ContainerError::ArchiveTooLarge { len: l, max: 0xFFFF_FFFF } if l == len)
        );
    }
    // Just under the cap is parsed (and fails on content, not on size).
    let err = read_canonical_zip(&mut HugeStream {
        len: 0xFFFF_FFFF,
        pos: 0,
    })
    .unwrap_err();
    assert!(matches!(
        err,
        ContainerError::BadSignature {
            offset: 0,
            found: 0,
            ..
        }
    ));
}

#[test]
fn writer_refuses_sources_over_the_size_caps() {
    let dir = tempfile::tempdir().unwrap();
    // Sparse files: sized by metadata, refused before a byte is read.
    let huge = dir.path().join("huge");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 32)
        .unwrap();
    let half = dir.path().join("half");
    std::fs::File::create(&half)
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("out.zip");
    let err = write_canonical_zip(&dest, vec![("h".into(), EntryData::File(huge))]).unwrap_err();
    assert!(
        matches!(
            err,
            ContainerError::EntryTooLarge {
                size: 0x1_0000_0000,
                ..
            }
        ),
        "{err:?}"
    );
    let err = write_canonical_zip(
        &dest,
        vec![
            ("a".into(), EntryData::File(half.clone())),
            ("b".into(), EntryData::File(half)),
        ],
    )
    .unwrap_err();
    assert!(
        matches!(err, ContainerError::ArchiveTooLarge { .. }),
        "{err:?}"
    );
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
}

/// Overwrites the 4 bytes of an EOCD count pair (entries on disk, total).
fn set_eocd_counts(bytes: &mut [u8], n: u16) {
    let eocd = bytes.len() - 22;
    bytes[eocd + 8..eocd + 10].copy_from_slice(&le16(n));
    bytes[eocd + 10..eocd + 12].copy_from_slice(&le16(n));
}

#[test]
fn entry_count_over_the_cap_is_rejected() {
    let over = u16::try_from(MAX_ENTRIES + 1).unwrap();
    for n in [over, u16::MAX] {
        let mut empty = craft(&[]);
        set_eocd_counts(&mut empty, n);
        match read(&empty) {
            Err(ContainerError::TooManyEntries { count, max }) => {
                assert_eq!((count, max), (u64::from(n), MAX_ENTRIES));
            }
            other => panic!("{other:?}"),
        }
    }
    // A count that disagrees with the records, under the cap.
    let mut vector = std::fs::read(VECTOR).unwrap();
    set_eocd_counts(&mut vector, 3);
    assert!(matches!(
        read(&vector),
        Err(ContainerError::FieldNotCanonical {
            field: "entries on this disk",
            ..
        })
    ));

    // Really MAX_ENTRIES + 1 entries: the reader stops at the first one over.
    let names: Vec<String> = (0..=MAX_ENTRIES).map(|i| format!("f{i:05}")).collect();
    let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
    let mut crafted = craft(&entries[..MAX_ENTRIES]);
    assert_eq!(read(&crafted).unwrap().entries.len(), MAX_ENTRIES);
    crafted = craft(&entries);
    assert!(matches!(
        read(&crafted),
        Err(ContainerError::TooManyEntries { .. })
    ));
    assert_write_fails(
        bytes_entries(&entries),
        |e| matches!(e, ContainerError::TooManyEntries { count, .. } if *count == MAX_ENTRIES as u64 + 1),
    );
}

/// `bytes` must fail on exactly this field.
fn assert_not_canonical(bytes: &[u8], want: (&str, &str, usize, u64, u64)) {
    match read(bytes) {
        Err(ContainerError::FieldNotCanonical {
            record,
            field,
            offset,
            found,
            expected,
            ..
        }) => assert_eq!(
            (record, field, offset, found, expected),
            (want.0, want.1, want.2 as u64, want.3, want.4)
        ),
        other => panic!("{} at {}: {other:?}", want.1, want.2),
    }
}

const LOCAL: &str = "local file header";
const CENTRAL: &str = "central directory header";
const END: &str = "end of central directory record";

/// Each pinned field, changed alone in the committed vector, is named with
/// its record and absolute offset, what was found and what the profile
/// requires.
#[test]
fn non_canonical_fields_are_named() {
    let vector = std::fs::read(VECTOR).unwrap();
    let cd = 83usize; // first central directory header
    let eocd = vector.len() - 22;
    let (v16, v32) = (
        |v: u16| v.to_le_bytes().to_vec(),
        |v: u32| v.to_le_bytes().to_vec(),
    );
    // (offset, new little-endian bytes, record, field, expected)
    #[rustfmt::skip]
    let cases: Vec<(usize, Vec<u8>, &str, &str, u64)> = vec![
        (4,         v16(20),             LOCAL,   "version needed to extract", 10),
        (6,         v16(0x0008),         LOCAL,   "general purpose flags", 0), // data descriptor
        (6,         v16(0x0800),         LOCAL,   "general purpose flags", 0), // UTF-8 on ASCII
        (8,         v16(8),              LOCAL,   "compression method", 0),
        (10,        v16(0x6000),         LOCAL,   "last modified time", 0),
        (12,        v16(0x5a21),         LOCAL,   "last modified date", 0x21),
        (22,        v32(7),              LOCAL,   "uncompressed size", 6),
        (28,        v16(4),              LOCAL,   "extra field length", 0),
        (cd + 4,    v16(0x0314),         CENTRAL, "version made by", 0x030A),
        (cd + 4,    v16(0x000A),         CENTRAL, "version made by", 0x030A),
        (cd + 6,    v16(20),             CENTRAL, "version needed to extract", 10),
        (cd + 8,    v16(0x0008),         CENTRAL, "general purpose flags", 0),
        (cd + 10,   v16(8),              CENTRAL, "compression method", 0),
        (cd + 12,   v16(0x6000),         CENTRAL, "last modified time", 0),
        (cd + 14,   v16(0x5a21),         CENTRAL, "last modified date", 0x21),
        (cd + 16,   v32(0),              CENTRAL, "crc-32", u64::from(crc32fast::hash(b"hello\n"))),
        (cd + 20,   v32(7),              CENTRAL, "compressed size", 6),
        (cd + 24,   v32(7),              CENTRAL, "uncompressed size", 6),
        (cd + 28,   v16(6),              CENTRAL, "file name length", 5),
        (cd + 30,   v16(1),              CENTRAL, "extra field length", 0),
        (cd + 32,   v16(1),              CENTRAL, "file comment length", 0),
        (cd + 34,   v16(1),              CENTRAL, "disk number start", 0),
        (cd + 36,   v16(1),              CENTRAL, "internal file attributes", 0),
        (cd + 38,   v32(0o100_755 << 16), CENTRAL, "external file attributes", 0o100_644 << 16),
        (cd + 42,   v32(1),              CENTRAL, "local header offset", 0),
        (eocd + 4,  v16(1),              END,     "number of this disk", 0),
        (eocd + 6,  v16(1),              END,     "disk where central directory starts", 0),
        (eocd + 10, v16(3),              END,     "total entries", 2),
        (eocd + 12, v32(0),              END,     "central directory size", 2 * 46 + 5 + 9),
        (eocd + 16, v32(0),              END,     "central directory offset", 83),
        (eocd + 20, v16(1),              END,     "comment length", 0),
    ];
    for (at, new, record, field, expected) in cases {
        let mut m = vector.clone();
        m[at..at + new.len()].copy_from_slice(&new);
        let mut found = [0u8; 4];
        found[..new.len()].copy_from_slice(&new);
        let found = u64::from(u32::from_le_bytes(found));
        assert_not_canonical(&m, (record, field, at, found, expected));
    }
}

/// Extra fields and comments, in other archives and with their bytes
/// present.
#[test]
fn extra_fields_and_comments_are_rejected() {
    // An archive comment: EOCD comment length 2 plus two comment bytes.
    let mut commented = std::fs::read(VECTOR).unwrap();
    let eocd = commented.len() - 22;
    commented[eocd + 20..eocd + 22].copy_from_slice(&le16(2));
    commented.extend(b"hi");
    // An extra field in the local header, and a file comment in the central
    // directory, of a one-entry archive.
    let mut extra = craft(&[("a", b"x")]);
    extra[28..30].copy_from_slice(&le16(4));
    let mut comment = craft(&[("a", b"x")]);
    comment[32 + 32..32 + 34].copy_from_slice(&le16(1));
    let cases = [
        (commented, (END, "comment length", eocd + 20, 2, 0)),
        (extra, (LOCAL, "extra field length", 28, 4, 0)),
        (comment, (CENTRAL, "file comment length", 64, 1, 0)),
    ];
    for (bytes, want) in cases {
        assert_not_canonical(&bytes, want);
    }
}

#[test]
fn local_and_central_names_must_agree() {
    let mut crafted = craft(&[("ab", b"x")]);
    let cd_name = 30 + 2 + 1 + 46;
    crafted[cd_name + 1] = b'c';
    assert!(matches!(
        read(&crafted),
        Err(ContainerError::NameMismatch { offset, local, central }) if offset == cd_name as u64 && local == "ab" && central == "ac"
    ));
}

#[test]
fn read_entry_enforces_the_cap() {
    let vector = std::fs::read(VECTOR).unwrap();
    let c = read(&vector).unwrap();
    let e = c.entry("a.txt").unwrap();
    let mut cur = Cursor::new(&vector);
    assert_eq!(read_entry(&mut cur, e, 6).unwrap(), b"hello\n");
    match read_entry(&mut cur, e, 5) {
        Err(ContainerError::EntryTooLarge { entry, size, cap }) => {
            assert_eq!((entry.as_str(), size, cap), ("a.txt", 6, 5))
        }
        other => panic!("{other:?}"),
    }
    // An EntryInfo that runs past the stream (e.g. from another archive).
    let mut forged = e.clone();
    forged.size = 1000;
    assert!(matches!(
        hash_entry(&mut cur, &forged),
        Err(ContainerError::SizeMismatch { found: 176, .. })
    ));
}

fn dir_listing(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// A write that fails, before or after its temp file exists, leaves the
/// destination as it was and nothing else behind.
#[test]
fn failed_write_leaves_destination_untouched() {
    type Case = (
        &'static str,
        fn(&Path) -> Vec<(String, EntryData)>,
        fn(&ContainerError, &Path) -> bool,
    );
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut cases: Vec<Case> = vec![
        (
            "missing source",
            |dir| {
                let mut entries = bytes_entries(&[("a", b"1")]);
                entries.push(("b".into(), EntryData::File(dir.join("does-not-exist"))));
                entries
            },
            |e, dir| {
                matches!(e, ContainerError::Source { entry, path, error }
                    if entry == "b"
                        && *path == dir.join("does-not-exist")
                        && error.kind() == std::io::ErrorKind::NotFound)
            },
        ),
        (
            "directory source",
            |dir| vec![("d".into(), EntryData::File(dir.to_path_buf()))],
            |e, _| matches!(e, ContainerError::NotAFile { .. }),
        ),
    ];
    // A failure after the temp file exists: /proc files report length 0 but
    // have content, so the source "grows" while being copied.
    #[cfg(target_os = "linux")]
    cases.push((
        "source that grows",
        |_| {
            let mut entries = bytes_entries(&[("a", b"1")]);
            entries.push(("status".into(), EntryData::File("/proc/self/status".into())));
            entries
        },
        |e, _| {
            matches!(e, ContainerError::SizeMismatch { entry, expected: 0, found }
                if entry == "status" && *found > 0)
        },
    ));
    for (what, entries, matcher) in cases {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("artifact.zip");
        std::fs::write(&dest, b"old").unwrap();
        let err = write_canonical_zip(&dest, entries(dir.path())).unwrap_err();
        assert!(matcher(&err, dir.path()), "{what}: {err:?}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"old", "{what}");
        assert_eq!(dir_listing(dir.path()), [dest], "{what}");
    }
}

#[test]
fn write_replaces_an_existing_destination() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("artifact.zip");
    std::fs::write(&dest, b"old").unwrap();
    write_canonical_zip(&dest, vector_entries()).unwrap();
    assert_eq!(
        std::fs::read(&dest).unwrap(),
        std::fs::read(VECTOR).unwrap()
    );
    assert_eq!(dir_listing(dir.path()), std::slice::from_ref(&dest));
    // A destination without a file name.
    assert!(matches!(
        write_canonical_zip(Path::new("/"), Vec::new()),
        Err(ContainerError::BadDestination { .. })
    ));
}
