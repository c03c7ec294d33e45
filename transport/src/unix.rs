//! The unix-socket back end (`unix:PATH`): what the local launcher and the
//! tests use.

use std::io;
use std::net::Shutdown;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use super::{Listener, Stream, TransportError, UnixAddress};

/// A listening unix socket. The socket file is created by [`bind`] and
/// removed again when the listener is dropped (only if it is still the same
/// file).
///
/// [`bind`]: UnixSocketListener::bind
#[derive(Debug)]
pub struct UnixSocketListener {
    listener: UnixListener,
    path: PathBuf,
    /// `(st_dev, st_ino)` of the socket file this listener created.
    identity: (u64, u64),
}

impl UnixSocketListener {
    /// Creates the socket file and listens on it. An existing file at the
    /// path (a stale socket included) is never replaced: `AddrInUse`.
    pub fn bind(address: &UnixAddress) -> Result<UnixSocketListener, TransportError> {
        let err = |error| TransportError::Listen {
            address: format!("unix:{}", address.path().display()),
            error,
        };
        let listener = UnixListener::bind(address.path()).map_err(err)?;
        let meta = std::fs::symlink_metadata(address.path()).map_err(err)?;
        Ok(UnixSocketListener {
            listener,
            path: address.path().to_owned(),
            identity: (meta.dev(), meta.ino()),
        })
    }
}

impl Listener for UnixSocketListener {
    fn accept(&self) -> Result<Box<dyn Stream>, TransportError> {
        let (stream, _) = self
            .listener
            .accept()
            .map_err(|error| TransportError::Accept {
                address: format!("unix:{}", self.path.display()),
                error,
            })?;
        Ok(Box::new(stream))
    }
}

impl Drop for UnixSocketListener {
    fn drop(&mut self) {
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && meta.file_type().is_socket()
            && (meta.dev(), meta.ino()) == self.identity
        {
            // Nothing to report to: a leftover socket file is refused by the
            // next bind with a clear error.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Connects to the unix socket at `address`.
pub fn connect(address: &UnixAddress) -> Result<UnixStream, TransportError> {
    UnixStream::connect(address.path()).map_err(|error| TransportError::Connect {
        address: format!("unix:{}", address.path().display()),
        error,
    })
}

impl Stream for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, timeout)
    }

    fn shutdown(&self) -> io::Result<()> {
        match UnixStream::shutdown(self, Shutdown::Both) {
            // Already closed by the peer: nothing left to close.
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::{Read, Write};

    use super::*;
    use crate::{Address, AddressConnector, Connector, listen};

    fn socket_address(dir: &tempfile::TempDir) -> Address {
        Address::parse(&format!("unix:{}", dir.path().join("k.sock").display())).unwrap()
    }

    #[test]
    fn connects_both_ways_and_removes_its_socket_file() {
        let dir = tempfile::tempdir().unwrap();
        let address = socket_address(&dir);
        let listener = listen(&address).unwrap();
        let connector = AddressConnector::new(address.clone()).unwrap();
        let mut client = connector.connect().unwrap();
        let mut server = listener.accept().unwrap();
        client.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        server.shutdown().unwrap();
        assert_eq!(client.read(&mut got).unwrap(), 0, "peer shut down: EOF");
        drop(listener);
        assert!(!dir.path().join("k.sock").exists());
    }

    #[test]
    fn never_replaces_an_existing_file_and_names_the_address() {
        let dir = tempfile::tempdir().unwrap();
        let address = socket_address(&dir);
        std::fs::write(dir.path().join("k.sock"), b"not a socket").unwrap();
        let err = listen(&address).unwrap_err();
        assert!(
            matches!(&err, TransportError::Listen { error, .. } if error.kind() == io::ErrorKind::AddrInUse),
            "{err:?}"
        );
        assert!(err.to_string().contains(&address.to_string()), "{err}");
        assert_eq!(
            std::fs::read(dir.path().join("k.sock")).unwrap(),
            b"not a socket"
        );
    }

    #[test]
    fn connecting_to_nothing_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = AddressConnector::new(socket_address(&dir))
            .unwrap()
            .connect()
            .unwrap_err();
        assert!(matches!(err, TransportError::Connect { .. }), "{err:?}");
    }

    #[test]
    fn read_timeout_fails_the_read_instead_of_blocking() {
        let (a, mut b) = UnixStream::pair().unwrap();
        Stream::set_read_timeout(&b, Some(Duration::from_millis(20))).unwrap();
        let err = b.read(&mut [0u8; 1]).unwrap_err();
        assert!(crate::is_timeout(&err), "{err:?}");
        drop(a);
    }
}
