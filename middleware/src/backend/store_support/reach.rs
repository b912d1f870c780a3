//! Whether a store refuses connections now, for clients that do not say so: sqlx's pool tries
//! again and again while a database refuses (it takes a refusal for a server starting up)
//! until its acquire timeout, and a ZooKeeper client waits for a server to reconnect to. Either
//! way every call would wait out the locker's store timeout while the store is down.
//!
//! Here a call that is not answered within [`DIAL_AFTER`] makes the store be dialled
//! directly, once at a time; a refusal (or any failure to connect) is then every call's answer,
//! at once, until a dial every [`DIAL_EVERY`] connects again.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;

use crate::backend::BackendError;

/// How long a call may go unanswered before the store is dialled.
const DIAL_AFTER: Duration = Duration::from_millis(100);
/// How often a store that refused is dialled again.
const DIAL_EVERY: Duration = Duration::from_millis(100);
/// How long one dial may take: a store that accepts connections but answers nothing is not
/// refusing (calls run into the store timeout, as on a connection it stopped answering).
const DIAL_WITHIN: Duration = Duration::from_secs(1);

/// Connects to the store once, and lets the connection go: whether it could.
pub(crate) type Dial = Box<dyn Fn() -> BoxFuture<'static, Result<(), BackendError>> + Send + Sync>;

/// Whether a store refuses connections now (and why), and how to find out.
pub(crate) struct Reach {
    refused: watch::Sender<Option<BackendError>>,
    dialling: AtomicBool,
    dial: Dial,
}

impl std::fmt::Debug for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reach")
            .field("refused", &*self.refused.borrow())
            .finish_non_exhaustive()
    }
}

impl Reach {
    /// The reach of a store that `dial` connects to.
    pub(crate) fn new(dial: Dial) -> Arc<Self> {
        Arc::new(Self {
            refused: watch::Sender::new(None),
            dialling: AtomicBool::new(false),
            dial,
        })
    }

    /// `call`'s answer; while the store refuses connections, that refusal at once instead.
    pub(crate) async fn call<T>(
        self: &Arc<Self>,
        call: impl Future<Output = T>,
    ) -> Result<T, BackendError> {
        let mut refused = self.refused.subscribe();
        if let Some(error) = refused.borrow_and_update().clone() {
            return Err(error);
        }
        let mut call = pin!(call);
        if let Ok(answer) = tokio::time::timeout(DIAL_AFTER, call.as_mut()).await {
            return Ok(answer);
        }
        self.dial();
        tokio::select! {
            answer = call => Ok(answer),
            Ok(error) = refused.wait_for(Option::is_some) => Err(error.clone().unwrap_or_else(|| {
                BackendError::new("the store refused a connection")
            })),
        }
    }

    /// Dials the store, unless a dial is under way: while it refuses, every call is answered
    /// with its refusal, and it is dialled again every [`DIAL_EVERY`] until it connects. Also
    /// for a call that failed: the store may be down for everyone.
    pub(crate) fn dial(self: &Arc<Self>) {
        if self.dialling.swap(true, Ordering::AcqRel) {
            return;
        }
        let reach = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let refusal = match tokio::time::timeout(DIAL_WITHIN, (reach.dial)()).await {
                    Ok(Err(error)) => Some(error),
                    Ok(Ok(())) | Err(_) => None,
                };
                let refusing = refusal.is_some();
                reach.refused.send_replace(refusal);
                if !refusing {
                    break;
                }
                tokio::time::sleep(DIAL_EVERY).await;
            }
            reach.dialling.store(false, Ordering::Release);
        });
    }
}
