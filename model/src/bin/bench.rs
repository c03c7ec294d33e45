//! `kolm-model-bench`: CPU throughput of the real model's f32 forward pass.
//!
//! Loads the GGUF (SmolLM2-135M-Instruct from `scripts/fetch-assets.sh` by
//! default), then times `--repeat` forward passes over `--tokens` tokens
//! (all logits, as perplexity needs them) and `--decode` single-token
//! decoding steps with the KV cache after a prompt of `--tokens` tokens.
//!
//! Output: a summary on stdout, or with `--json` one document
//! `kolm.model-bench.v1`:
//!
//! | field | meaning |
//! |---|---|
//! | `schema` | `"kolm.model-bench.v1"` |
//! | `model` | the GGUF path |
//! | `tokens` | tokens per forward pass |
//! | `threads` | worker threads of candle's CPU pool |
//! | `load_s` | open, check and dequantise the GGUF, seconds |
//! | `forward_s` | the median of the timed forward passes, seconds |
//! | `forward_tokens_per_s` | `tokens / forward_s` |
//! | `decode_tokens` | decoding steps timed |
//! | `decode_tokens_per_s` | decoding steps per second (0 when none) |
//!
//! Exit status: 0 measured, 2 usage error or a model that cannot be loaded.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use kolm_model::{GgufFile, Output};

/// Environment variable candle's CPU pool reads its size from.
const THREADS_ENV: &str = "RAYON_NUM_THREADS";

/// Times the real model's f32 forward pass on the CPU.
#[derive(Parser)]
#[command(name = "kolm-model-bench", version)]
struct Args {
    /// The GGUF file [default: $KOLM_ASSETS/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf,
    /// KOLM_ASSETS defaulting to ~/.cache/kolm].
    #[arg(long)]
    model: Option<PathBuf>,
    /// Tokens per forward pass.
    #[arg(long, default_value_t = 256, value_parser = at_least_one)]
    tokens: usize,
    /// Worker threads [default: candle's choice, the usable cores].
    #[arg(long, value_parser = at_least_one)]
    threads: Option<usize>,
    /// Timed forward passes (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = at_least_one)]
    repeat: usize,
    /// Decoding steps timed after a prompt of `--tokens` tokens.
    #[arg(long, default_value_t = 32)]
    decode: usize,
    /// One JSON document on stdout instead of the summary.
    #[arg(long)]
    json: bool,
}

/// A whole number of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn default_model() -> Result<PathBuf> {
    let root = std::env::var_os("KOLM_ASSETS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kolm")))
        .context("neither KOLM_ASSETS nor HOME is set: pass --model")?;
    Ok(root.join("smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
}

/// candle sizes its CPU pool once, from the environment, and setting the
/// environment of a running process is `unsafe`: with `--threads` the bench
/// runs itself again with the variable set and passes on its exit status.
fn rerun_with_threads(threads: usize) -> Result<Option<ExitCode>> {
    let want = threads.to_string();
    if std::env::var(THREADS_ENV).is_ok_and(|v| v == want) {
        return Ok(None);
    }
    let exe = std::env::current_exe().context("locating this binary")?;
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(THREADS_ENV, want)
        .status()
        .context("running the bench with the thread count set")?;
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(2);
    Ok(Some(ExitCode::from(code)))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn run(args: &Args) -> Result<serde_json::Value> {
    let path = match &args.model {
        Some(p) => p.clone(),
        None => default_model()?,
    };
    let start = Instant::now();
    let file = GgufFile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let model = file.load_model().context("loading the weights")?;
    let load_s = start.elapsed().as_secs_f64();

    let vocab = model.config().vocab();
    // A fixed, spread-out token sequence: the cost does not depend on the
    // ids, and the run is the same every time.
    let ids: Vec<u32> = (0..args.tokens)
        .map(|i| u32::try_from((i * 7919 + 13) % vocab).unwrap_or(0))
        .collect();

    // One untimed pass: first-touch allocation and the thread pool's start.
    model.logits(&ids)?;
    let mut times = Vec::with_capacity(args.repeat);
    for _ in 0..args.repeat {
        let t = Instant::now();
        model.logits(&ids)?;
        times.push(t.elapsed().as_secs_f64());
    }
    let forward_s = median(times);

    let mut decode_tokens_per_s = 0.0;
    if args.decode > 0 {
        let mut cache = model.new_cache();
        model.forward(&ids, &mut cache, Output::Last)?;
        let t = Instant::now();
        let mut next = ids[ids.len() - 1];
        for _ in 0..args.decode {
            let logits = model.forward(&[next], &mut cache, Output::Last)?;
            let row = logits.row(0);
            let best = (0..row.len())
                .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                .unwrap_or(0);
            next = u32::try_from(best)?;
        }
        decode_tokens_per_s = args.decode as f64 / t.elapsed().as_secs_f64();
    }

    Ok(serde_json::json!({
        "schema": "kolm.model-bench.v1",
        "model": path.display().to_string(),
        "tokens": args.tokens,
        "threads": candle_core::utils::get_num_threads(),
        "load_s": load_s,
        "forward_s": forward_s,
        "forward_tokens_per_s": args.tokens as f64 / forward_s,
        "decode_tokens": args.decode,
        "decode_tokens_per_s": decode_tokens_per_s,
    }))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(threads) = args.threads {
        match rerun_with_threads(threads) {
            Ok(Some(code)) => return code,
            Ok(None) => {}
            Err(e) => {
                eprintln!("kolm-model-bench: {e:#}");
                return ExitCode::from(2);
            }
        }
    }
    match run(&args) {
        // A closed stdout (a broken pipe) is a normal end, not a panic.
        Ok(report) if args.json => {
            let _ = writeln!(std::io::stdout(), "{report}");
            ExitCode::SUCCESS
        }
        Ok(r) => {
            let _ = writeln!(
                std::io::stdout(),
                "{}: {} tokens, {} threads: load {:.2} s; forward {:.3} s = {:.0} tokens/s; decode {:.1} tokens/s",
                r["model"].as_str().unwrap_or_default(),
                r["tokens"],
                r["threads"],
                r["load_s"].as_f64().unwrap_or_default(),
                r["forward_s"].as_f64().unwrap_or_default(),
                r["forward_tokens_per_s"].as_f64().unwrap_or_default(),
                r["decode_tokens_per_s"].as_f64().unwrap_or_default(),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kolm-model-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}
