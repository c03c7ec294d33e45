//! The vsock back end (`vsock://CID:PORT`): how an enclave or confidential
//! VM talks to its host. Only address handling is exercised by tests; no
//! test opens a vsock socket.

use std::io;
use std::net::Shutdown;
use std::time::Duration;

use vsock::{VsockAddr, VsockListener, VsockStream};

use super::{Listener, Stream, TransportError, VsockAddress, VsockCid};

/// A listening vsock socket.
#[derive(Debug)]
pub struct VsockSocketListener {
    listener: VsockListener,
    address: VsockAddress,
}

/// The kernel's socket address for `address`.
pub fn sockaddr(address: VsockAddress) -> VsockAddr {
    VsockAddr::new(address.raw_cid(), address.port())
}

/// A connection needs one peer: the CID `ANY` is refused (before any socket
/// is created).
pub fn check_connectable(address: &VsockAddress) -> Result<(), TransportError> {
    match address.cid {
        VsockCid::Any => Err(TransportError::ConnectToAny {
            address: address.to_string(),
        }),
        VsockCid::Id(_) => Ok(()),
    }
}

impl VsockSocketListener {
    /// Binds and listens on `address` (`ANY` listens on every local CID).
    pub fn bind(address: VsockAddress) -> Result<VsockSocketListener, TransportError> {
        let listener =
            VsockListener::bind(&sockaddr(address)).map_err(|error| TransportError::Listen {
                address: address.to_string(),
                error,
            })?;
        Ok(VsockSocketListener { listener, address })
    }
}

impl Listener for VsockSocketListener {
    fn accept(&self) -> Result<Box<dyn Stream>, TransportError> {
        let (stream, _) = self
            .listener
            .accept()
            .map_err(|error| TransportError::Accept {
                address: self.address.to_string(),
                error,
            })?;
        Ok(Box::new(stream))
    }
}

/// Connects to `address`, which must name one CID.
pub fn connect(address: VsockAddress) -> Result<VsockStream, TransportError> {
    check_connectable(&address)?;
    VsockStream::connect(&sockaddr(address)).map_err(|error| TransportError::Connect {
        address: address.to_string(),
        error,
    })
}

impl Stream for VsockStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        VsockStream::set_read_timeout(self, timeout)
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        VsockStream::set_write_timeout(self, timeout)
    }

    fn shutdown(&self) -> io::Result<()> {
        match VsockStream::shutdown(self, Shutdown::Both) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    //! Address handling only: nothing here creates a vsock socket.
    use super::*;
    use crate::{Address, AddressConnector};

    fn vsock_address(text: &str) -> VsockAddress {
        match Address::parse(text).unwrap() {
            Address::Vsock(v) => v,
            other => panic!("{text} parsed as {other:?}"),
        }
    }

    #[test]
    fn socket_addresses_carry_the_parsed_cid_and_port() {
        let any = sockaddr(vsock_address("vsock://ANY:5005"));
        assert_eq!(any.cid(), vsock::VMADDR_CID_ANY);
        assert_eq!(any.port(), 5005);
        let guest = sockaddr(vsock_address("vsock://16:7000"));
        assert_eq!(guest.cid(), 16);
        assert_eq!(guest.port(), 7000);
        let host = sockaddr(vsock_address("vsock://2:1"));
        assert_eq!(host.cid(), vsock::VMADDR_CID_HOST);
    }

    #[test]
    fn connecting_to_any_is_refused_before_a_socket_exists() {
        let any = vsock_address("vsock://ANY:5005");
        let err = check_connectable(&any).unwrap_err();
        assert!(
            matches!(&err, TransportError::ConnectToAny { address } if address == "vsock://ANY:5005")
        );
        let err = AddressConnector::new(Address::Vsock(any)).unwrap_err();
        assert!(err.to_string().contains("vsock://ANY:5005"), "{err}");
        // A named CID is connectable (checked without connecting).
        assert!(check_connectable(&vsock_address("vsock://3:5005")).is_ok());
        assert!(AddressConnector::new(Address::Vsock(vsock_address("vsock://3:5005"))).is_ok());
    }
}
