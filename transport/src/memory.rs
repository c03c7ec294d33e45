//! The in-memory back end: a pair of bounded pipes between two threads of
//! one process, for tests and fuzzing. It behaves like a socket where it
//! matters to the protocol: reads return what is there (possibly less than
//! asked), end-of-stream after the peer closes, `WouldBlock` when a timeout
//! runs out; writes block while the peer's buffer is full and fail with
//! `BrokenPipe` once the peer is gone.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{Connector, Listener, Stream, TransportError};

/// Bytes a pipe holds before its writer blocks, unless chosen otherwise.
pub const DEFAULT_CAPACITY: usize = 256 * 1024;

#[derive(Debug, Default)]
struct PipeState {
    data: VecDeque<u8>,
    /// The reading end is gone or shut down: writes fail.
    reader_closed: bool,
    /// The writing end is gone or shut down: reads end once drained.
    writer_closed: bool,
}

/// One direction of a connection.
#[derive(Debug)]
struct Pipe {
    state: Mutex<PipeState>,
    changed: Condvar,
    capacity: usize,
}

impl Pipe {
    fn new(capacity: usize) -> Arc<Pipe> {
        Arc::new(Pipe {
            state: Mutex::new(PipeState::default()),
            changed: Condvar::new(),
            capacity: capacity.max(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, PipeState> {
        // A panic while holding the lock leaves the byte queue consistent
        // (every update is a single VecDeque call), so poisoning is ignored.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a change, at most until `deadline`; `false` when it passed.
    fn wait<'a>(
        &self,
        guard: MutexGuard<'a, PipeState>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, PipeState>, bool) {
        match deadline {
            None => (
                self.changed
                    .wait(guard)
                    .unwrap_or_else(PoisonError::into_inner),
                true,
            ),
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return (guard, false);
                }
                let (guard, _) = self
                    .changed
                    .wait_timeout(guard, left)
                    .unwrap_or_else(PoisonError::into_inner);
                (guard, true)
            }
        }
    }

    fn close_reader(&self) {
        self.lock().reader_closed = true;
        self.changed.notify_all();
    }

    fn close_writer(&self) {
        self.lock().writer_closed = true;
        self.changed.notify_all();
    }
}

/// One end of an in-memory connection.
#[derive(Debug)]
pub struct MemoryStream {
    incoming: Arc<Pipe>,
    outgoing: Arc<Pipe>,
    read_timeout: Mutex<Option<Duration>>,
    write_timeout: Mutex<Option<Duration>>,
}

/// Two connected ends, each direction buffering [`DEFAULT_CAPACITY`] bytes.
pub fn pipe() -> (MemoryStream, MemoryStream) {
    pipe_with_capacity(DEFAULT_CAPACITY)
}

/// Two connected ends, each direction buffering `capacity` bytes (at
/// least one).
pub fn pipe_with_capacity(capacity: usize) -> (MemoryStream, MemoryStream) {
    let a_to_b = Pipe::new(capacity);
    let b_to_a = Pipe::new(capacity);
    let end = |incoming: &Arc<Pipe>, outgoing: &Arc<Pipe>| MemoryStream {
        incoming: Arc::clone(incoming),
        outgoing: Arc::clone(outgoing),
        read_timeout: Mutex::new(None),
        write_timeout: Mutex::new(None),
    };
    (end(&b_to_a, &a_to_b), end(&a_to_b, &b_to_a))
}

fn deadline(timeout: &Mutex<Option<Duration>>) -> Option<Instant> {
    let t = *timeout.lock().unwrap_or_else(PoisonError::into_inner);
    t.and_then(|t| Instant::now().checked_add(t))
}

fn check_timeout(timeout: Option<Duration>) -> io::Result<()> {
    if timeout.is_some_and(|t| t.is_zero()) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a zero duration timeout",
        ));
    }
    Ok(())
}

impl Read for MemoryStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = deadline(&self.read_timeout);
        let pipe = &self.incoming;
        let mut state = pipe.lock();
        loop {
            if !state.data.is_empty() {
                let n = buf.len().min(state.data.len());
                for (slot, byte) in buf.iter_mut().zip(state.data.drain(..n)) {
                    *slot = byte;
                }
                pipe.changed.notify_all();
                return Ok(n);
            }
            if state.writer_closed || state.reader_closed {
                return Ok(0);
            }
            let (next, in_time) = pipe.wait(state, deadline);
            state = next;
            if !in_time {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }
}

impl Write for MemoryStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let deadline = deadline(&self.write_timeout);
        let pipe = &self.outgoing;
        let mut state = pipe.lock();
        loop {
            if state.reader_closed || state.writer_closed {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            let room = pipe.capacity.saturating_sub(state.data.len());
            if room > 0 {
                let n = room.min(buf.len());
                state.data.extend(buf.iter().take(n));
                pipe.changed.notify_all();
                return Ok(n);
            }
            let (next, in_time) = pipe.wait(state, deadline);
            state = next;
            if !in_time {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream for MemoryStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        *self
            .read_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = timeout;
        Ok(())
    }

    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        *self
            .write_timeout
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = timeout;
        Ok(())
    }

    fn shutdown(&self) -> io::Result<()> {
        self.outgoing.close_writer();
        self.incoming.close_reader();
        Ok(())
    }
}

impl Drop for MemoryStream {
    fn drop(&mut self) {
        self.outgoing.close_writer();
        self.incoming.close_reader();
    }
}

/// The accepting side of an in-memory transport.
#[derive(Debug)]
pub struct MemoryListener {
    incoming: Mutex<Receiver<MemoryStream>>,
}

/// The connecting side of an in-memory transport; clone it for more
/// clients.
#[derive(Debug, Clone)]
pub struct MemoryConnector {
    outgoing: Sender<MemoryStream>,
    capacity: usize,
}

/// A listener and a connector to it, pipes of [`DEFAULT_CAPACITY`].
pub fn listener() -> (MemoryListener, MemoryConnector) {
    let (outgoing, incoming) = channel();
    (
        MemoryListener {
            incoming: Mutex::new(incoming),
        },
        MemoryConnector {
            outgoing,
            capacity: DEFAULT_CAPACITY,
        },
    )
}

impl Listener for MemoryListener {
    fn accept(&self) -> Result<Box<dyn Stream>, TransportError> {
        let incoming = self.incoming.lock().unwrap_or_else(PoisonError::into_inner);
        match incoming.recv() {
            Ok(stream) => Ok(Box::new(stream)),
            Err(_) => Err(TransportError::MemoryClosed { side: "connector" }),
        }
    }
}

impl Connector for MemoryConnector {
    fn connect(&self) -> Result<Box<dyn Stream>, TransportError> {
        let (client, server) = pipe_with_capacity(self.capacity);
        self.outgoing
            .send(server)
            .map_err(|_| TransportError::MemoryClosed { side: "listener" })?;
        Ok(Box::new(client))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn bytes_flow_both_ways_in_order_through_a_small_buffer() {
        let (mut a, mut b) = pipe_with_capacity(7);
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            a.write_all(&sent).unwrap();
            let mut back = [0u8; 3];
            a.read_exact(&mut back).unwrap();
            back
        });
        let mut got = vec![0u8; data.len()];
        b.read_exact(&mut got).unwrap();
        assert_eq!(got, data);
        b.write_all(b"ack").unwrap();
        assert_eq!(&writer.join().unwrap(), b"ack");
    }

    #[test]
    fn closing_one_end_ends_reads_and_breaks_writes_on_the_other() {
        let (mut a, mut b) = pipe();
        a.write_all(b"last").unwrap();
        a.shutdown().unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"last", "buffered bytes are still delivered");
        let err = b.write_all(b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        drop(a);
    }

    #[test]
    fn timeouts_fail_reads_and_full_writes_and_zero_is_refused() {
        let (mut a, mut b) = pipe_with_capacity(2);
        b.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        assert_eq!(
            b.read(&mut [0u8; 1]).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        a.set_write_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        assert_eq!(
            a.write(b"abc").unwrap(),
            2,
            "a short write fills the buffer"
        );
        assert_eq!(a.write(b"c").unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            a.set_read_timeout(Some(Duration::ZERO)).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn listener_accepts_what_connectors_open_and_says_when_they_are_gone() {
        let (listener, connector) = listener();
        let mut client = connector.connect().unwrap();
        let mut server = listener.accept().unwrap();
        client.write_all(b"hi").unwrap();
        let mut got = [0u8; 2];
        server.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hi");
        drop(connector);
        assert!(matches!(
            listener.accept().unwrap_err(),
            TransportError::MemoryClosed { side: "connector" }
        ));
        let (listener, connector) = super::listener();
        drop(listener);
        assert!(matches!(
            connector.connect().unwrap_err(),
            TransportError::MemoryClosed { side: "listener" }
        ));
    }
}
