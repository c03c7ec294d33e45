//! Frames: a 4-byte big-endian length, then that many bytes of payload (one
//! CBOR message). A length above the configured maximum is refused before
//! any of the payload is read, and the payload buffer grows only as bytes
//! actually arrive, so a lying length costs nothing.

use std::io;
use std::time::{Duration, Instant};

use super::{Stream, is_timeout};

/// The default largest payload: 64 MiB.
pub const DEFAULT_MAX_FRAME: u32 = 64 * 1024 * 1024;

pub use crate::wire::message::MIN_MAX_FRAME;

/// Bytes of the length prefix.
pub const LENGTH_PREFIX: usize = 4;

/// The payload grows by at most this much per read.
const READ_STEP: usize = 64 * 1024;

/// Limits and timeouts of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameOptions {
    max_frame: u32,
    idle_timeout: Option<Duration>,
    frame_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

/// Why a [`FrameOptions`] setting is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameOptionsError {
    #[error("maximum frame size {max} is below the smallest allowed, {MIN_MAX_FRAME} bytes")]
    MaxFrameTooSmall { max: u32 },
    #[error("{which} timeout of zero: leave it unset to wait without limit")]
    ZeroTimeout { which: &'static str },
}

impl Default for FrameOptions {
    /// 64 MiB frames; no timeouts.
    fn default() -> FrameOptions {
        FrameOptions {
            max_frame: DEFAULT_MAX_FRAME,
            idle_timeout: None,
            frame_timeout: None,
            write_timeout: None,
        }
    }
}

fn non_zero(which: &'static str, t: Option<Duration>) -> Result<(), FrameOptionsError> {
    match t {
        Some(t) if t.is_zero() => Err(FrameOptionsError::ZeroTimeout { which }),
        _ => Ok(()),
    }
}

impl FrameOptions {
    /// The largest payload, at least [`MIN_MAX_FRAME`].
    pub fn with_max_frame(self, max: u32) -> Result<FrameOptions, FrameOptionsError> {
        if max < MIN_MAX_FRAME {
            return Err(FrameOptionsError::MaxFrameTooSmall { max });
        }
        Ok(FrameOptions {
            max_frame: max,
            ..self
        })
    }

    /// How long to wait for the first byte of the next frame (`None`: no
    /// limit).
    pub fn with_idle_timeout(self, t: Option<Duration>) -> Result<FrameOptions, FrameOptionsError> {
        non_zero("idle", t)?;
        Ok(FrameOptions {
            idle_timeout: t,
            ..self
        })
    }

    /// How long a frame may take from its first byte to its last (`None`:
    /// no limit). Guards against a peer that starts a frame and stalls.
    pub fn with_frame_timeout(
        self,
        t: Option<Duration>,
    ) -> Result<FrameOptions, FrameOptionsError> {
        non_zero("frame", t)?;
        Ok(FrameOptions {
            frame_timeout: t,
            ..self
        })
    }

    /// How long one write may block on a peer that does not read.
    pub fn with_write_timeout(
        self,
        t: Option<Duration>,
    ) -> Result<FrameOptions, FrameOptionsError> {
        non_zero("write", t)?;
        Ok(FrameOptions {
            write_timeout: t,
            ..self
        })
    }

    /// The largest payload.
    pub fn max_frame(&self) -> u32 {
        self.max_frame
    }

    /// The idle timeout.
    pub fn idle_timeout(&self) -> Option<Duration> {
        self.idle_timeout
    }

    /// The frame timeout.
    pub fn frame_timeout(&self) -> Option<Duration> {
        self.frame_timeout
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> Option<Duration> {
        self.write_timeout
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge { len: u64, max: u32 },
    #[error("connection closed after {got} of the {LENGTH_PREFIX} length bytes")]
    TruncatedPrefix { got: usize },
    #[error("connection closed after {got} of a frame's {len} payload bytes")]
    TruncatedPayload { len: u32, got: usize },
    #[error("no frame began within the idle timeout of {timeout:?}")]
    IdleTimeout { timeout: Duration },
    #[error("frame not complete within {timeout:?} ({got} bytes received)")]
    FrameTimeout { timeout: Duration, got: usize },
    #[error("write blocked longer than {timeout:?}")]
    WriteTimeout { timeout: Duration },
    /// The OS error is in the message, not a `source` (a printed chain
    /// would repeat it).
    #[error("I/O error on the connection: {0}")]
    Io(io::Error),
}

/// When the current read must be done by.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    Idle(Option<Instant>),
    Frame(Option<Instant>),
}

/// One `read` into `buf` that honours the deadline; `Ok(0)` is end of
/// stream. `got` counts the frame's bytes so far, for the error.
fn read_by<S: Stream + ?Sized>(
    s: &mut S,
    buf: &mut [u8],
    deadline: Deadline,
    opts: &FrameOptions,
    got: usize,
) -> Result<usize, FrameError> {
    let (at, err) = match deadline {
        Deadline::Idle(at) => (
            at,
            opts.idle_timeout
                .map(|timeout| FrameError::IdleTimeout { timeout }),
        ),
        Deadline::Frame(at) => (
            at,
            opts.frame_timeout
                .map(|timeout| FrameError::FrameTimeout { timeout, got }),
        ),
    };
    loop {
        let timeout = match at {
            None => None,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(err.unwrap_or(FrameError::Io(io::ErrorKind::TimedOut.into())));
                }
                Some(left)
            }
        };
        s.set_read_timeout(timeout).map_err(FrameError::Io)?;
        match s.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) && at.is_some() => {
                // Let the deadline check above decide: a socket may wake a
                // little early.
                continue;
            }
            Err(e) => return Err(FrameError::Io(e)),
        }
    }
}

/// Reads one frame's payload. `Ok(None)`: the peer closed the connection
/// cleanly between frames.
pub fn read_frame<S: Stream + ?Sized>(
    s: &mut S,
    opts: &FrameOptions,
) -> Result<Option<Vec<u8>>, FrameError> {
    let idle = Deadline::Idle(
        opts.idle_timeout
            .and_then(|t| Instant::now().checked_add(t)),
    );
    let mut prefix = [0u8; LENGTH_PREFIX];
    let mut got = 0usize;
    let mut deadline = idle;
    while let Some(rest) = prefix.get_mut(got..).filter(|r| !r.is_empty()) {
        let n = read_by(s, rest, deadline, opts, got)?;
        if n == 0 {
            return if got == 0 {
                Ok(None)
            } else {
                Err(FrameError::TruncatedPrefix { got })
            };
        }
        if got == 0 {
            deadline = Deadline::Frame(
                opts.frame_timeout
                    .and_then(|t| Instant::now().checked_add(t)),
            );
        }
        got = got.saturating_add(n);
    }
    let len = u32::from_be_bytes(prefix);
    if len > opts.max_frame {
        return Err(FrameError::TooLarge {
            len: u64::from(len),
            max: opts.max_frame,
        });
    }
    // `len <= max_frame`, a u32: it fits a usize on every target kolm builds for.
    let want = usize::try_from(len).map_err(|_| FrameError::TooLarge {
        len: u64::from(len),
        max: opts.max_frame,
    })?;
    let mut payload = Vec::new();
    while payload.len() < want {
        let have = payload.len();
        let step = want.saturating_sub(have).min(READ_STEP);
        payload.resize(have.saturating_add(step), 0);
        let dest = payload.get_mut(have..).unwrap_or_default();
        let n = read_by(s, dest, deadline, opts, LENGTH_PREFIX.saturating_add(have))?;
        payload.truncate(have.saturating_add(n));
        if n == 0 {
            return Err(FrameError::TruncatedPayload { len, got: have });
        }
    }
    Ok(Some(payload))
}

/// Writes `payload` as one frame. A payload over the maximum is refused
/// before anything is written.
pub fn write_frame<S: Stream + ?Sized>(
    s: &mut S,
    payload: &[u8],
    opts: &FrameOptions,
) -> Result<(), FrameError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= opts.max_frame)
        .ok_or(FrameError::TooLarge {
            len: u64::try_from(payload.len()).unwrap_or(u64::MAX),
            max: opts.max_frame,
        })?;
    s.set_write_timeout(opts.write_timeout)
        .map_err(FrameError::Io)?;
    let io = |e: io::Error| match opts.write_timeout {
        Some(timeout) if is_timeout(&e) => FrameError::WriteTimeout { timeout },
        _ => FrameError::Io(e),
    };
    s.write_all(&len.to_be_bytes()).map_err(io)?;
    s.write_all(payload).map_err(io)?;
    s.flush().map_err(io)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::memory::{pipe, pipe_with_capacity};

    fn opts() -> FrameOptions {
        FrameOptions::default()
    }

    #[test]
    fn round_trips_frames_of_every_interesting_size() {
        let (mut a, mut b) = pipe_with_capacity(3 * READ_STEP);
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            while let Some(p) = read_frame(&mut b, &opts()).unwrap() {
                out.push(p);
            }
            out
        });
        let sizes = [
            0usize,
            1,
            3,
            4,
            5,
            READ_STEP - 1,
            READ_STEP,
            READ_STEP + 1,
            5 * READ_STEP + 17,
        ];
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .map(|&n| (0..n).map(|i| (i % 251) as u8).collect())
            .collect();
        for f in &frames {
            write_frame(&mut a, f, &opts()).unwrap();
        }
        drop(a);
        assert_eq!(reader.join().unwrap(), frames);
    }

    #[test]
    fn reassembles_a_frame_delivered_one_byte_at_a_time() {
        let (mut a, mut b) = pipe_with_capacity(1);
        let writer = std::thread::spawn(move || {
            write_frame(&mut a, b"partial reads", &opts()).unwrap();
        });
        assert_eq!(
            read_frame(&mut b, &opts()).unwrap().unwrap(),
            b"partial reads"
        );
        writer.join().unwrap();
    }

    #[test]
    fn oversize_length_is_refused_before_the_payload_is_read() {
        let (mut a, mut b) = pipe();
        let small = opts().with_max_frame(MIN_MAX_FRAME).unwrap();
        a.write_all(&(MIN_MAX_FRAME + 1).to_be_bytes()).unwrap();
        let err = read_frame(&mut b, &small).unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { len, max } if len == u64::from(MIN_MAX_FRAME) + 1 && max == MIN_MAX_FRAME),
            "{err:?}"
        );
        a.write_all(&u32::MAX.to_be_bytes()).unwrap();
        let err = read_frame(&mut b, &opts()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("frame of 4294967295 bytes exceeds the {DEFAULT_MAX_FRAME}-byte limit")
        );
        // The sender refuses too, writing nothing.
        let big = vec![0u8; MIN_MAX_FRAME as usize + 1];
        assert!(matches!(
            write_frame(&mut a, &big, &small),
            Err(FrameError::TooLarge { .. })
        ));
        drop(a);
        assert!(read_frame(&mut b, &opts()).unwrap().is_none());
    }

    #[test]
    fn truncation_is_told_apart_from_a_clean_close() {
        for (bytes, check) in [
            (&[0u8, 0][..], "after 2 of the 4 length bytes"),
            (
                &[0, 0, 0, 9, 1, 2, 3][..],
                "after 3 of a frame's 9 payload bytes",
            ),
        ] {
            let (mut a, mut b) = pipe();
            a.write_all(bytes).unwrap();
            drop(a);
            let err = read_frame(&mut b, &opts()).unwrap_err();
            assert!(err.to_string().contains(check), "{err}");
        }
    }

    #[test]
    fn idle_and_stalled_frames_time_out() {
        let timed = opts()
            .with_idle_timeout(Some(Duration::from_millis(30)))
            .unwrap()
            .with_frame_timeout(Some(Duration::from_millis(30)))
            .unwrap();
        let (mut a, mut b) = pipe();
        let err = read_frame(&mut b, &timed).unwrap_err();
        assert!(matches!(err, FrameError::IdleTimeout { .. }), "{err:?}");
        a.write_all(&[0, 0, 0, 10, 1]).unwrap();
        let err = read_frame(&mut b, &timed).unwrap_err();
        assert!(
            matches!(err, FrameError::FrameTimeout { got: 5, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn a_peer_that_does_not_read_times_the_writer_out() {
        let (mut a, _b) = pipe_with_capacity(8);
        let timed = opts()
            .with_write_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let err = write_frame(&mut a, &[0u8; 64], &timed).unwrap_err();
        assert!(matches!(err, FrameError::WriteTimeout { .. }), "{err:?}");
    }

    #[test]
    fn options_refuse_tiny_frames_and_zero_timeouts() {
        assert_eq!(
            opts().with_max_frame(MIN_MAX_FRAME - 1),
            Err(FrameOptionsError::MaxFrameTooSmall {
                max: MIN_MAX_FRAME - 1
            })
        );
        assert_eq!(
            opts().with_idle_timeout(Some(Duration::ZERO)),
            Err(FrameOptionsError::ZeroTimeout { which: "idle" })
        );
        assert_eq!(
            opts().with_frame_timeout(Some(Duration::ZERO)),
            Err(FrameOptionsError::ZeroTimeout { which: "frame" })
        );
        assert_eq!(
            opts().with_write_timeout(Some(Duration::ZERO)),
            Err(FrameOptionsError::ZeroTimeout { which: "write" })
        );
        let o = opts().with_max_frame(u32::MAX).unwrap();
        assert_eq!(o.max_frame(), u32::MAX);
        assert_eq!(FrameOptions::default().max_frame(), 64 << 20);
    }
}
