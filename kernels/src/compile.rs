//! Kernel sources and their run-time compilation by NVRTC.
//!
//! Every `.cu` file under `kernels/cu/` is embedded with `include_str!` and
//! compiled, with the shared prelude in front, for the architecture of the
//! device in hand. Compiled PTX is cached under the sha256 of everything that
//! determines it: the full source text, the option list and the NVRTC
//! version. The cache lives in memory; an on-disk directory can be added with
//! [`Compiler::with_disk_cache`], and must then be as trusted as the binary,
//! since what it holds is loaded as code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};

use crate::KernelError;

/// The prelude every source is compiled with (bf16 bit casts, reductions).
pub const PRELUDE: &str = include_str!("../cu/prelude.cu");

/// One embedded CUDA C source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelSource {
    /// File name under `kernels/cu/`, without `.cu`.
    pub name: &'static str,
    /// The file's text.
    pub body: &'static str,
    /// Text appended after the body: the instantiations of a templated
    /// source, when one file serves several modules.
    pub tail: &'static str,
    /// Uses Hopper's architecture-specific instructions (`wgmma`): compiled
    /// for `compute_90a`, whose PTX loads only on a compute capability 9.0
    /// device. The wrappers launch such a module only there.
    pub sm90a: bool,
}

macro_rules! source {
    ($name:literal) => {
        KernelSource {
            name: $name,
            body: include_str!(concat!("../cu/", $name, ".cu")),
            tail: "",
            sm90a: false,
        }
    };
}

/// RMSNorm forward and backward, and the chunked column sum.
pub const NORM: KernelSource = source!("norm");
/// SiLU, SwiGLU, RoPE.
pub const ELEMENTWISE: KernelSource = source!("elementwise");
/// Cross-entropy with argmax.
pub const XENT: KernelSource = source!("xent");
/// Embedding lookup and backward.
pub const EMBEDDING: KernelSource = source!("embedding");
/// AdamW, gradient norm, clipping.
pub const OPTIM: KernelSource = source!("optim");
/// Flash-style causal GQA attention, head dimension 64.
pub const ATTENTION_D64: KernelSource = KernelSource {
    name: "attention_d64",
    body: include_str!("../cu/attention.cu"),
    tail: "KOLM_ATTN(f32, float, 64)\nKOLM_ATTN(bf16, bf16_t, 64)\n",
    sm90a: false,
};
/// The same for head dimension 128.
pub const ATTENTION_D128: KernelSource = KernelSource {
    name: "attention_d128",
    body: include_str!("../cu/attention.cu"),
    tail: "KOLM_ATTN(f32, float, 128)\nKOLM_ATTN(bf16, bf16_t, 128)\n",
    sm90a: false,
};

/// Attention on the tensor cores: bf16, head dimension 64.
pub const ATTENTION_TC: KernelSource = source!("attention_tc");
/// The residual stream's in-place add.
pub const RESIDUAL: KernelSource = source!("residual");

/// Attention on Hopper's warpgroup tensor-core instructions (`wgmma`,
/// sm_90a only): bf16, head dimension 64. The shared `wgmma` helpers come
/// first, then the forward and the backward.
pub const ATTENTION_WG: KernelSource = KernelSource {
    name: "attention_wg",
    body: concat!(
        include_str!("../cu/wgmma.cu"),
        include_str!("../cu/attention_wg_fwd.cu"),
        include_str!("../cu/attention_wg_bwd.cu"),
    ),
    tail: "",
    sm90a: true,
};

/// Every kernel module, for the compile check and for warming the cache.
pub const SOURCES: [KernelSource; 10] = [
    NORM,
    ELEMENTWISE,
    XENT,
    EMBEDDING,
    OPTIM,
    ATTENTION_D64,
    ATTENTION_D128,
    ATTENTION_TC,
    RESIDUAL,
    ATTENTION_WG,
];

impl KernelSource {
    /// The text NVRTC compiles: the prelude, then the body with its own line
    /// numbers, so compile errors point into the right file.
    pub fn full_text(&self) -> String {
        format!(
            "{PRELUDE}\n#line 1 \"{}.cu\"\n{}\n{}",
            self.name, self.body, self.tail
        )
    }
}

/// NVRTC options for a compute capability: a virtual architecture, so the
/// PTX also loads on a newer device, and C++17.
pub fn options_for(major: i32, minor: i32) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{major}{minor}"),
        "--std=c++17".to_owned(),
    ]
}

/// The options `source` compiles with on a device of compute capability
/// `(major, minor)`: [`options_for`], except that an `sm90a` source is
/// compiled for `compute_90a` (and only on a 9.0 device).
pub fn options_for_source(
    source: &KernelSource,
    major: i32,
    minor: i32,
) -> Result<Vec<String>, KernelError> {
    if !source.sm90a {
        return Ok(options_for(major, minor));
    }
    if (major, minor) != (9, 0) {
        return Err(KernelError::Unsupported {
            op: "compile",
            what: format!(
                "module `{}` needs sm_90a (Hopper), the device is sm_{major}{minor}",
                source.name
            ),
        });
    }
    let mut o = options_for(9, 0);
    o[0] = "--gpu-architecture=compute_90a".to_owned();
    Ok(o)
}

/// The cache key: sha256 over source, options and NVRTC version, each
/// length-prefixed so no two different inputs hash the same byte string.
pub fn cache_key(source: &str, options: &[String], nvrtc_version: (i32, i32)) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(source.as_bytes());
    for o in options {
        field(o.as_bytes());
    }
    field(format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes());
    h.finalize().into()
}

fn hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether libnvrtc can be loaded by this process.
pub fn nvrtc_available() -> bool {
    crate::ffi::nvrtc_present()
}

/// The loaded NVRTC's `(major, minor)` version.
pub fn nvrtc_version() -> Result<(i32, i32), KernelError> {
    if !nvrtc_available() {
        return Err(KernelError::LibraryMissing { library: "nvrtc" });
    }
    crate::ffi::nvrtc_version()
}

/// PTX compiled by this process, shared by every [`Compiler`]: a second
/// [`crate::Gpu`] in the same process compiles nothing again.
static MEMORY: OnceLock<Mutex<HashMap<[u8; 32], Arc<str>>>> = OnceLock::new();

/// Compiles kernel sources with NVRTC, caching by [`cache_key`].
#[derive(Debug, Default)]
pub struct Compiler {
    disk: Option<PathBuf>,
}

impl Compiler {
    /// A compiler with an in-memory cache only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also keep PTX in `dir` (created if missing) as `<sha256>.ptx`. The
    /// directory must be as trusted as the binary: its files become code.
    pub fn with_disk_cache(dir: &Path) -> Result<Self, KernelError> {
        std::fs::create_dir_all(dir).map_err(|source| KernelError::Cache {
            path: dir.to_owned(),
            source,
        })?;
        Ok(Self {
            disk: Some(dir.to_owned()),
        })
    }

    /// PTX for `source` under `options`, from a cache or freshly compiled.
    pub fn ptx(&self, source: &KernelSource, options: &[String]) -> Result<Arc<str>, KernelError> {
        let text = source.full_text();
        let key = cache_key(&text, options, nvrtc_version()?);
        if let Some(ptx) = self.memory_get(&key) {
            return Ok(ptx);
        }
        let file = self
            .disk
            .as_ref()
            .map(|d| d.join(format!("{}.ptx", hex(&key))));
        if let Some(path) = &file
            && let Ok(ptx) = std::fs::read_to_string(path)
        {
            let ptx: Arc<str> = ptx.into();
            self.memory_put(key, ptx.clone());
            return Ok(ptx);
        }
        let ptx: Arc<str> = compile_ptx(source.name, &text, options)?.into();
        if let Some(path) = file {
            // Write then rename, so a reader never sees half a file.
            let tmp = path.with_extension("ptx.tmp");
            std::fs::write(&tmp, ptx.as_bytes())
                .and_then(|()| std::fs::rename(&tmp, &path))
                .map_err(|source| KernelError::Cache { path, source })?;
        }
        self.memory_put(key, ptx.clone());
        Ok(ptx)
    }

    fn memory_get(&self, key: &[u8; 32]) -> Option<Arc<str>> {
        // A poisoned lock only means another thread panicked mid-insert; the
        // map itself is still a valid cache.
        let map = MEMORY
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.get(key).cloned()
    }

    fn memory_put(&self, key: [u8; 32], ptx: Arc<str>) {
        let mut map = MEMORY
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.insert(key, ptx);
    }
}

/// Compiles one full source text to PTX, uncached.
pub fn compile_ptx(
    name: &'static str,
    text: &str,
    options: &[String],
) -> Result<String, KernelError> {
    if !nvrtc_available() {
        return Err(KernelError::LibraryMissing { library: "nvrtc" });
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: options.to_vec(),
        name: Some(format!("{name}.cu")),
        ..Default::default()
    };
    cudarc::nvrtc::compile_ptx_with_opts(text, opts)
        .map(|ptx| ptx.to_src())
        .map_err(|e| KernelError::Compile {
            source_name: name,
            options: options.to_vec(),
            log: match e {
                cudarc::nvrtc::CompileError::CompileError { nvrtc, log, .. } => {
                    format!("{nvrtc:?}\n{}", log.to_string_lossy())
                }
                other => format!("{other:?}"),
            },
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sm90a_sources_compile_for_compute_90a_on_hopper_only() {
        let o = options_for_source(&ATTENTION_WG, 9, 0).unwrap();
        assert_eq!(o[0], "--gpu-architecture=compute_90a");
        assert_eq!(&o[1..], &options_for(9, 0)[1..]);
        for (major, minor) in [(8, 0), (8, 9), (10, 0)] {
            let e = options_for_source(&ATTENTION_WG, major, minor).unwrap_err();
            assert!(e.to_string().contains("needs sm_90a"), "{e}");
        }
        // Every other source compiles for the device's own architecture.
        for s in SOURCES.iter().filter(|s| !s.sm90a) {
            assert_eq!(options_for_source(s, 8, 0).unwrap(), options_for(8, 0));
        }
        assert_eq!(SOURCES.iter().filter(|s| s.sm90a).count(), 1);
    }

    #[test]
    fn cache_key_covers_source_options_and_version() {
        let o = options_for(9, 0);
        let k = cache_key("a", &o, (13, 0));
        assert_ne!(k, cache_key("b", &o, (13, 0)));
        assert_ne!(k, cache_key("a", &options_for(8, 0), (13, 0)));
        assert_ne!(k, cache_key("a", &o, (13, 1)));
        // Length prefixes: moving a byte between fields changes the key.
        let ab = cache_key("ab", &["c".to_owned()], (13, 0));
        let a_bc = cache_key("a", &["bc".to_owned()], (13, 0));
        assert_ne!(ab, a_bc);
    }

    #[test]
    fn every_source_is_header_free() {
        for s in SOURCES.iter().map(|s| s.full_text()) {
            assert!(
                !s.contains("#include"),
                "kernels must compile without CUDA headers"
            );
        }
    }
}
