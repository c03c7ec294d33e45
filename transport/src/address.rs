//! Transport addresses as written on a command line (`--listen`):
//! `vsock://CID:PORT`, `vsock://ANY:PORT` and `unix:PATH`.
//!
//! [`Address::parse`] accepts exactly one spelling of each address, so
//! [`Address`]'s `Display` form parses back to the same value.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// `sun_path` holds 108 bytes on Linux, the terminating NUL included.
pub const UNIX_PATH_MAX: usize = 107;

/// The vsock CID that means "any local CID" (`VMADDR_CID_ANY`); valid only
/// for listening.
const VSOCK_CID_ANY: u32 = u32::MAX;

/// The vsock port that means "any port" (`VMADDR_PORT_ANY`): never accepted,
/// a service must name its port.
const VSOCK_PORT_ANY: u32 = u32::MAX;

/// Where a transport listens or connects.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Address {
    /// An `AF_VSOCK` socket (`vsock://CID:PORT`).
    Vsock(VsockAddress),
    /// A unix stream socket at a path (`unix:PATH`).
    Unix(UnixAddress),
}

/// A vsock context id and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VsockAddress {
    /// The context id.
    pub cid: VsockCid,
    /// The port (never `VMADDR_PORT_ANY`).
    port: u32,
}

/// A vsock context id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VsockCid {
    /// `ANY`: every CID of this machine (`VMADDR_CID_ANY`); listen only.
    Any,
    /// One context id (2 is the host; guests have 3 and up).
    Id(u32),
}

/// A unix socket path: non-empty, no NUL byte, at most [`UNIX_PATH_MAX`]
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UnixAddress(PathBuf);

/// Why an address does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddressError {
    #[error(
        "address {address:?}: unknown scheme (expected `vsock://CID:PORT`, `vsock://ANY:PORT` or `unix:PATH`)"
    )]
    UnknownScheme { address: String },
    #[error("address {address:?}: expected `vsock://CID:PORT` with both parts")]
    VsockShape { address: String },
    #[error("address {address:?}: CID {cid:?} is not `ANY` or a decimal number below 4294967295")]
    VsockCid { address: String, cid: String },
    #[error("address {address:?}: port {port:?} is not a decimal number below 4294967295")]
    VsockPort { address: String, port: String },
    #[error("address {address:?}: empty socket path")]
    UnixEmpty { address: String },
    #[error("address {address:?}: socket path has {len} bytes, at most {UNIX_PATH_MAX} fit")]
    UnixTooLong { address: String, len: usize },
    #[error("address {address:?}: socket path contains a NUL byte")]
    UnixNul { address: String },
}

impl Address {
    /// Parses `vsock://CID:PORT`, `vsock://ANY:PORT` or `unix:PATH`.
    ///
    /// CIDs and ports are canonical decimal numbers (no sign, no leading
    /// zero), below `u32::MAX` (which the kernel reads as "any").
    pub fn parse(s: &str) -> Result<Address, AddressError> {
        if let Some(rest) = s.strip_prefix("vsock://") {
            let shape = || AddressError::VsockShape {
                address: s.to_owned(),
            };
            let (cid, port) = rest.split_once(':').ok_or_else(shape)?;
            if cid.is_empty() || port.is_empty() {
                return Err(shape());
            }
            let cid = match cid {
                "ANY" => VsockCid::Any,
                digits => match canonical_u32(digits) {
                    Some(n) if n != VSOCK_CID_ANY => VsockCid::Id(n),
                    _ => {
                        return Err(AddressError::VsockCid {
                            address: s.to_owned(),
                            cid: digits.to_owned(),
                        });
                    }
                },
            };
            let port = match canonical_u32(port) {
                Some(n) if n != VSOCK_PORT_ANY => n,
                _ => {
                    return Err(AddressError::VsockPort {
                        address: s.to_owned(),
                        port: port.to_owned(),
                    });
                }
            };
            Ok(Address::Vsock(VsockAddress { cid, port }))
        } else if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(AddressError::UnixEmpty {
                    address: s.to_owned(),
                });
            }
            if path.contains('\0') {
                return Err(AddressError::UnixNul {
                    address: s.to_owned(),
                });
            }
            if path.len() > UNIX_PATH_MAX {
                return Err(AddressError::UnixTooLong {
                    address: s.to_owned(),
                    len: path.len(),
                });
            }
            Ok(Address::Unix(UnixAddress(PathBuf::from(path))))
        } else {
            Err(AddressError::UnknownScheme {
                address: s.to_owned(),
            })
        }
    }
}

/// A decimal `u32` in its one canonical spelling ("0", "5005"; not "+5",
/// "05" or " 5").
fn canonical_u32(s: &str) -> Option<u32> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

impl VsockAddress {
    /// An address from its parts; `None` for the port `VMADDR_PORT_ANY`
    /// or the CID `VMADDR_CID_ANY` spelled as a number.
    pub fn new(cid: VsockCid, port: u32) -> Option<VsockAddress> {
        let cid_ok = !matches!(cid, VsockCid::Id(VSOCK_CID_ANY));
        (cid_ok && port != VSOCK_PORT_ANY).then_some(VsockAddress { cid, port })
    }

    /// The port.
    pub fn port(&self) -> u32 {
        self.port
    }

    /// The CID as the kernel takes it (`VMADDR_CID_ANY` for [`VsockCid::Any`]).
    pub fn raw_cid(&self) -> u32 {
        match self.cid {
            VsockCid::Any => VSOCK_CID_ANY,
            VsockCid::Id(n) => n,
        }
    }
}

impl UnixAddress {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl FromStr for Address {
    type Err = AddressError;

    fn from_str(s: &str) -> Result<Address, AddressError> {
        Address::parse(s)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Vsock(v) => v.fmt(f),
            Address::Unix(u) => write!(f, "unix:{}", u.0.display()),
        }
    }
}

impl fmt::Display for VsockAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cid {
            VsockCid::Any => write!(f, "vsock://ANY:{}", self.port),
            VsockCid::Id(n) => write!(f, "vsock://{n}:{}", self.port),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_form_and_prints_it_back() {
        for (text, want) in [
            (
                "vsock://ANY:5005",
                Address::Vsock(VsockAddress {
                    cid: VsockCid::Any,
                    port: 5005,
                }),
            ),
            (
                "vsock://3:5005",
                Address::Vsock(VsockAddress {
                    cid: VsockCid::Id(3),
                    port: 5005,
                }),
            ),
            (
                "vsock://0:0",
                Address::Vsock(VsockAddress {
                    cid: VsockCid::Id(0),
                    port: 0,
                }),
            ),
            (
                "vsock://4294967294:4294967294",
                Address::Vsock(VsockAddress {
                    cid: VsockCid::Id(u32::MAX - 1),
                    port: u32::MAX - 1,
                }),
            ),
            (
                "unix:/run/kolm.sock",
                Address::Unix(UnixAddress("/run/kolm.sock".into())),
            ),
            (
                "unix:rel/k.sock",
                Address::Unix(UnixAddress("rel/k.sock".into())),
            ),
        ] {
            let got = Address::parse(text).unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), text);
            assert_eq!(text.parse::<Address>().unwrap(), want);
        }
    }

    #[test]
    fn raw_cid_is_what_the_kernel_takes() {
        let Address::Vsock(any) = Address::parse("vsock://ANY:7").unwrap() else {
            panic!("not vsock")
        };
        assert_eq!(any.raw_cid(), vsock::VMADDR_CID_ANY);
        assert_eq!(any.port(), 7);
        let Address::Vsock(host) = Address::parse("vsock://2:9").unwrap() else {
            panic!("not vsock")
        };
        assert_eq!(host.raw_cid(), vsock::VMADDR_CID_HOST);
        assert_eq!(VsockAddress::new(VsockCid::Id(u32::MAX), 1), None);
        assert_eq!(VsockAddress::new(VsockCid::Any, u32::MAX), None);
        assert_eq!(
            VsockAddress::new(VsockCid::Any, 7),
            Some(any),
            "the parts build the parsed address"
        );
    }

    #[test]
    fn refuses_every_other_spelling_naming_the_part() {
        type Check = fn(&AddressError) -> bool;
        let cases: [(&str, Check); 16] = [
            ("", |e| matches!(e, AddressError::UnknownScheme { .. })),
            ("tcp://1.2.3.4:5", |e| {
                matches!(e, AddressError::UnknownScheme { .. })
            }),
            ("VSOCK://ANY:1", |e| {
                matches!(e, AddressError::UnknownScheme { .. })
            }),
            ("vsock://ANY", |e| {
                matches!(e, AddressError::VsockShape { .. })
            }),
            ("vsock://:5", |e| {
                matches!(e, AddressError::VsockShape { .. })
            }),
            ("vsock://3:", |e| {
                matches!(e, AddressError::VsockShape { .. })
            }),
            ("vsock://any:5", |e| {
                matches!(e, AddressError::VsockCid { .. })
            }),
            ("vsock://03:5", |e| {
                matches!(e, AddressError::VsockCid { .. })
            }),
            ("vsock://+3:5", |e| {
                matches!(e, AddressError::VsockCid { .. })
            }),
            ("vsock://4294967295:5", |e| {
                matches!(e, AddressError::VsockCid { .. })
            }),
            ("vsock://4294967296:5", |e| {
                matches!(e, AddressError::VsockCid { .. })
            }),
            ("vsock://3:5:6", |e| {
                matches!(e, AddressError::VsockPort { .. })
            }),
            ("vsock://3:4294967295", |e| {
                matches!(e, AddressError::VsockPort { .. })
            }),
            ("vsock://3: 5", |e| {
                matches!(e, AddressError::VsockPort { .. })
            }),
            ("unix:", |e| matches!(e, AddressError::UnixEmpty { .. })),
            ("unix:a\0b", |e| matches!(e, AddressError::UnixNul { .. })),
        ];
        for (text, is_expected) in cases {
            let err = Address::parse(text).unwrap_err();
            assert!(is_expected(&err), "{text:?}: {err:?}");
            assert!(err.to_string().contains(&format!("{text:?}")), "{err}");
        }
        let long = format!("unix:/{}", "a".repeat(UNIX_PATH_MAX));
        assert_eq!(
            Address::parse(&long),
            Err(AddressError::UnixTooLong {
                address: long.clone(),
                len: UNIX_PATH_MAX + 1
            })
        );
        let fits = format!("unix:/{}", "a".repeat(UNIX_PATH_MAX - 1));
        assert!(Address::parse(&fits).is_ok());
    }
}
