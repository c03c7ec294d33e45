//! kolm-transport: the connection between the host agent and the enclave
//! service, used by both (`kolm-host` never links the enclave): byte
//! streams over vsock, unix sockets or in-memory pipes ([`Stream`],
//! [`Listener`], [`Connector`]), length-prefixed frames ([`frame`]), and a
//! [`Channel`] that sends and receives the sealed-run protocol's messages
//! ([`wire`]: their one encoder and strict decoder, re-exported as
//! [`message`]) and closes the connection on the first protocol error. The enclave's
//! receiver of a job's declared inputs is `kolm_enclave::inputs`.
//!
//! Plain blocking I/O on std threads; no async runtime. Everything read from
//! the peer is untrusted: no byte sequence makes this crate panic or
//! allocate more than the frame limit. The wire format is described in
//! `docs/sealed-run.md`.
#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects
)]

pub mod address;
pub mod channel;
pub mod frame;
pub mod memory;
pub mod unix;
pub mod vsock;
pub mod wire;

/// The protocol's messages ([`wire::message`]): no auditor reads them, so
/// they live with the connection, not in `kolm-format`.
pub use wire::message;

use std::fmt;
use std::io::{self, Read, Write};
use std::time::Duration;

pub use address::{Address, AddressError, UnixAddress, VsockAddress, VsockCid};
pub use channel::{Channel, ChannelError};
pub use frame::{FrameError, FrameOptions, FrameOptionsError};
pub use message::{DecodeError, EncodeError, Message};

/// A connected, reliable, ordered byte stream (one back end's socket).
pub trait Stream: Read + Write + Send + fmt::Debug {
    /// How long one `read` may block; `None` blocks without limit. A read
    /// that runs out of time fails with `WouldBlock` or `TimedOut`. A zero
    /// duration is refused (`InvalidInput`), as sockets do.
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// How long one `write` may block, as [`Stream::set_read_timeout`].
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Closes both directions: the peer reads end-of-stream, and reads and
    /// writes on this side fail or end from now on.
    fn shutdown(&self) -> io::Result<()>;
}

impl<S: Stream + ?Sized> Stream for Box<S> {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_read_timeout(timeout)
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_write_timeout(timeout)
    }

    fn shutdown(&self) -> io::Result<()> {
        (**self).shutdown()
    }
}

/// The accepting side of a transport.
pub trait Listener: Send + fmt::Debug {
    /// Waits for the next connection.
    fn accept(&self) -> Result<Box<dyn Stream>, TransportError>;
}

/// The connecting side of a transport.
pub trait Connector: Send + fmt::Debug {
    /// Opens one connection to the listener.
    fn connect(&self) -> Result<Box<dyn Stream>, TransportError>;
}

/// Why a transport could not listen, accept or connect. The OS error is
/// part of each message and not a `source`: shown with anyhow's `{:#}`, a
/// source would print it a second time.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    #[error("cannot listen on {address}: {error}")]
    Listen { address: String, error: io::Error },
    #[error("cannot accept a connection on {address}: {error}")]
    Accept { address: String, error: io::Error },
    #[error("cannot connect to {address}: {error}")]
    Connect { address: String, error: io::Error },
    /// `vsock://ANY:PORT` names every local CID: a listener's address only.
    #[error("cannot connect to {address}: the CID ANY is for listening; name the peer's CID")]
    ConnectToAny { address: String },
    /// The other side of an in-memory transport is gone.
    #[error("in-memory {side} is closed")]
    MemoryClosed { side: &'static str },
}

/// Listens on `address` (`--listen`): a unix socket file, or a vsock port.
pub fn listen(address: &Address) -> Result<Box<dyn Listener>, TransportError> {
    Ok(match address {
        Address::Unix(u) => Box::new(unix::UnixSocketListener::bind(u)?),
        Address::Vsock(v) => Box::new(vsock::VsockSocketListener::bind(*v)?),
    })
}

/// A [`Connector`] for `address`; nothing is opened until
/// [`Connector::connect`].
#[derive(Debug, Clone)]
pub struct AddressConnector(Address);

impl AddressConnector {
    /// A connector to `address`. A vsock address with the CID `ANY` is
    /// refused here, before any socket exists.
    pub fn new(address: Address) -> Result<AddressConnector, TransportError> {
        if let Address::Vsock(v) = &address {
            vsock::check_connectable(v)?;
        }
        Ok(AddressConnector(address))
    }
}

impl Connector for AddressConnector {
    fn connect(&self) -> Result<Box<dyn Stream>, TransportError> {
        Ok(match &self.0 {
            Address::Unix(u) => Box::new(unix::connect(u)?),
            Address::Vsock(v) => Box::new(vsock::connect(*v)?),
        })
    }
}

/// Maps an I/O error of a read or write that ran out of time.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}
