//! `kolm-harmless`: the well-behaved half of the sandbox's test pair. It
//! does what a real job does and must run unaffected, with nothing counted:
//! reads its input directory, runs threads over a large buffer, forks and
//! execs a child (`/bin/true`, through libc's clone3 -> clone fallback),
//! talks to itself over an AF_UNIX socket pair, and writes, renames and
//! removes files in its output directory.
//!
//! Usage: `kolm-harmless INPUT_DIR OUTPUT_DIR [MIB]`; prints a JSON summary
//! and exits 0 when everything worked.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(input), Some(output)) = (args.first(), args.get(1)) else {
        eprintln!("usage: kolm-harmless INPUT_DIR OUTPUT_DIR [MIB]");
        std::process::exit(2);
    };
    let mib: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(256);
    match run(Path::new(input), Path::new(output), mib) {
        Ok(summary) => println!("{summary}"),
        Err(e) => {
            eprintln!("kolm-harmless: {e}");
            std::process::exit(1);
        }
    }
}

fn run(input: &Path, output: &Path, mib: usize) -> Result<String, String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: std::io::Error| format!("{what}: {err}")
    };
    // Inputs.
    let mut names: Vec<_> = std::fs::read_dir(input)
        .map_err(e("listing input"))?
        .filter_map(Result::ok)
        .map(|d| d.path())
        .collect();
    names.sort();
    let mut input_bytes = 0usize;
    for p in &names {
        input_bytes += std::fs::read(p).map_err(e("reading input"))?.len();
    }

    // Memory-heavy work on four threads.
    let len = mib * 1024 * 1024;
    let mut buf = vec![0u8; len];
    let chunk = len.div_ceil(4).max(1);
    let sums: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = buf
            .chunks_mut(chunk)
            .enumerate()
            .map(|(i, part)| {
                s.spawn(move || {
                    let mut x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let mut sum = 0u64;
                    for b in part.iter_mut() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        *b = x as u8;
                        sum = sum.wrapping_add(u64::from(*b));
                    }
                    sum
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    let checksum = sums.iter().fold(0u64, |a, b| a.wrapping_add(*b));

    // A child process.
    let child_ok = std::process::Command::new("/bin/true")
        .status()
        .map_err(e("running /bin/true"))?
        .success();

    // AF_UNIX socket pair (allowed in the default profile).
    let (mut a, mut b) = UnixStream::pair().map_err(e("socketpair(AF_UNIX)"))?;
    a.write_all(b"ping").map_err(e("unix write"))?;
    let mut got = [0u8; 4];
    b.read_exact(&mut got).map_err(e("unix read"))?;

    // Output directory: write, rename, remove.
    std::fs::create_dir_all(output.join("sub")).map_err(e("mkdir"))?;
    let tmp = output.join("sub/result.tmp");
    std::fs::write(&tmp, format!("{checksum}\n")).map_err(e("writing output"))?;
    std::fs::rename(&tmp, output.join("result.txt")).map_err(e("renaming output"))?;
    std::fs::write(output.join("scratch"), b"x").map_err(e("writing scratch"))?;
    std::fs::remove_file(output.join("scratch")).map_err(e("removing scratch"))?;

    Ok(format!(
        "{{\"input_files\":{},\"input_bytes\":{input_bytes},\"mib\":{mib},\"checksum\":{checksum},\"child_ok\":{child_ok},\"unix_pair\":{}}}",
        names.len(),
        &got == b"ping"
    ))
}
