//! [`ResponseBody`]: the lock ends with the response body, not with the handler.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::backend::LockBackend;
use crate::{HeldLock, LeaseLost, LockError};

/// The error of a [`ResponseBody`]: the inner body's, or the lock's when its lease was lost
/// while the body streamed (with [`OnLost::Abort`](crate::OnLost::Abort)).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// The body of a [`LockService`](crate::LockService) response: the handler's body, during
    /// which the request's lock stays held, or the layer's own answer.
    ///
    /// The lock is released when the body has produced its last frame — before that frame is
    /// handed on, so a client that has read the whole response finds the lock free — or when
    /// the body is dropped (the client went away). A body still streaming renews the lease in
    /// the background; if the lease is lost meanwhile and the layer aborts on loss, the body
    /// ends with an error instead of streaming on unprotected.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Locked {
            #[pin]
            inner: B,
            lock: Option<Box<dyn BodyLock>>,
            abort_on_lost: bool,
            // Wakes the body when the lease is lost while it waits (created once it waits).
            lost: Option<Pin<Box<dyn Future<Output = LeaseLost> + Send>>>,
            releasing: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
            last: Option<Frame<Bytes>>,
            done: bool,
        },
        Answer { bytes: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    /// `inner`, holding `lock` (if this layer took one) until it ends.
    pub(crate) fn locked(inner: B, lock: Option<Box<dyn BodyLock>>, abort_on_lost: bool) -> Self {
        Self {
            kind: Kind::Locked {
                inner,
                lock,
                abort_on_lost,
                lost: None,
                releasing: None,
                last: None,
                done: false,
            },
        }
    }

    /// The layer's own answer instead of the handler's.
    pub(crate) fn answer(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Answer {
                bytes: (!bytes.is_empty()).then_some(bytes),
            },
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
        let (mut inner, lock, abort_on_lost, lost, releasing, last, done) =
            match self.project().kind.project() {
                KindProjection::Answer { bytes } => {
                    return Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes))));
                }
                KindProjection::Locked {
                    inner,
                    lock,
                    abort_on_lost,
                    lost,
                    releasing,
                    last,
                    done,
                } => (inner, lock, *abort_on_lost, lost, releasing, last, done),
            };
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
            Kind::Answer { bytes } => bytes.is_none(),
            Kind::Locked {
                inner,
                lock,
                releasing,
                done,
                ..
            } => *done || (lock.is_none() && releasing.is_none() && inner.is_end_stream()),
        }
    }

    fn size_hint(&self) -> SizeHint {
        let exact =
            |bytes: Option<&Bytes>| SizeHint::with_exact(bytes.map_or(0, |b| b.len() as u64));
        match &self.kind {
            Kind::Answer { bytes } => exact(bytes.as_ref()),
            Kind::Locked { done: true, .. } => exact(None),
            Kind::Locked {
                last: Some(frame), ..
            } => exact(frame.data_ref()),
            Kind::Locked { inner, .. } => inner.size_hint(),
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let holding = match &self.kind {
            Kind::Locked { lock, .. } => lock.is_some(),
            Kind::Answer { .. } => false,
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
        LockError::LeaseLost {
            key: self.guard().lock_names().joined_keys(),
        }
    }

    fn renew_in_background(&mut self) {
        HeldLock::renew_in_background(self);
    }

    fn release(self: Box<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(self.release_quietly())
    }
}
