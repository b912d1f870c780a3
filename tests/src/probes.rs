//! Holding handlers inside until the test lets them out.

use std::time::Duration;

/// A handler that reports when it is entered and stays inside until the test lets it out.
#[derive(Clone, Debug)]
pub struct Gate {
    entered: tokio::sync::mpsc::UnboundedSender<String>,
    exit: std::sync::Arc<tokio::sync::Semaphore>,
}

/// The test's side of a [`Gate`].
#[derive(Debug)]
pub struct GateControl {
    entered: tokio::sync::mpsc::UnboundedReceiver<String>,
    exit: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Gate {
    /// A closed gate and its control.
    pub fn new() -> (Self, GateControl) {
        let (entered, entered_rx) = tokio::sync::mpsc::unbounded_channel();
        let exit = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        (
            Self {
                entered,
                exit: exit.clone(),
            },
            GateControl {
                entered: entered_rx,
                exit,
            },
        )
    }

    /// Announces `who` has entered, then waits until the test lets one visitor out.
    pub async fn pass(&self, who: String) {
        self.entered.send(who).ok();
        self.exit
            .acquire()
            .await
            .expect("the gate is never closed")
            .forget();
    }
}

impl GateControl {
    /// Waits until somebody enters (at most 10 s) and says who.
    pub async fn entered(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), self.entered.recv())
            .await
            .expect("nobody entered the gate within 10 s")
            .expect("the gate is alive")
    }

    /// Whoever entered since the last look, without waiting.
    pub fn entered_now(&mut self) -> Option<String> {
        self.entered.try_recv().ok()
    }

    /// Lets `count` visitors out.
    pub fn let_out(&self, count: usize) {
        self.exit.add_permits(count);
    }
}
