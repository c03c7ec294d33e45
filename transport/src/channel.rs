//! A [`Channel`]: messages over frames over a [`Stream`], closed on the
//! first failure. When what arrives is not a valid message (an oversize
//! frame, an unknown version or kind, bad CBOR), the channel tells the peer
//! with an [`ErrorMessage`] and closes the connection.

use std::time::Duration;

use super::Stream;
use super::frame::{FrameError, FrameOptions, read_frame, write_frame};
use super::message::{DecodeError, EncodeError, ErrorCode, ErrorMessage, Message};

/// How long the error report to a misbehaving peer may take to write.
const ERROR_REPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a channel operation failed. A failed receive closes the channel; a
/// failed write stops sending but still lets [`Channel::recv`] read what the
/// peer sent before it went away (typically its error report);
/// [`ChannelError::Encode`] changes nothing. The cause is part of each
/// message and not a `source`: printed as a chain (anyhow's `{:#}`), a
/// source would repeat it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    #[error("the connection is closed")]
    Closed,
    #[error("the peer closed the connection")]
    PeerClosed,
    #[error("receiving: {0}")]
    Receive(FrameError),
    #[error("received an invalid message: {0}")]
    Decode(DecodeError),
    #[error("sending: {0}")]
    Send(FrameError),
    #[error("message not sent: {0}")]
    Encode(EncodeError),
}

impl ChannelError {
    /// The code an [`ErrorMessage`] reporting this failure to the peer
    /// carries, if it is one worth reporting.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ChannelError::Receive(FrameError::TooLarge { .. }) => Some(ErrorCode::FrameTooLarge),
            ChannelError::Receive(
                FrameError::IdleTimeout { .. } | FrameError::FrameTimeout { .. },
            ) => Some(ErrorCode::Timeout),
            ChannelError::Decode(DecodeError::UnknownVersion { .. }) => {
                Some(ErrorCode::UnsupportedVersion)
            }
            ChannelError::Decode(DecodeError::UnknownKind { .. }) => Some(ErrorCode::UnknownKind),
            ChannelError::Decode(_) => Some(ErrorCode::Malformed),
            _ => None,
        }
    }
}

/// One connection speaking the protocol.
#[derive(Debug)]
pub struct Channel<S: Stream> {
    stream: S,
    options: FrameOptions,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// A write failed: nothing more is sent, what arrived can still be read.
    SendFailed,
    Closed,
}

impl<S: Stream> Channel<S> {
    /// A channel over a connected stream.
    pub fn new(stream: S, options: FrameOptions) -> Channel<S> {
        Channel {
            stream,
            options,
            state: State::Open,
        }
    }

    /// Whether the channel can still send and receive.
    pub fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// The options the channel was made with.
    pub fn options(&self) -> &FrameOptions {
        &self.options
    }

    /// Sends one message. A message that does not encode (or exceeds the
    /// frame limit) is refused before anything is written, and the channel
    /// stays open; after a failed write nothing more is sent, but
    /// [`Channel::recv`] still reads what the peer sent before.
    pub fn send(&mut self, message: &Message) -> Result<(), ChannelError> {
        if self.state != State::Open {
            return Err(ChannelError::Closed);
        }
        let payload = message.encode().map_err(ChannelError::Encode)?;
        let limit = u64::from(self.options.max_frame());
        if u64::try_from(payload.len()).map_or(true, |l| l > limit) {
            return Err(ChannelError::Send(FrameError::TooLarge {
                len: u64::try_from(payload.len()).unwrap_or(u64::MAX),
                max: self.options.max_frame(),
            }));
        }
        write_frame(&mut self.stream, &payload, &self.options).map_err(|e| {
            self.state = State::SendFailed;
            ChannelError::Send(e)
        })
    }

    /// Receives one message. Any failure closes the channel; a frame or
    /// message the peer got wrong is first reported to it (see
    /// [`ChannelError::code`]). A clean close between frames is
    /// [`ChannelError::PeerClosed`].
    pub fn recv(&mut self) -> Result<Message, ChannelError> {
        if self.state == State::Closed {
            return Err(ChannelError::Closed);
        }
        let frame = read_frame(&mut self.stream, &self.options);
        self.conclude(frame)
    }

    /// Waits at most `wait` for the next message to begin: `Ok(None)` when
    /// none did (nothing was read, the channel stays open: a frame's first
    /// byte is what ends the idle wait); otherwise as [`Channel::recv`].
    /// For a side that must also watch something else, such as a running
    /// job.
    pub fn recv_within(&mut self, wait: Duration) -> Result<Option<Message>, ChannelError> {
        let Ok(options) = self.options.with_idle_timeout(Some(wait)) else {
            // A zero wait: nothing can begin within it.
            return Ok(None);
        };
        if self.state == State::Closed {
            return Err(ChannelError::Closed);
        }
        match read_frame(&mut self.stream, &options) {
            Err(FrameError::IdleTimeout { .. }) => Ok(None),
            other => self.conclude(other).map(Some),
        }
    }

    /// Decodes a frame read (or its failure); any failure closes the
    /// channel, after reporting it to the peer where it was theirs.
    fn conclude(
        &mut self,
        frame: Result<Option<Vec<u8>>, FrameError>,
    ) -> Result<Message, ChannelError> {
        let result = match frame {
            Ok(Some(payload)) => Message::decode(&payload).map_err(ChannelError::Decode),
            Ok(None) => Err(ChannelError::PeerClosed),
            Err(e) => Err(ChannelError::Receive(e)),
        };
        if let Err(e) = &result {
            if let Some(code) = e.code()
                && self.state == State::Open
            {
                self.report(code, &e.to_string());
            }
            self.close_now();
        }
        result
    }

    /// Tells the peer what went wrong, then closes the connection.
    pub fn fail(&mut self, code: ErrorCode, message: &str) {
        if self.state == State::Open {
            self.report(code, message);
        }
        self.close_now();
    }

    /// Says goodbye and closes the connection.
    pub fn close(&mut self) -> Result<(), ChannelError> {
        let sent = self.send(&Message::Bye);
        self.close_now();
        sent
    }

    /// Best effort: the connection is being closed anyway.
    fn report(&mut self, code: ErrorCode, message: &str) {
        let report = Message::Error(ErrorMessage::new(code, message));
        let options = self
            .options
            .with_write_timeout(Some(
                self.options
                    .write_timeout()
                    .map_or(ERROR_REPORT_TIMEOUT, |t| t.min(ERROR_REPORT_TIMEOUT)),
            ))
            .unwrap_or(self.options);
        if let Ok(payload) = report.encode() {
            let _ = write_frame(&mut self.stream, &payload, &options);
        }
    }

    fn close_now(&mut self) {
        self.state = State::Closed;
        // Already closed by the peer is as good as closed.
        let _ = self.stream.shutdown();
    }
}

impl<S: Stream> Drop for Channel<S> {
    fn drop(&mut self) {
        if self.state != State::Closed {
            self.close_now();
        }
    }
}
