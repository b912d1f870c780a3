//! [`ResponseBody`]: the lock ends with the response body, not with the handler.

use std::collections::VecDeque;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::backend::LockBackend;
use crate::engine::{HeldLock, LeaseLost, LockError};

/// The error of a [`ResponseBody`]: the inner body's, or the lock's when its lease was lost
/// while the body streamed (with [`OnLost::Abort`](crate::OnLost::Abort)).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// The body of a [`LockService`](crate::LockService) response: the handler's body, during
    /// which the request's lock stays held, or the layer's own answer.
    ///
    /// The lock is released when the body has produced its last frame — before that frame is
    /// handed on, so a client that has read the whole response finds the lock free — or when
    /// the body is dropped (the client went away). A body whose frames are all ready when the
    /// handler returns (any body built from bytes or a string) is read right away and the lock
    /// released before the response goes out, so head and body leave together. A body still
    /// streaming renews the lease in the background; if the lease is lost meanwhile and the
    /// layer aborts on loss, the body ends with an error instead of streaming on unprotected.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        // No lock of this layer's: the inner body as it is.
        Unlocked {
            #[pin]
            inner: B,
        },
        // The inner body, holding the lock until it ends.
        Locked {
            inner: Pin<Box<B>>,
            // Frames read before the response was returned, handed on first.
            ahead: VecDeque<Frame<Bytes>>,
            lock: Option<Box<dyn BodyLock>>,
            abort_on_lost: bool,
            // Wakes the body when the lease is lost while it waits (created once it waits).
            lost: Option<Pin<Box<dyn Future<Output = LeaseLost> + Send>>>,
            releasing: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
            last: Option<Frame<Bytes>>,
            done: bool,
        },
        // Read to its end already: the handler's whole answer, or the layer's own.
        Complete {
            frames: VecDeque<Frame<Bytes>>,
            error: Option<BoxError>,
        },
    }
}

/// How much of a body that is ready at once is read before the response is returned; past
/// it, the body streams under the lock.
const READ_AHEAD_LIMIT: usize = 64 * 1024;

impl<B> ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    /// `inner`, holding `lock` until it ends. What `inner` has ready is read now; if that is
    /// all of it, the lock is released before this returns.
    pub(crate) async fn holding(inner: B, lock: Box<dyn BodyLock>, abort_on_lost: bool) -> Self {
        let mut inner = Box::pin(inner);
        let mut ahead = VecDeque::new();
        let read = poll_fn(|cx| Poll::Ready(read_ready(inner.as_mut(), cx, &mut ahead))).await;
        let kind = match read {
            ReadAhead::Ended(error) => {
                lock.release().await;
                Kind::Complete {
                    frames: ahead,
                    error,
                }
            }
            ReadAhead::Waits => Kind::Locked {
                inner,
                ahead,
                lock: Some(lock),
                abort_on_lost,
                lost: None,
                releasing: None,
                last: None,
                done: false,
            },
        };
        Self { kind }
    }
}

impl<B> ResponseBody<B> {
    /// `inner` as it is: this layer holds no lock for it.
    pub(crate) fn unlocked(inner: B) -> Self {
        Self {
            kind: Kind::Unlocked { inner },
        }
    }

    /// The layer's own answer instead of the handler's.
    pub(crate) fn answer(bytes: Bytes) -> Self {
        let frames = (!bytes.is_empty()).then(|| Frame::data(bytes));
        Self {
            kind: Kind::Complete {
                frames: frames.into_iter().collect(),
                error: None,
            },
        }
    }
}

/// Where reading the frames a body has ready stopped.
enum ReadAhead {
    /// At its end, or at its error.
    Ended(Option<BoxError>),
    /// At a frame it does not have yet, or at the read-ahead limit.
    Waits,
}

/// Moves the frames `inner` has ready into `frames`, up to [`READ_AHEAD_LIMIT`] bytes.
fn read_ready<B>(
    mut inner: Pin<&mut B>,
    cx: &mut Context<'_>,
    frames: &mut VecDeque<Frame<Bytes>>,
) -> ReadAhead
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let mut read = 0;
    loop {
        if inner.is_end_stream() {
            return ReadAhead::Ended(None);
        }
        if read >= READ_AHEAD_LIMIT {
            return ReadAhead::Waits;
        }
        match inner.as_mut().poll_frame(cx) {
            Poll::Pending => return ReadAhead::Waits,
            Poll::Ready(None) => return ReadAhead::Ended(None),
            Poll::Ready(Some(Err(error))) => return ReadAhead::Ended(Some(error.into())),
            Poll::Ready(Some(Ok(frame))) => {
                read += frame.data_ref().map_or(0, Bytes::len);
                frames.push_back(frame);
            }
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let (inner, ahead, lock, abort_on_lost, lost, releasing, last, done) =
            match self.project().kind.project() {
                KindProjection::Unlocked { inner } => {
                    return inner.poll_frame(cx).map_err(Into::into);
                }
                KindProjection::Complete { frames, error } => {
                    let next = frames.pop_front().map(Ok);
                    return Poll::Ready(next.or_else(|| error.take().map(Err)));
                }
                KindProjection::Locked {
                    inner,
                    ahead,
                    lock,
                    abort_on_lost,
                    lost,
                    releasing,
                    last,
                    done,
                } => (
                    inner,
                    ahead,
                    lock,
                    *abort_on_lost,
                    lost,
                    releasing,
                    last,
                    done,
                ),
            };
        // Frames read ahead are never the last one: the body had not ended.
        if let Some(frame) = ahead.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        loop {
            if let Some(release) = releasing {
                ready!(release.as_mut().poll(cx));
                *releasing = None;
                *done = true;
                return Poll::Ready(last.take().map(Ok));
            }
            if *done {
                return Poll::Ready(None);
            }
            if let Some(held) = lock
                .as_ref()
                .filter(|held| abort_on_lost && !held.is_held())
            {
                let error = held.lost_error();
                tracing::warn!(%error, "lock lost while the response streamed; ending it");
                // Dropped, the lock is given back in the background.
                *lock = None;
                *done = true;
                return Poll::Ready(Some(Err(error.into())));
            }
            match inner.as_mut().poll_frame(cx) {
                Poll::Pending => {
                    let Some(held) = lock else {
                        return Poll::Pending;
                    };
                    held.renew_in_background();
                    if !abort_on_lost {
                        return Poll::Pending;
                    }
                    let lost = lost.get_or_insert_with(|| Box::pin(held.lost_signal()));
                    if lost.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                }
                Poll::Ready(Some(Ok(frame))) => match lock.take() {
                    Some(held) if inner.is_end_stream() => {
                        *last = Some(frame);
                        *releasing = Some(held.release());
                    }
                    held => {
                        *lock = held;
                        return Poll::Ready(Some(Ok(frame)));
                    }
                },
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error.into()))),
                Poll::Ready(None) => match lock.take() {
                    Some(held) => *releasing = Some(held.release()),
                    None => {
                        *done = true;
                        return Poll::Ready(None);
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Unlocked { inner } => inner.is_end_stream(),
            Kind::Complete { frames, error } => frames.is_empty() && error.is_none(),
            Kind::Locked {
                inner,
                ahead,
                lock,
                releasing,
                done,
                ..
            } => {
                *done
                    || (ahead.is_empty()
                        && lock.is_none()
                        && releasing.is_none()
                        && inner.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Unlocked { inner } => inner.size_hint(),
            Kind::Complete { frames, .. } => SizeHint::with_exact(data_len(frames.iter())),
            Kind::Locked { done: true, .. } => SizeHint::with_exact(0),
            Kind::Locked {
                last: Some(frame), ..
            } => SizeHint::with_exact(data_len([frame])),
            Kind::Locked { inner, ahead, .. } => {
                let (hint, ahead) = (inner.size_hint(), data_len(ahead.iter()));
                let mut total = SizeHint::new();
                total.set_lower(hint.lower() + ahead);
                if let Some(upper) = hint.upper() {
                    total.set_upper(upper + ahead);
                }
                total
            }
        }
    }
}

/// How many data bytes `frames` carry.
fn data_len<'a>(frames: impl IntoIterator<Item = &'a Frame<Bytes>>) -> u64 {
    let bytes = frames
        .into_iter()
        .filter_map(Frame::data_ref)
        .map(Bytes::len);
    bytes.sum::<usize>() as u64
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holding = match &self.kind {
            Kind::Locked { lock, .. } => lock.is_some(),
            Kind::Unlocked { .. } | Kind::Complete { .. } => false,
        };
        f.debug_struct("ResponseBody")
            .field("holding_lock", &holding)
            .finish_non_exhaustive()
    }
}

/// A lock held by a response body, whatever its backend.
pub(crate) trait BodyLock: Send {
    /// Whether the lease is still certainly held.
    fn is_held(&self) -> bool;
    /// The error that ends a body whose lease was lost.
    fn lost_error(&self) -> LockError;
    /// Resolves when the lease is lost.
    fn lost_signal(&self) -> Pin<Box<dyn Future<Output = LeaseLost> + Send>>;
    /// Keeps the lease while the body waits for its next frame.
    fn renew_in_background(&mut self);
    /// Gives the lock back; the future ends when the store confirmed or the store timeout
    /// passed.
    fn release(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

impl<B: LockBackend> BodyLock for HeldLock<B> {
    fn is_held(&self) -> bool {
        self.guard().is_held()
    }

    fn lost_signal(&self) -> Pin<Box<dyn Future<Output = LeaseLost> + Send>> {
        Box::pin(self.guard().lost())
    }

    fn lost_error(&self) -> LockError {
        let keys: Vec<&str> = self.guard().keys().collect();
        LockError::LeaseLost {
            key: keys.join(", "),
        }
    }

    fn renew_in_background(&mut self) {
        HeldLock::renew_in_background(self);
    }

    fn release(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(release_logged(*self))
    }
}

/// Gives `lock` back, logging what went wrong: the response is delivered already, and a lease
/// that was not given back expires by itself.
pub(crate) async fn release_logged<B: LockBackend>(lock: HeldLock<B>) {
    let name = lock.name().to_owned();
    match lock.release().await {
        Ok(()) => tracing::trace!(lock = name, "released"),
        Err(error) => tracing::warn!(lock = name, %error, "release failed"),
    }
}
