//! [`drive`]: a service [`Session`] over an async transport, with the caller's clock.

use core::convert::Infallible;
use core::fmt;
use core::future::{Future, poll_fn};
use core::pin::pin;
use core::task::Poll;

use embedded_io_async::{Read, Write};

use crate::service::{Progress, Session, SessionError, Want};
use crate::time::Instant;

/// The caller's clock, for the session's deadlines: embedded-io-async has no timer, so the
/// adapter lends its own (embassy-time's, tokio's, a test's).
pub trait Clock {
    /// The current time on the clock the session's [`Instant`]s count on.
    fn now(&self) -> Instant;

    /// Completes once the clock reaches `deadline` (at once if it has).
    fn sleep_until(&self, deadline: Instant) -> impl Future<Output = ()>;
}

/// Why [`drive`] returned: the connection is over either way. `E` is the transport's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Ended<E> {
    /// The peer ended its stream between frames: a normal close.
    PeerClosed,
    /// The session ended the connection (bad input, the peer ended its stream mid-frame, the
    /// header or idle timeout): log it and pass it to [`Session::finish`].
    Session(SessionError),
    /// The transport failed.
    Transport(E),
    /// The transport did not take a whole reply within the session's send timeout
    /// ([`Config::with_send_timeout`](crate::service::Config::with_send_timeout)): the peer
    /// keeps its window shut. Not a protocol error (the session did nothing wrong).
    SendStalled,
    /// The transport accepted no bytes of a non-empty write (`Ok(0)`, against embedded-io's
    /// contract).
    WriteZero,
    /// The input buffer is full and the session wants more: it is smaller than
    /// [`Config::max_input_len`](crate::service::Config::max_input_len) (an adapter bug).
    InputFull,
    /// The session's next reply needs this many bytes of output, more than the output buffer
    /// has: it is smaller than
    /// [`Config::max_output_len`](crate::service::Config::max_output_len) (an adapter bug).
    OutputTooSmall {
        /// The output room the reply needs.
        required: usize,
    },
}

impl<E> Ended<E> {
    /// The session error to record with [`Session::finish`], if the session ended it.
    pub fn session_error(&self) -> Option<SessionError> {
        match self {
            Ended::Session(e) => Some(*e),
            _ => None,
        }
    }

    /// A static description (the session's reason for [`Ended::Session`]; the transport's
    /// error is not described).
    pub const fn as_str(&self) -> &'static str {
        match self {
            Ended::PeerClosed => "peer closed",
            Ended::Session(e) => e.as_str(),
            Ended::Transport(_) => "transport error",
            Ended::SendStalled => "the peer took no reply within the send timeout",
            Ended::WriteZero => "transport accepted no bytes",
            Ended::InputFull => "input buffer smaller than the largest frame",
            Ended::OutputTooSmall { .. } => "output buffer smaller than the largest reply",
        }
    }
}

impl<E: fmt::Debug> fmt::Display for Ended<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Session(e) => e.fmt(f),
            Ended::Transport(e) => write!(f, "transport error: {e:?}"),
            Ended::OutputTooSmall { required } => {
                write!(f, "output buffer too small: {required} bytes required")
            }
            other => f.write_str(other.as_str()),
        }
    }
}

impl<E> From<SessionError> for Ended<E> {
    fn from(e: SessionError) -> Self {
        Ended::Session(e)
    }
}

/// The transport's side of a failed send. `drive` sends only bytes the session encoded, so
/// an encoding error cannot come up; it would read as the transport refusing them.
fn write_failed<E>(e: super::WriteError<E>) -> Ended<E> {
    match e {
        super::WriteError::Io(e) => Ended::Transport(e),
        super::WriteError::WriteZero | super::WriteError::Encode(_) => Ended::WriteZero,
    }
}

/// Which of two futures finished first.
enum Either<A, B> {
    First(A),
    Second(B),
}

/// Polls `a` then `b` until one is ready; `a` wins a tie (data that arrived by the deadline is
/// served).
async fn select<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = pin!(a);
    let mut b = pin!(b);
    poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::First(v));
        }
        if let Poll::Ready(v) = b.as_mut().poll(cx) {
            return Poll::Ready(Either::Second(v));
        }
        Poll::Pending
    })
    .await
}

/// Pending once, the task woken at once: the executor polls its other ready tasks before this
/// one again. No allocation, no executor-specific call.
async fn yield_now() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

/// Serves one connection: runs `session` over `transport` until the peer closes, the session
/// or the transport fails, and says which ([`Ended`]). The caller then closes the transport and
/// calls [`Session::finish`] with [`Ended::session_error`].
///
/// This is the loop the service's [module docs](crate::service) describe: call the session,
/// send what it wrote, drop what it consumed, on [`Want::Call`] yield to the executor's other
/// tasks once and call again, and on [`Want::Input`] read as much as `input`
/// has room for, racing the read against [`Session::next_timeout`] on `clock` (and calling
/// [`Session::handle_timeout`] when the deadline passes first). Each reply is raced against
/// [`Session::send_timeout`] the same way ([`Ended::SendStalled`]). `input` and `output` must hold
/// [`Config::max_input_len`](crate::service::Config::max_input_len) and
/// [`Config::max_output_len`](crate::service::Config::max_output_len) bytes.
///
/// A read the deadline wins is dropped: `transport`'s `read` must lose no bytes when dropped
/// unfinished (embassy-net's and tokio's do), and `clock`'s sleep must not end before its
/// `now` reaches the deadline (a clock that rounds the deadline down would have the loop call
/// again until it does).
///
/// `handle` makes each session call: `|session, input, output| session.handle(input, output,
/// &mut ws, &counters)` with the caller's [`Workspace`](crate::service::Workspace) and
/// [`Counters`](crate::service::Counters). It is called synchronously and never across an
/// await, so a workspace shared by every connection of an executor can be borrowed inside it
/// only (behind a blocking mutex, as the firmware does). Nothing is flushed: the caller's close
/// does that.
pub async fn drive<T, C, H>(
    transport: &mut T,
    clock: &C,
    session: &mut Session,
    input: &mut [u8],
    output: &mut [u8],
    handle: H,
) -> Ended<T::Error>
where
    T: Read + Write + ?Sized,
    C: Clock + ?Sized,
    H: FnMut(&mut Session, &[u8], &mut [u8]) -> Result<Progress, SessionError>,
{
    match serve(transport, clock, session, input, output, handle).await {
        Err(ended) => ended,
        Ok(never) => match never {},
    }
}

async fn serve<T, C, H>(
    transport: &mut T,
    clock: &C,
    session: &mut Session,
    input: &mut [u8],
    output: &mut [u8],
    mut handle: H,
) -> Result<Infallible, Ended<T::Error>>
where
    T: Read + Write + ?Sized,
    C: Clock + ?Sized,
    H: FnMut(&mut Session, &[u8], &mut [u8]) -> Result<Progress, SessionError>,
{
    let mut buffered = 0;
    loop {
        session.set_time(clock.now());
        let p = handle(session, &input[..buffered], output)?;
        if p.written > 0 {
            let reply = &output[..p.written];
            let send = async { super::write_all!(transport, reply, ., await) };
            let deadline = clock.now() + session.send_timeout();
            match select(send, clock.sleep_until(deadline)).await {
                Either::First(sent) => sent.map_err(write_failed)?,
                Either::Second(()) => return Err(Ended::SendStalled),
            }
        }
        input.copy_within(p.consumed..buffered, 0);
        buffered -= p.consumed;
        match p.want {
            // The session ends a call after each costly request (a key derivation) and after a
            // bounded amount of zlib work (`CALL_WORK`): the other tasks of the executor
            // (connections, the network stack) run before the next one.
            Want::Call => {
                yield_now().await;
                continue;
            }
            // A non-empty reply was just sent, so calling again with the whole buffer makes
            // progress; an empty one means the buffer is too small for the reply.
            Want::Output(_) if p.written > 0 => continue,
            Want::Output(required) => return Err(Ended::OutputTooSmall { required }),
            Want::Input(_) => {}
        }
        // The session keeps every frame it asks for within max_input_len.
        let Some(free) = input.get_mut(buffered..).filter(|free| !free.is_empty()) else {
            return Err(Ended::InputFull);
        };
        let read = transport.read(free);
        // The session decides what its deadline covers; this loop only waits for it.
        let n = match session.next_timeout() {
            Some(deadline) => match select(read, clock.sleep_until(deadline)).await {
                Either::First(r) => r.map_err(Ended::Transport)?,
                Either::Second(()) => {
                    session.handle_timeout(clock.now())?;
                    continue;
                }
            },
            None => read.await.map_err(Ended::Transport)?,
        };
        if n == 0 {
            session.end_of_input(buffered)?;
            return Err(Ended::PeerClosed);
        }
        buffered += n.min(input.len() - buffered);
    }
}
