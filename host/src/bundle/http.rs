//! The HTTP GETs of `bundle fetch`: a blocking `ureq` client on rustls
//! (ring), with a time limit per request, a size limit per response, and
//! retries with backoff on 429 and 5xx (AMD KDS rate-limits).

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::FetchError;

/// Longest wait a server's `Retry-After` may ask for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// Largest CA bundle read.
const MAX_CA_FILE: u64 = 4 << 20;

/// How requests are made.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Whole-request limit (connect, send, answer, body).
    pub timeout: Duration,
    /// Retries after a 429 or 5xx answer.
    pub retries: u32,
    /// First pause before a retry; doubled each time (a `Retry-After`
    /// header takes precedence, up to 60 s).
    pub backoff: Duration,
    /// PEM file of the CAs trusted for https (`None`: no https).
    pub ca_file: Option<std::path::PathBuf>,
    /// Honour `HTTPS_PROXY` and friends (off for loopback test servers).
    pub env_proxy: bool,
}

/// A response's body and the headers asked for.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub url: String,
    pub body: Vec<u8>,
    headers: Vec<(String, String)>,
}

impl Fetched {
    /// A header's value (names compare case-insensitively).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Makes the GETs.
#[derive(Debug)]
pub struct Client {
    agent: ureq::Agent,
    opts: HttpOptions,
}

/// The CA certificates of a PEM file.
fn load_roots(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, FetchError> {
    let err = |reason: String| FetchError::Input {
        what: format!("CA file {}", path.display()),
        reason,
    };
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CA_FILE + 1).read_to_end(&mut pem))
        .map_err(|e| err(e.to_string()))?;
    if pem.len() as u64 > MAX_CA_FILE {
        return Err(err(format!("larger than {MAX_CA_FILE} bytes")));
    }
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let ureq::tls::PemItem::Certificate(c) = item.map_err(|e| err(e.to_string()))? {
            certs.push(c);
        }
    }
    if certs.is_empty() {
        return Err(err("holds no certificate".into()));
    }
    Ok(certs)
}

impl Client {
    /// A client with `opts`.
    pub fn new(opts: HttpOptions) -> Result<Client, FetchError> {
        use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
        let mut tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
        if let Some(path) = &opts.ca_file {
            tls = tls.root_certs(RootCerts::Specific(Arc::new(load_roots(path)?)));
        } else {
            // No trust anchors at all: an https URL fails to verify rather
            // than trusting some default set.
            tls = tls.root_certs(RootCerts::Specific(Arc::new(Vec::new())));
        }
        let proxy = if opts.env_proxy {
            ureq::Proxy::try_from_env()
        } else {
            None
        };
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(opts.timeout))
            .http_status_as_error(false)
            .proxy(proxy)
            .user_agent(concat!("kolm-host/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls.build())
            .build()
            .new_agent();
        Ok(Client { agent, opts })
    }

    /// GETs `url`: its body (at most `limit` bytes) and the headers named
    /// in `keep`, after up to [`HttpOptions::retries`] retries on 429 and
    /// 5xx. Any other status than 200 is an error naming it.
    pub fn get(&self, url: &str, limit: u64, keep: &[&'static str]) -> Result<Fetched, FetchError> {
        let mut attempt = 0u32;
        loop {
            let mut resp = self.agent.get(url).call().map_err(|e| self.error(url, e))?;
            let status = resp.status().as_u16();
            if status == 200 {
                let headers = keep
                    .iter()
                    .filter_map(|name| {
                        resp.headers()
                            .get(*name)
                            .map(|v| (name.to_string(), v.to_str().map(str::to_owned)))
                    })
                    .map(|(n, v)| {
                        v.map(|v| (n.clone(), v)).map_err(|_| FetchError::Header {
                            url: url.to_string(),
                            header: static_name(keep, &n),
                            reason: "not visible ASCII".into(),
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let body = resp
                    .body_mut()
                    .with_config()
                    .limit(limit)
                    .read_to_vec()
                    .map_err(|e| match e {
                        ureq::Error::BodyExceedsLimit(_) => FetchError::TooLarge {
                            url: url.to_string(),
                            limit,
                        },
                        other => self.error(url, other),
                    })?;
                return Ok(Fetched {
                    url: url.to_string(),
                    body,
                    headers,
                });
            }
            let retryable = status == 429 || (500..=599).contains(&status);
            if retryable && attempt < self.opts.retries {
                let pause = retry_after(&resp).unwrap_or_else(|| {
                    self.opts
                        .backoff
                        .saturating_mul(2u32.saturating_pow(attempt))
                });
                attempt = attempt.saturating_add(1);
                std::thread::sleep(pause.min(MAX_RETRY_AFTER));
                continue;
            }
            // The start of the body says why (KDS and PCS answer in text).
            let mut body = String::new();
            let _ = resp
                .body_mut()
                .as_reader()
                .take(200)
                .read_to_string(&mut body);
            let body = body.trim();
            return Err(FetchError::Status {
                url: url.to_string(),
                status,
                body: if body.is_empty() {
                    String::new()
                } else {
                    format!(": {body}")
                },
            });
        }
    }

    fn error(&self, url: &str, e: ureq::Error) -> FetchError {
        match e {
            ureq::Error::Timeout(_) => FetchError::Timeout {
                url: url.to_string(),
                after: self.opts.timeout,
            },
            ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => {
                FetchError::Timeout {
                    url: url.to_string(),
                    after: self.opts.timeout,
                }
            }
            other => FetchError::Network {
                url: url.to_string(),
                detail: other.to_string(),
            },
        }
    }
}

/// The `&'static` spelling of a header name from `keep`.
fn static_name(keep: &[&'static str], name: &str) -> &'static str {
    keep.iter()
        .find(|k| k.eq_ignore_ascii_case(name))
        .copied()
        .unwrap_or("(header)")
}

/// `Retry-After: SECONDS` (the date form is not used by KDS or PCS).
fn retry_after(resp: &ureq::http::Response<ureq::Body>) -> Option<Duration> {
    let v = resp.headers().get("retry-after")?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Decodes a percent-encoded header value (Intel PCS URL-encodes its
/// issuer-chain headers).
pub fn percent_decode(url: &str, header: &'static str, v: &str) -> Result<String, FetchError> {
    percent_encoding::percent_decode_str(v)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|e| FetchError::Header {
            url: url.to_string(),
            header,
            reason: format!("not percent-encoded UTF-8: {e}"),
        })
}

/// Whether every URL names a loopback host (a test server): no proxy.
pub fn all_loopback<'a>(urls: impl IntoIterator<Item = &'a str>) -> bool {
    urls.into_iter().all(|u| {
        let rest = u.split_once("://").map_or("", |(_, r)| r);
        let host = rest.split(['/', '?']).next().unwrap_or_default();
        let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
        matches!(host, "127.0.0.1" | "localhost" | "[::1]")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_recognised() {
        assert!(all_loopback([
            "http://127.0.0.1:4000",
            "http://localhost/x"
        ]));
        assert!(!all_loopback([
            "http://127.0.0.1:4000",
            "https://kdsintf.amd.com"
        ]));
        assert!(!all_loopback(["http://127.0.0.1.evil.example/"]));
    }

    #[test]
    fn percent_encoded_headers_decode() {
        assert_eq!(
            percent_decode("u", "H", "-----BEGIN%20CERTIFICATE-----%0AMII").unwrap(),
            "-----BEGIN CERTIFICATE-----\nMII"
        );
        let e = percent_decode("u", "H", "%FF").unwrap_err();
        assert_eq!(e.exit_code(), 1);
    }
}
